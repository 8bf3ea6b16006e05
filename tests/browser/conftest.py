"""What the browser tests share: Debian's headless Chromium driven by
Python's playwright (never a browser download), pages that record their
console errors, `mlprof serve` children killed at the end, and the runs
several tests read (made once a session, by whichever test asks first)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("MLPROF_BUILD") or ROOT / "build").resolve()
MLPROF = BUILD / "mlprof"
SHOTS = BUILD / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
VIEWS = ["overview", "zones", "timeline", "spans", "memory", "gpu", "findings", "processes"]
# Views that must draw at least one chart on a sampled run without a GPU.
MUST_DRAW = ["overview", "zones", "timeline", "memory", "processes"]


def run(args, timeout=120, env=None):
    """Runs mlprof with args; fails the test with its stderr on a non-zero
    exit. Returns its stdout (bytes)."""
    p = subprocess.run([str(MLPROF), *map(str, args)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"mlprof {' '.join(map(str, args))}: exit {p.returncode}\n{p.stderr.decode(errors='replace')}"
    return p.stdout


def http_get(url):
    """GET url: (status, body bytes), an HTTP error status included."""
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(cond, seconds, what):
    """Calls cond every 200 ms until it is true (an exception counts as
    false); fails once seconds have passed."""
    end = time.monotonic() + seconds
    while True:
        try:
            if cond():
                return
        except Exception:
            pass
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


@pytest.fixture(scope="session")
def tmp():
    """One temporary directory for the session, removed at its end."""
    d = Path(tempfile.mkdtemp(prefix="mlprof-browser-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def browser():
    SHOTS.mkdir(parents=True, exist_ok=True)
    # playwright starts Chromium with a fresh, empty profile directory of
    # its own (the equivalent of a new --user-data-dir).
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-quic"])
        yield b
        b.close()


@pytest.fixture
def children():
    """Child processes a test starts; any still running at its end is killed."""
    procs = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


class Served:
    """A running `mlprof serve`: its base URL, pid and stderr so far."""

    def __init__(self, proc):
        self.proc, self.pid, self.err = proc, proc.pid, ""
        found = threading.Event()

        # Reads stderr to its end, so serve never blocks on a full pipe.
        def drain():
            for line in proc.stderr:
                self.err += line
                if re.search(r"http://127\.0\.0\.1:(\d+)/", self.err):
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        found.wait(10)
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", self.err)
        assert m, "serve did not start: " + self.err
        self.base = f"http://127.0.0.1:{m.group(1)}"

    def stop(self):
        """SIGTERM, then its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


@pytest.fixture
def serve(children):
    """serve(root, *more): mlprof serve on root at a free port."""
    def start(root, *more):
        p = subprocess.Popen([str(MLPROF), "serve", str(root), "--port", "0", *more],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, encoding="utf-8", errors="replace")
        children.append(p)
        return Served(p)
    return start


class Page:
    """A page and the errors it met: console errors, page errors, failed
    requests."""

    def __init__(self, page):
        self.page, self.errors = page, []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("requestfailed", lambda r: self.errors.append("request failed: " + r.url))


@pytest.fixture
def open_page(browser):
    """open_page(url): a 1300x900 page on url once its first card is drawn;
    closed at the end of the test."""
    pages = []

    def open_(url):
        p = Page(browser.new_page(viewport={"width": 1300, "height": 900}))
        pages.append(p)
        p.page.goto(url)
        p.page.wait_for_selector("#main .card")
        return p

    yield open_
    for p in pages:
        if not p.page.is_closed():
            p.page.close()


def python(tmp, script, *args):
    """Runs a Python script with the project's Python (the venv's, torch in
    it) and the package as make python-install builds it."""
    prog = tmp / "script.py"
    prog.write_text("\n".join(script))
    env = {**os.environ, "PYTHONPATH": str(BUILD / "python")}
    p = subprocess.run([sys.executable, str(prog), *map(str, args)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr.decode(errors="replace")


@pytest.fixture(scope="session")
def static_report(tmp):
    """A sampled run of the inference loop and its static report: the
    report's path."""
    run_dir = tmp / "run"
    run(["run", "-q", "-o", run_dir, "--sample-ms", "20", "--", BUILD / "inference_loop", "400"])
    file = tmp / "report.html"
    run(["html", run_dir, "-o", file, "--title", "inference_loop 400 <demo>"])
    return file


def workload_runs(tmp, name, jobs):
    """Runs of the workload side by side, one per job [dir, flags...]:
    their directories."""
    specs = [str(tmp / f"{name}-{d}") + (":" + ",".join(f) if f else "") for d, *f in jobs]
    for s in specs:
        os.mkdir(s.split(":")[0])
    subprocess.run([str(BUILD / "workload"), "--interleave", "2", "200", *specs],
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120, check=True)
    return [Path(s.split(":")[0]) for s in specs]


@pytest.fixture(scope="session")
def diff_report(tmp):
    """Two runs of the workload, the second with a slower forward, and the
    diff page of them: (base, slow, page's path)."""
    base, slow = workload_runs(tmp, "diff", [["base"], ["slow", "forward=40"]])
    file = tmp / "diff.html"
    run(["html", "--diff", base, slow, "-o", file])
    return base, slow, file


@pytest.fixture
def say(capsys):
    """Prints a line to the terminal, past pytest's capture (the figures
    the tests measure but do not assert)."""
    first = [True]

    def say_(line):
        with capsys.disabled():
            # On a line of its own, not after pytest's progress dots.
            print(("\n" if first[0] else "") + line, flush=True)
        first[0] = False
    return say_
