"""Every front end's output on committed profiles, byte for byte.

tests/golden/profiles holds small real runs (a data-bound pipeline, a
leaking process, the inference example, two workload runs for compare and
diff). Each command below runs on them and its standard output and exit
status must equal tests/golden/expected/NAME. This is how structural
changes (moving code between layers, one analysis driver for every front
end) show they changed no output. A change that means to change output
regenerates the files with MLPROF_UPDATE_GOLDEN=1 and the diff is reviewed
in the commit."""
import os
import subprocess

import pytest

from conftest import MLPROF

HERE = os.path.join(os.path.dirname(__file__), "..", "golden")
PROFILES = os.path.abspath(os.path.join(HERE, "profiles"))
EXPECTED = os.path.abspath(os.path.join(HERE, "expected"))

# name: arguments of mlprof, run in tests/golden/profiles.
COMMANDS = {
    "report-pipeline.txt": ["report", "pipeline"],
    "report-pipeline.json": ["report", "-f", "json", "pipeline"],
    "report-pipeline.csv": ["report", "-f", "csv", "pipeline"],
    "report-pipeline-findings.csv": ["report", "-f", "csv", "-t", "findings",
                                     "pipeline"],
    "report-pipeline-samples.csv": ["report", "-f", "csv", "-t", "samples",
                                    "pipeline"],
    "report-pipeline-slo.txt": ["report", "--slo", "forward=20ms",
                                "pipeline"],
    "report-memory.txt": ["report", "memory"],
    "report-memory.json": ["report", "-f", "json", "memory"],
    "report-infer.txt": ["report", "-s", "p99", "-n", "5", "infer"],
    "report-infer.json": ["report", "-f", "json", "infer"],
    "trace-pipeline.json": ["trace", "pipeline", "-o", "-"],
    "trace-infer.json": ["trace", "infer", "-o", "-"],
    "html-pipeline.html": ["html", "pipeline", "-o", "{out}"],
    "html-compare.html": ["html", "--compare", "base", "new", "-o", "{out}"],
    "compare.txt": ["compare", "base", "new"],
    "compare.json": ["compare", "-f", "json", "base", "new"],
    "diff.txt": ["diff", "base", "new"],
    "diff.json": ["diff", "-f", "json", "base", "new"],
    "diff.junit": ["diff", "-f", "junit", "base", "new"],
}


def run(args, tmp):
    """Exit status and standard output; for a command that writes a file
    ({out} in its arguments), the file instead of standard output (which
    names the temporary path)."""
    out = str(tmp / "out")
    p = subprocess.run([MLPROF, *(out if a == "{out}" else a for a in args)],
                       cwd=PROFILES, capture_output=True, timeout=120)
    if "{out}" in args:
        with open(out, "rb") as f:
            return b"exit %d\n" % p.returncode + f.read()
    return b"exit %d\n" % p.returncode + p.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_output_unchanged(name, tmp_path):
    got = run(COMMANDS[name], tmp_path)
    path = os.path.join(EXPECTED, name)
    if os.environ.get("MLPROF_UPDATE_GOLDEN"):
        os.makedirs(EXPECTED, exist_ok=True)
        with open(path, "wb") as f:
            f.write(got)
    with open(path, "rb") as f:
        want = f.read()
    assert got == want, (
        f"mlprof {' '.join(COMMANDS[name])} changed its output; if that is "
        f"meant, rerun with MLPROF_UPDATE_GOLDEN=1 and review the diff of "
        f"{path}")


def test_every_expected_file_has_its_command():
    """A stale expected file would otherwise sit there checking nothing."""
    assert sorted(os.listdir(EXPECTED)) == sorted(COMMANDS)
