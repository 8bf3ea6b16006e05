"""The dashboard's memory views (docs/memory.md) in a real browser: the
live-bytes timeline of a program with a known allocation pattern
(tests/programs/alloc_known.c, every allocation recorded) peaks where the
report says, a click on the peak lists what was live then, the memory flame
graph's widest frame is the known site (by bytes at the peak and by bytes
allocated), its filters and hover work, and the leak links to its site.
Screenshots go to build/screenshots/."""
import json
import re
import sys

import pytest

from conftest import BUILD, SHOTS, run

MIB = 1 << 20


@pytest.fixture(scope="module")
def known(tmp):
    """alloc_known's run, its JSON report and its page: (report, page)."""
    out = tmp / "alloc-known"
    run(["run", "-q", "--memory=all", "-o", out, "--", BUILD / "alloc_known", "zones"])
    page = tmp / "alloc-known.html"
    run(["html", out, "-o", page])
    return json.loads(run(["report", out, "--format", "json"])), page


def frames(page, depth):
    """The memory flame graph's frames at depth: [(name, value, width)]."""
    return [tuple(f) for f in page.eval_on_selector_all(
        "#mem-flame rect[data-depth='%d']" % depth,
        "(r) => r.map((x) => [x.dataset.name, +x.dataset.value, +x.getAttribute('width')])")]


def widest(page, depth):
    return max(frames(page, depth), key=lambda f: f[2])


def test_live_bytes_peak_and_flame_graph_of_a_known_program(open_page, known):
    rep, file = known
    mem = rep["memory"]
    proc = max(mem["processes"], key=lambda p: p["peak_bytes"])
    leak = next(s for s in mem["sites"] if s["leak"])
    p = open_page(file.as_uri() + "#memory")
    page = p.page
    page.wait_for_selector("#mem-peak-0")
    # The peak marker is the report's peak, on the curve's highest point.
    dot = page.eval_on_selector("#mem-peak-0", """(c) => ({bytes: +c.dataset.bytes,
        cy: +c.getAttribute('cy'), title: c.textContent,
        line: c.ownerSVGElement.querySelector('polyline').getAttribute('points')})""")
    assert dot["bytes"] == proc["peak_bytes"]
    top = min(float(xy.split(",")[1]) for xy in dot["line"].split())
    assert dot["cy"] == pytest.approx(top, abs=0.1)
    assert re.match(r"peak 28\.1 MB at ", dot["title"])
    page.screenshot(path=str(SHOTS / "memory-live.png"), full_page=False)
    # A click on the peak: what was live then, the leak's 20 MiB first.
    page.click("#mem-peak-0")
    page.wait_for_selector("#mem-peak-sites")
    rows = page.eval_on_selector_all(
        "#mem-peak-sites tr", "(r) => r.slice(1).map((t) => Array.from(t.children).map((c) => c.textContent))")
    assert rows[0][0] == "leak" and rows[0][1] == "21.0 MB"
    assert rows[0][5] == leak["native"]  # as the report names it
    assert [r[0] for r in rows[1:3]] == ["alpha", "gamma"]
    page.locator("#mem-peak-card").screenshot(path=str(SHOTS / "memory-peak.png"))
    # The flame graph by bytes at the peak: zone leak, then its site.
    assert widest(page, 1)[:2] == ("zone leak", 21 * MIB)
    assert widest(page, 2)[:2] == ("[" + leak["native"] + "]", 20 * MIB)
    assert frames(page, 0)[0][1] == proc["peak_bytes"]
    # Hover: bytes, count and where.
    page.hover("#mem-flame rect[data-depth='2'][data-name='[%s]']" % leak["native"])
    tip = page.text_content(".tip")
    assert "21.0 MB live at the peak" in tip
    assert "20 allocations" in tip and "at [" + leak["native"] + "]" in tip
    # By bytes allocated: beta's 50 MiB is the widest.
    page.select_option("#mem-by", "alloc")
    assert widest(page, 1)[:2] == ("zone beta", 50 * MIB)
    page.locator("#mem-flame-card").screenshot(path=str(SHOTS / "memory-flame.png"))
    # One zone: only its frames.
    zone = page.eval_on_selector_all("#mem-zone option", "(o) => o.filter((x) => x.textContent === 'alpha')[0].value")
    page.select_option("#mem-zone", zone)
    assert [f[0] for f in frames(page, 1)] == ["zone alpha"]
    assert frames(page, 0)[0][1] == 1000 * 4096
    page.select_option("#mem-zone", "-1")
    # The leak links to its site: outlined in the flame graph.
    page.click(".mem-leak-link")
    page.wait_for_selector("#mem-flame rect.marked")
    marked = page.eval_on_selector_all("#mem-flame rect.marked", "(r) => r.map((x) => x.dataset.name)")
    assert marked == ["zone leak", "[" + leak["native"] + "]"]
    page.screenshot(path=str(SHOTS / "memory.png"), full_page=True)
    # The span timeline draws the live bytes under the spans, same axis.
    page.click("#tab-spans")
    page.wait_for_selector("#span-canvas[data-drawn]")
    page.screenshot(path=str(SHOTS / "spans-memory.png"))
    assert p.errors == []


def test_filter_by_step_and_process(open_page, known, tmp):
    """The step filter (docs/memory.md) changes what the flame graph and
    the live-bytes chart draw: alloc_known's zone leak keeps 1 MiB and
    frees 1 MiB in each of 20 steps, so step 5 allocated 2 MiB, all in zone
    leak, and its peak is the report's step_peak_bytes, the chart's dot,
    with the series drawn over that step alone."""
    rep, file = known
    proc = max(rep["memory"]["processes"], key=lambda p: p["peak_bytes"])
    p = open_page(file.as_uri() + "#memory")
    page = p.page
    page.wait_for_selector("#mem-step")
    opts = page.eval_on_selector_all("#mem-step option", "(o) => o.map((x) => [x.value, x.textContent])")
    assert opts[0] == ["-1", "every step"]
    assert [o[1].split(" (")[0] for o in opts[1:4]] == ["step 1", "step 2", "step 3"]
    whole = page.eval_on_selector("#mem-peak-0", "(c) => c.ownerSVGElement.querySelector('polyline').getAttribute('points').split(' ').length")
    page.select_option("#mem-by", "alloc")
    page.select_option("#mem-step", opts[5][0])  # step 5
    # Allocated in step 5: zone leak's 2 MiB, nothing else.
    assert [f[:2] for f in frames(page, 1)] == [("zone leak", 2 * MIB)]
    assert frames(page, 0)[0][1] == 2 * MIB
    # At step 5's peak: what the report says was live then, by site.
    page.select_option("#mem-by", "peak")
    assert frames(page, 0)[0][1] == proc["step_peak_bytes"][4]
    leak = {f[0]: f[1] for f in frames(page, 1)}["zone leak"]
    assert leak == 4 * MIB + 2 * MIB  # 4 kept before, 2 in the step
    dot = page.eval_on_selector("#mem-peak-0", """(c) => ({bytes: +c.dataset.bytes,
        n: c.ownerSVGElement.querySelector('polyline').getAttribute('points').split(' ').length,
        band: c.ownerSVGElement.querySelectorAll('rect[fill^="rgba(200,55,45"]').length})""")
    assert dot["bytes"] == proc["step_peak_bytes"][4]
    assert dot["n"] < whole and dot["band"] == 1
    page.locator("#mem-flame-card").screenshot(path=str(SHOTS / "memory-step.png"))
    # Every step again: the whole run.
    page.select_option("#mem-step", "-1")
    assert frames(page, 0)[0][1] == proc["peak_bytes"]
    assert p.errors == []


def test_process_filter_with_two_processes(open_page, tmp):
    """Two processes in one page: the process filter keeps one's chart and
    its sites in the flame graph, and its steps in the step filter."""
    out = tmp / "two"
    run(["run", "-q", "--memory=all", "-o", out, "--", BUILD / "alloc_known", "fork"])
    page_file = tmp / "two.html"
    run(["html", out, "-o", page_file])
    rep = json.loads(run(["report", out, "--format", "json"]))
    pids = [q["pid"] for q in rep["memory"]["processes"]]
    p = open_page(page_file.as_uri() + "#memory")
    page = p.page
    page.wait_for_selector("#mem-proc")
    opts = page.eval_on_selector_all("#mem-proc option", "(o) => o.map((x) => [x.value, x.textContent])")
    assert len(opts) == len(pids) + 1 >= 3
    def charts():
        return page.eval_on_selector_all(".mem-peak", "(c) => c.length")
    assert charts() == len(pids)
    # The process that allocated in zone "child" alone shows it.
    for value, name in opts[1:]:
        page.select_option("#mem-proc", value)
        assert charts() == 1
        zones = {f[0] for f in frames(page, 1)}
        if "zone child" in zones:
            break
    else:
        raise AssertionError("no process shows zone child")
    page.select_option("#mem-proc", "-1")
    assert "zone child" in {f[0] for f in frames(page, 1)}
    assert p.errors == []


def test_site_details_of_a_page_with_many_sites(open_page, tmp):
    """A run of 5000 allocation sites: the page keeps 2000 of them
    (docs/memory.md) and no report sites of its own, yet each shown site
    is named as the report names it, and a click shows it in the flame
    graph."""
    script = tmp / "many_sites.py"
    script.write_text("kept = [bytearray(40 << 20)]\n" +
                      "kept.append(bytearray(2048))\n" * 5000 + "print(len(kept))\n")
    out = tmp / "many-sites"
    run(["run", "-q", "--memory=all", "-o", out, "--", sys.executable, script])
    file = tmp / "many-sites.html"
    run(["html", out, "-o", file])
    rep = json.loads(run(["report", out, "--format", "json"]))
    big = next(s for s in rep["memory"]["sites"] if s["python"] == "%s:1 <module>" % script)
    assert len(rep["memory"]["sites"]) > 5000
    p = open_page(file.as_uri() + "#memory")
    page = p.page
    page.wait_for_selector("#mem-peak-0")
    page.click("#mem-peak-0")
    page.wait_for_selector("#mem-peak-sites")
    rows = page.eval_on_selector_all(
        "#mem-peak-sites tr", "(r) => r.slice(1).map((t) => Array.from(t.children).map((c) => c.textContent))")
    assert rows[0][1] == "41.9 MB"
    assert rows[0][5] == "%s [%s]" % (big["python"], big["native"])
    # Every row names a line of the program or another site of the report.
    names = {"%s [%s]" % (s["python"], s["native"]) if s["python"] and s["native"]
             else s["python"] or s["native"] for s in rep["memory"]["sites"]}
    assert len(rows) == 20 and all(r[5] in names for r in rows)
    page.click("#mem-peak-sites tr:nth-child(2)")
    page.wait_for_selector("#mem-flame rect.marked")
    marked = page.eval_on_selector_all("#mem-flame rect.marked", "(r) => r.map((x) => x.dataset.name)")
    assert "%s:1 <module>" % script in marked
    assert p.errors == []
