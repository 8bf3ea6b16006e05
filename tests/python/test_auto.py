"""Python under `mlprof run` with no code change: the start-up module
(mlprof/_startup/sitecustomize.py) and PyTorch's steps (mlprof.auto)."""
import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import mlprof
from mlprof import auto

STARTUP = os.path.join(os.path.dirname(mlprof.__file__), "_startup")

# An unmodified training script: a slow dataset read by 2 DataLoader
# workers, a small CNN, SGD. It prints whether torch had been imported.
TRAIN = """
import sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.randn(1, 16, 16), i % 10

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))

model, loss_fn = Net(), nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Slow(), batch_size=8, num_workers=2):
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
print("trained")
"""

TORCH_ZONES = {"data_wait", "data_fetch", "data_collate", "Net",
               "CrossEntropyLoss", "backward", "optimizer_step", "zero_grad"}


def run(build_dir, tmp_path, script, *flags, python=sys.executable,
        env=None, startup=STARTUP):
    """`mlprof run FLAGS -- python script` in tmp_path/run, with this
    package's start-up module; returns (CompletedProcess, run directory)."""
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    out = tmp_path / "run"
    e = dict(os.environ if env is None else env)
    e.pop("MLPROF_OUTPUT", None)
    if startup:
        e["MLPROF_PY_STARTUP"] = startup
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "-o",
                        str(out), *flags, "--", python, str(path)],
                       capture_output=True, text=True, env=e, timeout=300,
                       cwd=tmp_path)
    return r, out


def report(build_dir, *paths):
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "report", "-f",
                        "json", "--top", "0", *map(str, paths)],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def zone_names(rep):
    return {z["name"] for z in rep["zones"]}


def test_training_steps_without_code_change(build_dir, tmp_path):
    r, out = run(build_dir, tmp_path, TRAIN)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "trained\n"
    rep = report(build_dir, out)
    assert TORCH_ZONES <= zone_names(rep)
    # Six batches, a step mark after each optimizer step: five steps.
    steps = rep["steps"]
    assert steps["source"] == "marks" and steps["count"] == 5
    parts = {p["part"]: p["total_ns"] for p in steps["parts"]}
    for part in ("data", "forward", "backward", "optimizer"):
        assert parts[part] > 0, (part, parts)
    assert "data_bound" in [f["type"] for f in rep["findings"]]
    # The workers' batches, in the workers' own profiles.
    main = [p for p in rep["processes"]
            if p["cmdline"].startswith(sys.executable)]
    main_pid = min(main, key=lambda p: p["offset_ns"])["pid"]
    workers = [p for p in rep["processes"] if p["ppid"] == main_pid]
    assert len(workers) == 2
    fetched = 0
    for w in workers:
        wz = {z["name"]: z["count"] for z in report(build_dir,
                                                    w["path"])["zones"]}
        assert set(wz) == {"data_fetch", "data_collate"}, wz
        fetched += wz["data_fetch"]
    assert fetched == 6
    # The main process waited for the batches but made none.
    mz = zone_names(report(build_dir, [p for p in rep["processes"]
                                       if p["pid"] == main_pid][0]["path"]))
    assert "data_wait" in mz and "data_fetch" not in mz
    meta = [p["meta"] for p in rep["processes"] if p["pid"] == main_pid][0]
    assert meta["mlprof.python"] == "loaded"
    assert meta["mlprof.torch"].startswith("instrumented (torch ")


CLIP_SCHED = """
import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(48, 16), torch.randint(0, 4, (48,)))
model, loss_fn = nn.Linear(16, 4), nn.CrossEntropyLoss()
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
for x, y in DataLoader(data, batch_size=8):
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    clip_grad_norm_(model.parameters(), 1.0)
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    opt.step()
    sched.step()
print("trained")
"""


def test_clipping_schedules_and_samples_are_recorded(build_dir, tmp_path):
    """clip_grad_norm_ (however imported), clip_grad_value_ and the LR
    scheduler's step are optimizer work, not "other"; each batch counts its
    samples as units, for throughput (issue #21, items 6 and 11)."""
    r, out = run(build_dir, tmp_path, CLIP_SCHED)
    assert r.returncode == 0 and r.stdout == "trained\n", r.stderr
    rep = report(build_dir, out)
    z = {x["name"]: x for x in rep["zones"]}
    for name in ("clip_grad_norm_", "clip_grad_value_"):
        assert z[name]["count"] == 6 and z[name]["category"] == "optimizer"
    # Six steps, and the one the scheduler takes when it is made.
    assert z["lr_scheduler_step"]["count"] in (6, 7)
    assert z["lr_scheduler_step"]["category"] == "optimizer"
    units = {u["unit"]: u for u in z["data_wait"]["units"]}
    assert units["samples"]["n"] == 48
    parts = {p["part"]: p["total_ns"] for p in rep["steps"]["parts"]}
    assert parts["optimizer"] > 0


# A user's errors raised through each of mlprof's wrappers: a module's
# forward (nested in another), backward, the optimizer's step, a dataset
# read by the DataLoader, the loss.
ERRORS = """
import sys, traceback
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

class Bad(nn.Module):
    def forward(self, x):
        raise ValueError("in forward")

class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Bad()

    def forward(self, x):
        return self.inner(x)

class BadData(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        raise KeyError("in dataset")

class BadOpt(torch.optim.SGD):
    def step(self, closure=None):
        raise RuntimeError("in step")

def backward_hook(grad):
    raise ArithmeticError("in backward")

w = torch.ones(2, requires_grad=True)
w.register_hook(backward_hook)
tries = [lambda: Outer()(torch.ones(1)),
         lambda: next(iter(DataLoader(BadData()))),
         lambda: BadOpt([w], lr=0.1).step(),
         lambda: (w * 2).sum().backward()]
for t in tries:
    try:
        t()
    except Exception:
        traceback.print_exc()
Outer()(torch.ones(1))
"""


def test_tracebacks_hold_no_mlprof_frame(build_dir, tmp_path):
    """A user's exception raised through the no-code-change instrumentation
    reads as without it: no frame of mlprof/auto.py in its traceback (the
    printed ones and the uncaught one), the user's frames all there."""
    r, out = run(build_dir, tmp_path, ERRORS, "-q")
    assert r.returncode == 1, r.stderr
    err = r.stderr
    for what in ("in forward", "in dataset", "in step", "in backward"):
        assert what in err, err
    assert err.count("Traceback (most recent call last)") == 5, err
    package = os.path.dirname(mlprof.__file__)
    frames = [ln for ln in err.splitlines() if ln.startswith('  File "')]
    assert frames and not [f for f in frames if package in f or
                           "auto.py" in f], err
    # The user's own frames are kept: the nested forward calls its inner
    # module's.
    assert err.count("return self.inner(x)") == 2, err
    # Recorded all the same.
    assert "Outer" in zone_names(report(build_dir, out))


SPAWN = """
import multiprocessing as mp

def work(i):
    return i * i

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()  # a semaphore: the resource tracker starts
    p = ctx.Process(target=work, args=(3,))
    p.start()
    p.join()
    print("done")
"""


def test_resource_tracker_is_not_left_running(build_dir, tmp_path):
    """multiprocessing's resource tracker exits just after the program
    (issue #21, item 14): mlprof run waits for it before its summary, which
    shows every process ended, none "still running"."""
    r, out = run(build_dir, tmp_path, SPAWN)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    assert "resource_tracker" in r.stderr, r.stderr  # in the summary
    assert "still running" not in r.stderr, r.stderr
    assert " running " not in r.stderr, r.stderr


def test_no_torch_flag(build_dir, tmp_path):
    r, out = run(build_dir, tmp_path, TRAIN, "--no-torch")
    assert r.returncode == 0 and r.stdout == "trained\n", r.stderr
    rep = report(build_dir, out)
    assert rep["zones"] == []
    assert "PyTorch's steps were switched off (--no-torch)" in r.stderr


def test_layers_flag(build_dir, tmp_path):
    r, out = run(build_dir, tmp_path, TRAIN, "--layers")
    assert r.returncode == 0, r.stderr
    names = zone_names(report(build_dir, out))
    assert TORCH_ZONES <= names
    # profile_model's zones (mlprof.torch) under each root module.
    for layer in ("conv", "fc"):
        assert any(n.startswith(layer) and n.endswith(":forward")
                   for n in names), names
        assert any(n.startswith(layer) and n.endswith(":backward")
                   for n in names), names


def test_calls_flag(build_dir, tmp_path):
    """mlprof run --calls: every Python call of the unmodified program is a
    zone (fib(10) makes 177 calls), without torch being imported."""
    r, out = run(build_dir, tmp_path, """
        import sys
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        fib(10)
        print("torch" in sys.modules)
        """, "--calls")
    assert r.returncode == 0 and r.stdout == "False\n", r.stderr
    counts = {z["name"]: z["count"] for z in report(build_dir, out)["zones"]}
    assert counts.get("fib") == 177, counts


def test_lines_flag(build_dir, tmp_path):
    """mlprof run --lines script:step: the script's own function (named by
    its file name) has its lines timed, and `mlprof report` shows them from
    the profile, in JSON and as a text table, the source escaped."""
    r, out = run(build_dir, tmp_path, """
        def step(n):
            s = 0
            for i in range(n):
                s += i  # <b>\x1b[31m
            return s
        for _ in range(3):
            step(100)
        """, "--lines", "script:step", "--lines", "other:thing")
    assert r.returncode == 0, r.stderr
    rows = {x["line"]: x for x in report(build_dir, out)["lines"]}
    assert sorted(rows) == [3, 4, 5, 6], rows
    assert rows[5]["hits"] == 300 and rows[6]["hits"] == 3
    assert rows[5]["function"] == "step" and rows[5]["first_line"] == 2
    assert rows[5]["source"] == "        s += i  # <b>\x1b[31m"
    assert abs(sum(x["share"] for x in rows.values()) - 100) < 0.01
    text = subprocess.run([os.path.join(build_dir, "mlprof"), "report",
                           str(out)], capture_output=True, text=True,
                          check=True).stdout
    assert "\nLines of step (" in text and "\x1b" not in text, text
    assert "300" in text.split("Lines of step")[1]


def test_first_optimizer_marks_steps(build_dir, tmp_path):
    """Two optimizers (a GAN's): one step mark per iteration."""
    r, out = run(build_dir, tmp_path, """
        import torch
        g, d = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        og = torch.optim.SGD(g.parameters(), lr=0.1)
        od = torch.optim.Adam(d.parameters())
        for i in range(7):
            d(g(torch.randn(4, 2))).sum().backward()
            od.step()
            og.step()
        """)
    assert r.returncode == 0, r.stderr
    rep = report(build_dir, out)
    assert rep["steps"]["count"] == 6
    opt = [z for z in rep["zones"] if z["name"] == "optimizer_step"][0]
    assert opt["count"] == 14
    # Each root module call is one zone, by class: g then d, 7 times each.
    assert [z["count"] for z in rep["zones"] if z["name"] == "Linear"] == [14]


def test_torch_never_imported(build_dir, tmp_path):
    r, out = run(build_dir, tmp_path, """
        import sys
        print("torch" in sys.modules, "mlprof" in sys.modules)
        """)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "False True\n"
    assert "did not import torch" in r.stderr
    meta = [p["meta"] for p in report(build_dir, out)["processes"]
            if p["meta"]]
    assert meta == [{"mlprof.python": "loaded"}]


def test_program_sitecustomize_still_runs(build_dir, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text(
        "import os\nos.environ['OWN_SITECUSTOMIZE'] = 'ran'\n")
    env = dict(os.environ, PYTHONPATH=str(own) + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    r, out = run(build_dir, tmp_path, """
        import os, sys
        print(os.environ.get("OWN_SITECUSTOMIZE"),
              sys.modules["sitecustomize"].__file__)
        """, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran %s\n" % (own / "sitecustomize.py")
    meta = [p["meta"] for p in report(build_dir, out)["processes"]
            if p["meta"]]
    assert meta == [{"mlprof.python": "loaded"}]


def test_python_without_mlprof(build_dir, tmp_path):
    """The start-up module outside any package (as `make install` puts it)
    in a Python whose path has no mlprof: the program runs as without
    mlprof and the report says why, once."""
    startup = tmp_path / "startup"
    startup.mkdir()
    shutil.copy(os.path.join(STARTUP, "sitecustomize.py"), startup)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    r, out = run(build_dir, tmp_path, """
        import ctypes, os, sys
        if os.fork() == 0:  # a child with a profile of its own
            ctypes.CDLL(None).mlprof_step()
            ctypes.CDLL(None).mlprof_step()
            os._exit(0)
        os.wait()
        print("mlprof" in sys.modules)
        sys.exit(3)
        """, env=env, startup=str(startup))
    assert r.returncode == 3, r.stderr
    assert r.stdout == "False\n"
    line = [w for w in r.stderr.splitlines()
            if "python instrumentation not loaded" in w]
    assert len(line) == 1, r.stderr
    assert "ModuleNotFoundError: No module named 'mlprof'" in line[0]
    assert sys.executable in line[0]
    rep = report(build_dir, out)
    assert len([p for p in rep["processes"] if p["meta"]]) == 2
    assert len([w for w in rep["warnings"] if "not loaded" in w]) == 1


@pytest.mark.skipif(not os.access("/root/.pyenv/versions/3.12.1/bin/python3",
                                  os.X_OK), reason="no Python 3.12 here")
def test_other_python_version(build_dir, tmp_path):
    """A Python the extension was not built for imports the package but not
    its extension."""
    if sys.version_info[:2] == (3, 12):
        pytest.skip("this is Python 3.12")
    r, out = run(build_dir, tmp_path, "print('ran')\n",
                 python="/root/.pyenv/versions/3.12.1/bin/python3")
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert "(Python 3.12): ImportError" in r.stderr


def test_python_m_mlprof_run_passes_flags(build_dir, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = dict(os.environ, MLPROF_CLI=os.path.join(build_dir, "mlprof"))
    env.pop("MLPROF_PY_STARTUP", None)
    r = subprocess.run([sys.executable, "-m", "mlprof", "run", "-q", "-o",
                        str(tmp_path / "run"), "--no-torch", str(script)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout == "trained\n", r.stderr
    meta = [p["meta"] for p in report(build_dir, tmp_path / "run")
            ["processes"] if p["meta"]]
    assert {"mlprof.python": "loaded",
            "mlprof.torch": "off (--no-torch)"} in meta


def test_start_up_module_next_to_the_command(build_dir, tmp_path):
    """`make python-test` installs the package into BUILD/python, where the
    build's mlprof finds the start-up module by itself."""
    if not os.path.isfile(os.path.join(build_dir, "python", "mlprof",
                                       "_startup", "sitecustomize.py")):
        pytest.skip("the package is not installed in the build directory")
    env = dict(os.environ)
    env.pop("MLPROF_PY_STARTUP", None)
    r, out = run(build_dir, tmp_path, "print('ran')\n", env=env,
                 startup=None)
    assert r.returncode == 0, r.stderr
    meta = [p["meta"] for p in report(build_dir, out)["processes"]
            if p["meta"]]
    assert meta == [{"mlprof.python": "loaded"}]


def test_bad_start_up_directory(build_dir, tmp_path):
    r, _ = run(build_dir, tmp_path, "print('ran')\n",
               startup=str(tmp_path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("mlprof run: MLPROF_PY_STARTUP=")
    assert len(r.stderr.splitlines()) == 1


def test_parse_options(capsys):
    assert auto.parse_options("") == {}
    assert auto.parse_options("no-torch,layers") == {"no-torch": None,
                                                     "layers": None}
    assert auto.parse_options("layers,bogus=1") == {"layers": None}
    assert auto.parse_options("lines=a:f,lines=b:g") == {"lines": ["a:f",
                                                                   "b:g"]}
    assert "'bogus'" in capsys.readouterr().err


def test_install_after_torch_import(tmp_path):
    """mlprof.auto.install() in a process that made its optimizer before:
    its class's step is instrumented too."""
    code = textwrap.dedent("""
        import sys, torch
        import mlprof
        from mlprof import auto
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with mlprof.Profiler(output=sys.argv[1], sample_interval=0) as prof:
            auto.install()
            for _ in range(4):
                opt.zero_grad()
                model(torch.randn(2, 3)).sum().backward()
                opt.step()
        """)
    out = tmp_path / "p.mlprof"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
        mlprof.__file__)))
    env.pop("MLPROF_OUTPUT", None)
    subprocess.run([sys.executable, "-c", code, str(out)], check=True,
                   env=env, timeout=300)
    rep = mlprof.report(str(out))
    counts = {z["name"]: z["count"] for z in rep["zones"]}
    assert counts == {"Linear": 4, "backward": 4, "optimizer_step": 4,
                      "zero_grad": 4}
    assert rep["steps"]["count"] == 3


def test_torch_that_cannot_be_patched(build_dir, tmp_path):
    """A torch unlike any mlprof knows (here a stand-in without nn): the
    program runs on and the profile says why torch was not instrumented."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '0.0'\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    r, out = run(build_dir, tmp_path, """
        import torch
        print(torch.__version__)
        """, env=env)
    assert r.returncode == 0 and r.stdout == "0.0\n", r.stderr
    meta = [p["meta"] for p in report(build_dir, out)["processes"]
            if p["meta"]]
    assert meta[0]["mlprof.torch"].startswith(
        "not instrumented: AttributeError: ")
    assert "PyTorch was imported but could not be instrumented" in r.stderr
