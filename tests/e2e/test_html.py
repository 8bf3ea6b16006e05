"""The HTML dashboard (mlprof html) and the live server (mlprof serve):
self-contained, hostile names escaped, small at scale; the server's pages,
endpoints, metrics, path safety, bad requests, concurrency and live update."""
import concurrent.futures
import html.parser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import (BUILD, LIBRARY, MLPROF, interleaved_runs, lib,  # noqa: F401
                      mlprof, program, start)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

HOSTILE = [
    b"<script>alert(1)</script>",
    b"</script><script>alert(2)</script>",
    b'"><img src=x onerror=alert(3)>',
    b"quote\"single'amp&lt;",
    b"bad utf8 \xff\xfe \xc3(",
    b"ctrl\x01\x1b[31mred",
    b"\xe2\x80\xa8line sep",
]

# Every element the page itself holds before its script runs.
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "h1",
             "span", "nav", "main", "noscript", "script"}


class Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.scripts, self._in = [], [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend((tag, k, v or "") for k, v in attrs)
        if tag == "script":
            self._in = dict(attrs).get("id") or "code"
            self.scripts.append([self._in, ""])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in:
            self.scripts[-1][1] += data


def parse(text):
    p = Tags()
    p.feed(text)
    p.close()
    return p


def page_data(text):
    p = parse(text)
    data = [s for i, s in p.scripts if i == "mlprof-data"]
    assert len(data) == 1
    return json.loads(data[0])


def record(so, path, names, spans=3):
    start(so, path)
    for name in names:
        for _ in range(spans):
            so.mlprof_zone_begin(b"outer")
            so.mlprof_zone_begin(name)
            so.mlprof_zone_end()
            so.mlprof_zone_end()
        so.mlprof_counter(name, 1.0)
    so.mlprof_step()
    assert so.mlprof_shutdown() == 0


def check_self_contained(text):
    p = parse(text)
    assert set(p.tags) <= PAGE_TAGS, set(p.tags) - PAGE_TAGS
    for tag, key, value in p.attrs:
        assert key not in ("src", "href", "action"), (tag, key, value)
        assert not re.match(r"\s*(https?:)?//", value), (tag, key, value)
    assert "<link" not in text
    # The script builds the page from the embedded data; it asks for nothing
    # unless it is a live page (which asks its own server, same origin).
    code = [s for i, s in p.scripts if i == "code"]
    assert len(code) == 1
    assert "XMLHttpRequest" not in code[0] and "import(" not in code[0]
    assert re.findall(r"https?://[^'\"\s]*", code[0]) == ["http://www.w3.org/2000/svg"]
    assert "connect-src 'none'" in text


def test_report_html_writes_the_same_dashboard(lib, tmp_path):
    path = tmp_path / "p.mlprof"
    record(lib, path, [b"alpha", b"<b>beta</b>"])
    out = tmp_path / "r.html"
    mlprof("report", path, "--html", out)
    text = out.read_text()
    check_self_contained(text)
    names = {z["name"] for z in page_data(text)["report"]["zones"]}
    assert names == {"outer", "alpha", "<b>beta</b>"}
    r = mlprof("report", path, "--html", tmp_path, check=False)  # a directory
    assert r.returncode == 2


def test_html_is_self_contained_and_has_every_view(tmp_path):
    run = tmp_path / "run"
    mlprof("run", "-q", "-o", run, "--sample-ms", "20", "--",
           program("inference_loop"), "300")
    out = tmp_path / "r.html"
    proc = mlprof("html", run, "-o", out)
    assert "wrote" in proc.stderr
    text = out.read_text()
    check_self_contained(text)
    d = page_data(text)
    assert d["live"] is False and d["data_url"] is None
    assert {z["name"] for z in d["report"]["zones"]} >= {"request", "decode_token"}
    names = d["tree"]["names"]
    # The call tree nests decode_token under request.
    nodes = d["tree"]["nodes"]
    paths = set()
    for n in nodes:
        path, k = [], nodes.index(n)
        while k >= 0:
            path.insert(0, names[nodes[k][0]])
            k = nodes[k][1]
        paths.add("/".join(path))
    assert "request/decode_token/attention" in paths
    measures = {(s["subject"], s["measure"]) for s in d["series"]}
    assert ("process", "cpu_pct") in measures and ("process", "rss_bytes") in measures
    for s in d["series"]:
        assert len(s["t"]) == len(s["v"]) <= 2000
        assert s["t"] == sorted(s["t"])
    assert d["marks"] and d["step_buckets"]
    assert not (tmp_path / "r.html.tmp").exists()
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def test_hostile_names_are_escaped(lib, tmp_path):
    path = tmp_path / "hostile.mlprof"
    record(lib, path, HOSTILE)
    out = tmp_path / "h.html"
    mlprof("html", path, "-o", out, "--title", '<b>"title"</b>\xff')
    text = out.read_text(encoding="utf-8")  # valid UTF-8 throughout
    check_self_contained(text)
    assert "<img" not in text and "<b>" not in text
    assert text.count("<script") == 2 and text.count("</script>") == 2
    p = parse(text)
    assert "<b>" in "".join(p.tags) or "&lt;b&gt;" in text
    d = page_data(text)
    names = {z["name"] for z in d["report"]["zones"]}
    for raw in HOSTILE:
        assert raw.decode("utf-8", "replace") in names or \
            any(n.startswith("bad utf8") for n in names)
    assert "</script><script>alert(2)</script>" in names
    assert set(d["tree"]["names"]) >= {"outer", "<script>alert(1)</script>"}


def test_html_stays_small_for_many_spans_and_names(lib, tmp_path):
    path = tmp_path / "big.mlprof"
    start(lib, path)
    for i in range(200000):
        lib.mlprof_zone_begin(b"step")
        lib.mlprof_zone_begin(b"layer_%d" % (i % 3000))
        lib.mlprof_zone_end()
        lib.mlprof_zone_end()
        if i % 100 == 0:
            lib.mlprof_step()
    assert lib.mlprof_shutdown() == 0
    out = tmp_path / "big.html"
    mlprof("html", path, "-o", out)
    size = out.stat().st_size
    assert size < 5_000_000, size  # DESIGN.md's budget, timeline included
    d = page_data(out.read_text())
    assert len(d["report"]["zones"]) == 2000  # --top default
    assert len(d["tree"]["nodes"]) <= 5000
    assert len(d["step_buckets"]) <= 512
    # The span timeline: a bounded pyramid, every span in each level.
    levels = d["timeline"]["levels"]
    items = [sum((len(a) - 1) // 5 for a in lv["items"]) for lv in levels]
    assert sum(items) <= 120000 and len(levels) >= 8, items
    for lv in levels:
        assert sum(sum(a[4::5]) for a in lv["items"]) == 400000


def test_html_timeline_embeds_span_units(tmp_path):
    # 20 000 steps of 2 ms zones: the page's finest level keeps some "load"
    # spans whole, and with each its 32 units "samples" (workload --after).
    run = tmp_path / "long"
    subprocess.run([MLPROF, "run", "-q", "-o", run, "--", program("workload"),
                    "--after", "20000"], check=True, timeout=120,
                   env={**os.environ, "MLPROF_WORK": "2000000"},
                   stdout=subprocess.DEVNULL)
    out = tmp_path / "long.html"
    mlprof("html", run, "-o", out)
    assert out.stat().st_size < 5_000_000
    t = page_data(out.read_text())["timeline"]
    names, finest = t["names"], t["levels"][-1]
    whole = set()
    for a in finest["items"]:
        b = 0
        for k in range(1, len(a), 5):
            b += a[k]
            if a[k + 3] == 1 and names[a[k + 2]] == "load":
                whole.add((a[0], b, b + a[k + 1]))
    assert len(whole) > 100
    args = {(x[0], x[1], x[2]): x[3:] for x in t["args"]}
    assert set(args) == whole
    assert all(v == [[], [["samples", 32]]] for v in args.values())


def test_html_usage_errors(tmp_path):
    assert mlprof("html", check=False).returncode == 2
    p = mlprof("html", tmp_path / "missing", "-o", tmp_path / "x.html", check=False)
    assert p.returncode == 2 and "missing" in p.stderr
    p = mlprof("html", "--bogus", check=False)
    assert p.returncode == 2 and "unknown option" in p.stderr
    junk = tmp_path / "junk.mlprof"
    junk.write_bytes(b"not a profile at all")
    p = mlprof("html", junk, "-o", tmp_path / "x.html", check=False)
    assert p.returncode == 2 and not (tmp_path / "x.html").exists()
    p = mlprof("html", "--help")
    assert "usage: mlprof html" in p.stdout
    p = mlprof("html", junk, "-o", tmp_path, check=False)
    assert p.returncode == 2 and "directory" in p.stderr


# ---- mlprof html --compare -------------------------------------------------

COMPARE_STEPS = 400


@pytest.fixture(scope="module")
def compare_runs(tmp_path_factory):
    """Three runs of tests/programs/workload.c as in test_compare.py: the
    base, three and nine times the work in every zone, interleaved in two
    rounds (so two profiles a run)."""
    d = tmp_path_factory.mktemp("cmp")
    jobs = [(d / "c1",), (d / "all200", "all=200"), (d / "all800", "all=800")]
    interleaved_runs(*jobs, steps=COMPARE_STEPS // 2, rounds=2)
    return {path.name: path for path, *_ in jobs}


def test_html_compare_ranks_labelled_runs(compare_runs, tmp_path):
    # Given out of order: three times the work, nine times, then the base.
    paths = [compare_runs["all200"], compare_runs["all800"], compare_runs["c1"]]
    labels = ["mid", "slow", "fast"]
    out = tmp_path / "cmp.html"
    mlprof("html", *paths, "--labels", ",".join(labels), "-o", out)
    text = out.read_text()
    check_self_contained(text)
    d = page_data(text)
    c = d["compare"]
    # The same object mlprof compare --format json prints.
    assert c == json.loads(mlprof("compare", *paths, "--labels", ",".join(labels),
                                  "--format", "json").stdout)
    assert c["schema"] == "mlprof.compare/1"
    assert [r["label"] for r in c["runs"]] == labels
    assert [labels[i] for i in c["ranking"]["step"]] == ["fast", "mid", "slow"]
    busy = {r["label"]: r["busy_ns"] for r in c["runs"]}  # wall time: see test_compare
    assert busy["fast"] < busy["mid"] < busy["slow"]
    assert labels[c["fastest"]["run"]] == "fast"
    assert c["recommendation"].startswith("use fast: fastest by median step time")
    assert {z["name"] for z in c["zones"]} == {"load", "forward", "backward", "optimizer"}
    for z in c["zones"]:
        assert labels[z["fastest"]] == "fast" and labels[z["slowest"]] == "slow"
        assert z["runs"][2]["speedup_vs_slowest"] > 3
    # The other views show the first run alone.
    procs = d["report"]["processes"]
    assert len(procs) == 2 and all("all=200" in p["cmdline"] for p in procs)
    # --compare without labels: each path's base name.
    mlprof("html", "--compare", *paths, "-o", out)
    assert [r["label"] for r in page_data(out.read_text())["compare"]["runs"]] == \
        ["all200", "all800", "c1"]


def test_html_compare_hostile_labels_are_escaped(compare_runs, tmp_path):
    labels = ["<script>alert(1)</script>", "</script><img src=x onerror=alert(2)>",
              "q\"uote'&amp;\u2028"]
    out = tmp_path / "h.html"
    mlprof("html", compare_runs["c1"], compare_runs["all200"], compare_runs["all800"],
           "--labels", ",".join(labels), "-o", out)
    text = out.read_text(encoding="utf-8")
    check_self_contained(text)
    assert "<img" not in text and "alert(1)</script>" not in text
    assert text.count("<script") == 2 and text.count("</script>") == 2
    c = page_data(text)["compare"]
    assert [r["label"] for r in c["runs"]] == labels
    assert c["recommendation"].startswith("use <script>alert(1)</script> (the first run)")


def test_html_one_run_has_no_compare(compare_runs, tmp_path):
    out = tmp_path / "one.html"
    for args in [(compare_runs["c1"],),
                 ("--compare", compare_runs["c1"]),
                 ("--labels", "only", compare_runs["c1"]),
                 # The default merges several paths into one job.
                 (compare_runs["c1"], compare_runs["all200"])]:
        mlprof("html", *args, "-o", out)
        d = page_data(out.read_text())
        assert d["compare"] is None, args
    # Merged: both runs' processes (mlprof run and the workload) in one.
    assert len(d["report"]["processes"]) == 4


def test_html_compare_usage_errors(compare_runs, tmp_path):
    out = tmp_path / "x.html"
    a, b = compare_runs["c1"], compare_runs["all200"]
    for args in [("--labels", "a", a, b), ("--labels", "a,", a, b),
                 ("--labels", "a,b,c", a, b), ("--compare", a, tmp_path / "missing")]:
        p = mlprof("html", *args, "-o", out, check=False)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("mlprof html: ") and not out.exists()
    # -o naming a profile of a compared run (not the first) is refused too.
    prof = next(b.glob("*.mlprof"))
    before = prof.read_bytes()
    p = mlprof("html", "--compare", a, b, "-o", prof, check=False)
    assert p.returncode == 2 and "choose another -o" in p.stderr
    assert prof.read_bytes() == before


# ---- mlprof serve ----------------------------------------------------------

class Server:
    def __init__(self, root, *args):
        self.proc = subprocess.Popen(
            [MLPROF, "serve", str(root), "--port", "0", *args],
            stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"http://(\S+):(\d+)/", line)
        assert m, line
        self.host, self.port, self.line = m.group(1), int(m.group(2)), line
        self.base = f"http://127.0.0.1:{self.port}"

    def get(self, path, method="GET", headers=None, timeout=30):
        req = urllib.request.Request(self.base + path, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def raw(self, data):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(data)
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
            return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()
        return self.proc.returncode


@pytest.fixture
def served(lib, tmp_path):
    root = tmp_path / "runs"
    (root / "exp" / "run-a").mkdir(parents=True)
    record(lib, root / "exp" / "run-a" / "p.mlprof", [b"load", b"<script>x</script>"])
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(root / "exp" / "run-a" / "p.mlprof", outside / "secret.mlprof")
    (root / "link").symlink_to(outside)
    (root / "exp" / "run-a" / "evil.mlprof").symlink_to(outside / "secret.mlprof")
    srv = Server(root)
    yield srv, root
    assert srv.stop() == 0


def test_serve_index_page_data_and_metrics(served, tmp_path):
    srv, root = served
    assert srv.host == "127.0.0.1"  # loopback by default
    st, hd, body = srv.get("/")
    assert st == 200 and hd["Content-Type"].startswith("text/html")
    assert b'href="/run/exp/run-a/"' in body and b"link" not in body
    st, _, body = srv.get("/api/runs")
    assert json.loads(body)["runs"] == [
        {"run": "exp/run-a", "page": "/run/exp/run-a/", "data": "/data/exp/run-a"}]
    st, hd, body = srv.get("/run/exp/run-a/")
    assert st == 200 and "default-src 'none'" in hd["Content-Security-Policy"]
    text = body.decode()
    d = page_data(text)
    assert d["live"] is True and d["data_url"] == "/data/exp/run-a"
    assert "<script>x" not in text
    st, hd, body = srv.get("/data/exp/run-a")
    assert st == 200 and hd["Content-Type"] == "application/json"
    d = json.loads(body)
    assert {z["name"] for z in d["report"]["zones"]} == {"outer", "load", "<script>x</script>"}
    # The symlinked profile beside the real one is not read.
    assert len(d["report"]["processes"]) == 1
    st, hd, body = srv.get("/metrics")
    assert st == 200 and hd["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert 'mlprof_zone_duration_seconds_count{run="exp/run-a",zone="<script>x</script>",category="none"} 3' in text
    assert 'quantile="0.99"' in text
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus"
    check = subprocess.run([promtool, "check", "metrics"], input=body,
                           capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("path", [
    "/run/../../etc/", "/run/%2e%2e/%2e%2e/etc/", "/data/%2E%2E%2Fsecret",
    "/run//etc/passwd", "/data/exp/run-a/../../../outside", "/run/./exp/run-a/",
    "/run/link/", "/data/link", "/data/%2Fetc", "/run/exp/run-a%00/",
    "/../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/run/exp", "/data/nope",
    "/etc/passwd", "/run/exp/run-a/p.mlprof",
])
def test_serve_refuses_paths_outside(served, path):
    srv, _ = served
    req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").encode()
    head = srv.raw(req).split(b"\r\n", 1)[0]
    code = int(head.split()[1])
    assert code in (400, 403, 404), (path, head)


def test_serve_bad_requests_get_4xx(served):
    srv, _ = served
    assert srv.get("/", method="POST")[0] == 405
    assert srv.get("/", method="DELETE")[0] == 405
    assert srv.get("/", headers={"Host": "evil.example:80"})[0] == 403
    for req in [b"GARBAGE\r\n\r\n",
                b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"]:
        out = srv.raw(req)
        assert out == b"" or 400 <= int(out.split()[1]) < 500, out[:100]
    # An unknown protocol version gets its own status, 505.
    out = srv.raw(b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n")
    assert int(out.split()[1]) == 505
    assert srv.get("/")[0] == 200  # still serving


def test_serve_50_concurrent_clients(served):
    srv, _ = served

    def fetch(i):
        path = ["/", "/data/exp/run-a", "/metrics", "/run/exp/run-a/"][i % 4]
        return srv.get(path, timeout=60)[0]

    with concurrent.futures.ThreadPoolExecutor(50) as ex:
        codes = list(ex.map(fetch, range(200)))
    assert codes == [200] * 200


def test_serve_damaged_profile_does_not_stop_it(served):
    srv, root = served
    bad = root / "exp" / "broken"
    bad.mkdir()
    (bad / "x.mlprof").write_bytes(b"MLPROF\x00" + os.urandom(5000))
    src = root / "exp" / "run-a" / "p.mlprof"
    data = bytearray(src.read_bytes())
    for i in range(100, len(data), 97):
        data[i] ^= 0x5A
    (bad / "y.mlprof").write_bytes(bytes(data))
    for path in ["/run/exp/broken/", "/data/exp/broken", "/metrics", "/"]:
        code = srv.get(path)[0]
        assert code in (200, 503), (path, code)
    assert srv.get("/data/exp/run-a")[0] == 200


def test_serve_usage_and_signal(tmp_path):
    assert mlprof("serve", "--port", "x", check=False).returncode == 2
    assert mlprof("serve", tmp_path / "missing", check=False).returncode == 2
    assert mlprof("serve", "--bind", "not-an-ip", check=False).returncode == 2
    for bad in ("x", "-1", "4097", ""):
        r = mlprof("serve", "--window-mb", bad, check=False)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "--window-mb wants" in r.stderr
    assert "usage: mlprof serve" in mlprof("serve", "--help").stdout
    srv = Server(tmp_path)
    assert b"No run directories" in srv.get("/")[2]
    srv.proc.send_signal(signal.SIGINT)
    assert srv.proc.wait(timeout=10) == 0
    srv.stop()


LIVE = r"""
import ctypes, sys, time
so = ctypes.CDLL(sys.argv[1])
so.mlprof_zone_begin.argtypes = [ctypes.c_char_p]
end = time.time() + float(sys.argv[2])
i = 0
while time.time() < end:
    so.mlprof_zone_begin(b"live_%d" % i)
    time.sleep(0.05)
    so.mlprof_zone_end()
    i += 1
"""


def test_serve_shows_a_run_while_it_is_written(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    script = tmp_path / "live.py"
    script.write_text(LIVE)
    run = subprocess.Popen([MLPROF, "run", "-q", "-o", root / "live", "--sample-ms", "50",
                            "--", sys.executable, script, LIBRARY, "8"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv = Server(root)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            st, _, body = srv.get("/data/live")
            if st == 200 and json.loads(body)["report"]["zones_total"] >= 3:
                break
            time.sleep(0.2)
        first = json.loads(body)
        time.sleep(2)
        st, _, body = srv.get("/data/live")
        second = json.loads(body)
        assert st == 200
        z1 = {z["name"] for z in first["report"]["zones"]}
        z2 = {z["name"] for z in second["report"]["zones"]}
        assert len(z2 - z1) >= 5, (len(z1), len(z2))
        rows = lambda d: sum(len(s["t"]) for s in d["series"])  # noqa: E731
        assert rows(second) > rows(first)
    finally:
        srv.stop()
        run.kill()
        run.wait(timeout=30)


def test_the_page_embeds_the_dashboard_as_it_is_in_the_tree(lib, tmp_path):
    # The build embeds dashboard.css and .js (scripts/embed-assets.py, a
    # header generated in the build directory) and reruns on their edits.
    path = tmp_path / "p.mlprof"
    record(lib, path, [b"alpha"])
    out = tmp_path / "r.html"
    mlprof("html", path, "-o", out)
    text = out.read_text(encoding="utf-8")
    for name in ("dashboard.css", "dashboard.js"):
        with open(os.path.join(ROOT, "src", "export", name), encoding="utf-8") as f:
            assert f.read() in text, name
