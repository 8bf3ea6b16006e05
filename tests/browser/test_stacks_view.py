"""The Stacks view (flame graph of the sampled stacks) and the samples on
the span timeline, in Debian's headless Chromium: a program with known
shares (20/30/50% in three functions) draws them in those widths, a zone
filter and a step range change the graph, a click zooms, a hover tells
self and total time, wall time shows a sleeping thread that CPU time does
not; the timeline's sample strips toggle and a click shows a sample's
stack; the served page draws the same. No console error anywhere.
Screenshots go to build/screenshots/."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, SHOTS, run

PROGRAM = ROOT / "tests" / "programs" / "stack_shares.py"
THREE = ("twenty", "thirty", "fifty")
FRAMES = "() => window.mlprofStacks.frames()"


@pytest.fixture(scope="module")
def shares(tmp):
    """A run of tests/programs/stack_shares.py (30 steps of 100 ms at
    200 Hz) in a run directory, and its static page: (directory, page)."""
    d = tmp / "stack-runs" / "shares"
    d.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(BUILD / "python")}
    env.pop("MLPROF_OUTPUT", None)
    subprocess.run([sys.executable, str(PROGRAM), str(d / "shares.mlprof"), "30", "200"],
                   stdin=subprocess.DEVNULL, check=True, env=env, timeout=300)
    page = tmp / "stacks.html"
    run(["html", d, "-o", page, "--title", "stack shares"])
    return d, page


def widths(page, names=THREE):
    """The drawn width of each function named, summed over its frames."""
    out = {n: 0.0 for n in names}
    for f in page.evaluate(FRAMES):
        if f["name"] in out:
            out[f["name"]] += f["w"]
    return out


def spun_ns(page):
    """The time in the three functions, from their frames."""
    return sum(f["total"] for f in page.evaluate(FRAMES) if f["name"] in THREE)


def test_flame_graph_known_shares_zone_steps_zoom_hover_modes(open_page, shares):
    p = open_page(shares[1].as_uri() + "#stacks")
    page = p.page
    page.wait_for_selector("#st-flame rect")
    w = widths(page)
    total = sum(w.values())
    # The widest is fifty, then thirty, then twenty, in about their shares
    # (the sampler's own accuracy, ±3 points on a quiet machine, is
    # tests/python/test_stacks.py's; this machine may be loaded).
    assert w["fifty"] > w["thirty"] > w["twenty"], w
    for name, want in zip(THREE, (20, 30, 50)):
        assert abs(100 * w[name] / total - want) <= 6, (name, w)
    all_ns = spun_ns(page)
    # Hover: the function's file:line, self and total time, and share.
    page.locator('#st-flame rect[data-name="fifty"]').hover()
    tip = page.text_content(".tip")
    assert re.search(r"^fifty\n.*stack_shares\.py:\d+\ntotal .* \(\d+(\.\d+)?% of the selection\)\nself ", tip), tip
    page.screenshot(path=str(SHOTS / "stacks.png"), full_page=True)
    # Zone filter: "small" holds twenty and thirty only; "big" fifty (but
    # for a sample taken as a zone ends, which may see the next function).
    page.select_option("#st-zone", label="small")
    w = widths(page)
    assert w["fifty"] <= 35 and max(w, key=w.get) == "thirty", w
    assert abs(100 * w["thirty"] / (w["twenty"] + w["thirty"]) - 60) <= 8, w
    page.select_option("#st-zone", label="big")
    w = widths(page)
    assert w["twenty"] + w["thirty"] <= 35 and w["fifty"] >= 1000, w
    page.select_option("#st-zone", value="-2")
    # Steps 10 to 14: a sixth of the spinning.
    page.fill("#st-steps", "10:15")
    page.press("#st-steps", "Enter")
    page.wait_for_function("() => document.querySelector('#st-steps').value === '10:15'")
    assert abs(spun_ns(page) / all_ns - 5 / 30) <= 0.05, (spun_ns(page), all_ns)
    page.fill("#st-steps", "")
    page.press("#st-steps", "Enter")
    # Zoom: thirty fills the width, what it called under it; the top bar
    # zooms out.
    page.locator('#st-flame rect[data-name="thirty"]').click()
    fr = page.evaluate(FRAMES)
    thirty = [f for f in fr if f["name"] == "thirty"]
    assert len(thirty) == 1 and thirty[0]["w"] == 1100, thirty
    assert not any(f["name"] in ("twenty", "fifty") for f in fr)
    spin = [f for f in fr if f["name"] == "spin"]
    assert spin and spin[0]["depth"] == thirty[0]["depth"] + 1 and spin[0]["w"] > 1000, spin
    page.screenshot(path=str(SHOTS / "stacks-zoom.png"), full_page=True)
    # The zoom outlives a redraw (wall time here).
    page.check("#st-mode-wall")
    assert [f["w"] for f in page.evaluate(FRAMES) if f["name"] == "thirty"] == [1100]
    page.check("#st-mode-cpu")
    page.locator('#st-flame rect[data-name="all"]').click()
    assert widths(page)["twenty"] > 0
    # CPU time leaves the sleeping thread out; wall time shows it.
    cpu_sleeper = widths(page, ["sleeper"])["sleeper"]
    page.check("#st-mode-wall")
    wall_sleeper = widths(page, ["sleeper"])["sleeper"]
    assert cpu_sleeper < 100 and wall_sleeper > 300, (cpu_sleeper, wall_sleeper)
    # The thread filter: the sleeper alone.
    sleeper = page.evaluate("""() => [...document.querySelectorAll('#st-thread option')]
        .find((o) => /^sleeper \\d+/.test(o.textContent)).value""")
    page.select_option("#st-thread", value=sleeper)
    names = {f["name"] for f in page.evaluate(FRAMES)}
    assert "sleeper" in names and not names & set(THREE), names
    assert p.errors == []


def test_samples_on_the_span_timeline_toggle_and_show_a_stack(open_page, shares):
    p = open_page(shares[1].as_uri() + "#spans")
    page = p.page
    page.wait_for_selector("#span-canvas[data-drawn]")
    page.wait_for_function("() => +document.querySelector('#span-canvas').getAttribute('data-samples') > 0")
    marks = page.evaluate("() => window.mlprofStacks.marks()")
    assert {m["tid"] for m in marks} and any(m["cpu"] for m in marks) and any(not m["cpu"] for m in marks)
    page.screenshot(path=str(SHOTS / "spans-samples.png"))
    # A click on a sample on a CPU of the main thread, zoomed to 100 ms
    # around it (samples some 60 pixels apart): its stack.
    m = next(m for m in marks if m["cpu"] and m["t"] > 0.5 * marks[-1]["t"])
    page.evaluate("([a, b]) => window.mlprofTimeline.setView(a, b)", [m["t"] - 5e7, m["t"] + 5e7])
    page.wait_for_timeout(100)
    box = page.locator("#span-canvas").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2 - 2, box["y"] + m["y"])
    page.wait_for_selector("#sample-detail")
    text = page.text_content("#sample-detail")
    assert "on a CPU" in text and re.search(r"(twenty|thirty|fifty|spin) \(.*stack_shares\.py:\d+\)", text), text
    page.uncheck("#st-lane")
    page.wait_for_function("() => document.querySelector('#span-canvas').getAttribute('data-samples') === '0'")
    page.check("#st-lane")
    page.wait_for_function("() => +document.querySelector('#span-canvas').getAttribute('data-samples') > 0")
    assert p.errors == []


def test_served_page_draws_the_same_flame_graph(open_page, serve, shares):
    srv = serve(shares[0].parent)
    p = open_page(srv.base + "/run/shares/#stacks")
    p.page.wait_for_selector("#st-flame rect")
    w = widths(p.page)
    assert max(w, key=w.get) == "fifty", w
    assert p.errors == []
    assert srv.stop() == 0


# Three functions that spin in their own loops (their own self time), per
# step 20, 30 and 50 ms times SLOW for fifty().
SELF_SHARES = """import sys, time
import mlprof


def twenty():
    end = time.perf_counter() + 0.02
    while time.perf_counter() < end:
        pass


def thirty():
    end = time.perf_counter() + 0.03
    while time.perf_counter() < end:
        pass


def fifty(slow):
    end = time.perf_counter() + 0.05 * slow
    while time.perf_counter() < end:
        pass


prof = mlprof.Profiler(sys.argv[1], stacks=200).start()
for _ in range(20):
    prof.step()
    with prof.zone("train_step"):
        twenty()
        thirty()
        fifty(float(sys.argv[2]))
prof.step()
prof.stop()
"""


def test_diff_page_lists_the_function_made_slower(tmp, open_page):
    """Two runs of three functions' known self times, fifty() twice as slow
    in NEW: the Diff view's Functions table has one row per function of
    mlprof diff's, with its file:line, and says fifty() is slower, about
    +100% a step, and the other two unchanged."""
    d = tmp / "stack-runs" / "diff"
    d.mkdir(parents=True)
    prog = d / "self_shares.py"
    prog.write_text(SELF_SHARES)
    env = {**os.environ, "PYTHONPATH": str(BUILD / "python")}
    env.pop("MLPROF_OUTPUT", None)
    for name, slow in (("base", "1"), ("new", "2")):
        (d / name).mkdir()
        subprocess.run([sys.executable, str(prog), str(d / name / "p.mlprof"), slow],
                       stdin=subprocess.DEVNULL, check=True, env=env, timeout=300)
    page_file = tmp / "stack-diff.html"
    run(["html", "--diff", d / "base", d / "new", "-o", page_file])
    p = open_page(page_file.as_uri())
    page = p.page
    assert page.get_attribute("#tab-diff", "class") == "on"
    fn = page.evaluate("() => JSON.parse(document.getElementById('mlprof-data').textContent)"
                       ".diff.functions")
    assert fn["per"] == "step"
    rows = page.eval_on_selector_all(
        "#diff-funcs tbody tr", "(r) => r.map((x) => Array.from(x.children).map((c) => c.textContent))")
    # One row per function of the diff, in its order.
    assert [r[0] for r in rows] == [f["function"] for f in fn["rows"]]
    by = {r[0]: r for r in rows}
    src = SELF_SHARES.splitlines()
    for name in THREE:
        line = next(i + 1 for i, t in enumerate(src) if t.startswith("def %s(" % name))
        assert by[name][1] == "self_shares.py:%d" % line, by[name]
    assert by["fifty"][2] == "slower", by["fifty"]
    assert by["twenty"][2] == "unchanged" and by["thirty"][2] == "unchanged", rows
    change = float(by["fifty"][5].rstrip("%"))
    assert 60 <= change <= 140, by["fifty"]
    # NEW's self time a step is about twice BASE's, as the row shows it.
    f = next(f for f in fn["rows"] if f["function"] == "fifty")
    assert 1.6 <= f["new_self_ns"] / f["base_self_ns"] <= 2.4, f
    assert by["fifty"][3].endswith("ms") and by["fifty"][4].endswith("ms"), by["fifty"]
    page.screenshot(path=str(SHOTS / "diff-functions.png"), full_page=True)
    assert p.errors == []
