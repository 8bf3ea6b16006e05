"""What a first `mlprof run` says: honest counts of processes and profiles,
one name per process, and what to do when nothing recorded a zone."""
import os
import re

from conftest import LIBRARY, mlprof

# A parent that forks two workers, as a DataLoader does: the first records a
# zone, the second never does (no profile of its own, seen by the sampler).
FORKS = f"""
import ctypes, os, time
lib = ctypes.CDLL({LIBRARY!r})
kids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        if i == 0:
            lib.mlprof_zone_begin(b"work")
            lib.mlprof_zone_end()
        time.sleep(0.6)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
"""


def test_processes_seen_only_by_the_sampler_are_counted(tmp_path):
    out = tmp_path / "run"
    # Without stack sampling: with it, a Python child of a sampling process
    # starts its own profile at the fork (docs/stacks.md).
    r = mlprof("run", "-o", out, "--sample-ms", "20", "--stacks", "off", "--",
               "/usr/bin/python3", "-c", FORKS)
    files = sorted(os.listdir(out))
    # mlprof's own sampling profile, the parent's and the recording worker's
    assert len(files) == 3, files
    assert f"\nmlprof: 3 profiles in {out}\n" in r.stderr
    header = r.stderr.splitlines()[0]
    assert header.startswith(
        "mlprof report: 4 processes (3 profiled, 1 sampled only), "), header
    assert re.search(r"pid \d+ \(python3\), no profile", r.stderr)


def test_a_process_has_one_name_everywhere(tmp_path):
    # /usr/bin/python3 is a link to python3.X: the name is argv[0]'s, as in
    # the profile's file name, in the tables and the trace alike.
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", "/usr/bin/python3", "-c", FORKS)
    real = os.path.basename(os.path.realpath("/usr/bin/python3"))
    assert all(f.startswith(("python3-", "mlprof-")) for f in os.listdir(out))
    trace = tmp_path / "t.json"
    mlprof("trace", out, "-o", trace)
    for text in (r.stderr, trace.read_text()):
        assert "python3" in text
        # Source paths (the stack samples' functions) may name the
        # library's directory, /usr/lib/python3.X/: not a process name.
        text = text.replace("/%s/" % real, "/")
        if real != "python3":
            assert real not in text


def test_no_zones_says_what_to_do(tmp_path):
    r = mlprof("run", "-o", tmp_path / "run", "--", "/usr/bin/python3", "-c",
               "pass")
    assert "No zones recorded" in r.stderr
    for hint in ('with prof.zone("forward")', "mlprof.torch.profile_model",
                 'MLPROF_ZONE("decode")'):
        assert hint in r.stderr
