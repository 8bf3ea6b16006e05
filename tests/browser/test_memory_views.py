"""The dashboard's memory views (docs/memory.md) in a real browser: the
live-bytes timeline of a program with a known allocation pattern
(tests/programs/alloc_known.c, every allocation recorded) peaks where the
report says, a click on the peak lists what was live then, the memory flame
graph's widest frame is the known site (by bytes at the peak and by bytes
allocated), its filters and hover work, and the leak links to its site.
Screenshots go to build/screenshots/."""
import json
import re

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
