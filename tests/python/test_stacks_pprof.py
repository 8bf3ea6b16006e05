"""mlprof export --format pprof (docs/stacks.md, "pprof"): the stack samples
as a perftools.profiles.Profile, decoded here by protoc against the fields
of the public profile.proto (tests/proto/profile.proto)."""
import ast
import collections
import json
import os
import subprocess

import pytest

from test_stacks import SPIN, mlprof_cmd, run  # noqa: F401 (SPIN: the spin())

PROTO_DIR = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "proto")

# Known shares (20/30/50) of three functions, in a zone, over three steps.
KNOWN = """
import mlprof

def twenty(): spin(0.2)
def thirty(): spin(0.3)
def fifty(): spin(0.5)

prof = mlprof.Profiler().start()
for _ in range(3):
    prof.step()
    with prof.zone("work"):
        twenty(); thirty(); fifty()
prof.step()
prof.stop()
"""


def parse_text(text):
    """protoc --decode's text format as nested dicts of lists."""
    root = collections.defaultdict(list)
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.endswith("{"):
            child = collections.defaultdict(list)
            stack[-1][line[:-1].strip()].append(child)
            stack.append(child)
        elif line == "}":
            stack.pop()
        else:
            key, value = line.split(":", 1)
            value = value.strip()
            if value.startswith('"'):
                value = ast.literal_eval(value)
            else:
                value = int(value)
            stack[-1][key].append(value)
    return root


def decode(path):
    with open(path, "rb") as f:
        r = subprocess.run(["protoc", "--decode", "perftools.profiles.Profile",
                            "-I", PROTO_DIR, "profile.proto"], stdin=f,
                           capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    # protoc escapes bytes outside ASCII as octal; the names here are ASCII.
    return parse_text(r.stdout.decode("ascii"))


def samples_of(p):
    """Each sample as (innermost function, [function names, innermost first],
    values, {label: value})."""
    s = p["string_table"]
    funcs = {f["id"][0]: f for f in p["function"]}
    locs = {loc["id"][0]: loc for loc in p["location"]}
    out = []
    for x in p["sample"]:
        names = []
        for lid in x["location_id"]:
            line = locs[lid]["line"][0]
            names.append(s[funcs[line["function_id"][0]]["name"][0]])
        labels = {}
        for lab in x["label"]:
            key = s[lab["key"][0]]
            # proto3 leaves a 0 out.
            labels[key] = (s[lab["str"][0]] if lab["str"] else
                           lab["num"][0] if lab["num"] else 0)
        out.append((names[0], names, x["value"], labels))
    return out


def test_pprof_of_known_shares(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, KNOWN, "--stacks", "200")
    pb = tmp_path / "stacks.pb"
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "export",
                        "--format", "pprof", "-o", str(pb), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    p = decode(pb)
    s = p["string_table"]
    assert s[0] == ""
    assert [(s[t["type"][0]], s[t["unit"][0]]) for t in p["sample_type"]] == [
        ("samples", "count"), ("wall", "nanoseconds"), ("cpu", "nanoseconds")]
    assert s[p["default_sample_type"][0]] == "cpu"
    assert p["period"][0] == 5000000  # 200 Hz
    samples = samples_of(p)
    # Every sample, as the report counts them.
    rep = json.loads(mlprof_cmd(build_dir, "report", "-f", "json", out))
    assert sum(v[0] for _, _, v, _ in samples) == rep["hot"]["samples"]
    # The known shares within three points, of the three functions' time on
    # a CPU, as their leaf functions (spin is the innermost: its caller).
    cpu = collections.Counter()
    for leaf, names, v, labels in samples:
        if leaf == "spin" and len(names) > 1:
            cpu[names[1]] += v[2]
    total = sum(cpu[k] for k in ("twenty", "thirty", "fifty"))
    assert total > 0, cpu
    for name, share in (("twenty", 20), ("thirty", 30), ("fifty", 50)):
        assert abs(100 * cpu[name] / total - share) <= 3, (name, cpu)
    # Labels: the zone, the step (three steps, 0 to 2), the thread and the
    # process, on every sample of the three.
    pids = {proc["pid"] for proc in rep["processes"]}
    steps = set()
    for leaf, names, v, labels in samples:
        if leaf != "spin" or names[1] not in ("twenty", "thirty", "fifty"):
            continue
        assert labels.get("zone") == "work", labels
        assert labels["thread"] > 0 and labels["pid"] in pids, labels
        steps.add(labels.get("step"))
    assert steps == {0, 1, 2}, steps
    # Locations carry the lines of the script: spin's loop.
    lines = {loc["line"][0]["line"][0] for loc in p["location"]
             if loc["line"][0]["line"]}
    assert lines, "no line numbers"


def test_pprof_refuses_bad_use(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, "spin(0.05)\n", "--stacks", "off",
                 name="nostacks")
    mlprof = os.path.join(build_dir, "mlprof")

    def export(*args):
        return subprocess.run([mlprof, "export", *map(str, args)],
                              capture_output=True, text=True, timeout=120)
    r = export("--format", "pprof", "-o", tmp_path / "x.pb", out)
    assert r.returncode == 2 and "no stack samples" in r.stderr, r.stderr
    assert not (tmp_path / "x.pb").exists()
    r = export("--format", "pprof", "-o", tmp_path, out)
    assert r.returncode == 2 and "-o wants a file" in r.stderr, r.stderr
    r = export("--format", "pprof", out)
    assert r.returncode == 2 and "-o FILE" in r.stderr, r.stderr
    r = export("--format", "nope", "-o", tmp_path / "y", out)
    assert r.returncode == 2 and "parquet or pprof" in r.stderr, r.stderr
