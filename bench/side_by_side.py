"""What the Python benchmarks share to show mlprof beside the profilers a
user would try instead: conditions run in interleaved rounds on the same
workload in the same process, and a table of their medians beside the
baseline (no profiler) and beside mlprof's figure of the same run."""
import importlib.metadata
import statistics
import time


def version(package):
    """The installed version of a peer's package, for the tables."""
    return importlib.metadata.version(package)


def cpu_ns(fn, arg, best_of=1, clock=time.process_time_ns):
    """CPU time while fn(arg) runs, in ns: by default of the whole process
    (all its threads: a profiler's writer thread counts), of the calling
    thread with clock=time.thread_time_ns; the least of best_of runs (other
    jobs on a loaded machine only ever add to it, and to CPU time less than
    to wall time)."""
    best = None
    for _ in range(best_of):
        t0 = clock()
        fn(arg)
        t = clock() - t0
        best = t if best is None else min(best, t)
    return best


def interleaved(ways, rounds):
    """{name: [what it returned in each round]} for ways {name: callable}:
    every way once per round, the order rotated each round so that none
    always runs first or after the same neighbour."""
    names = list(ways)
    got = {k: [] for k in names}
    for r in range(rounds):
        i = r % len(names)
        for k in names[i:] + names[:i]:
            got[k].append(ways[k]())
    return got


def medians(got):
    """{name: median} of interleaved()'s figures."""
    return {k: statistics.median(v) for k, v in got.items()}


def table(title, unit, rows, ours=1, fmt="%.1f"):
    """Prints rows [(label, figure, note)] under title: each figure (a cost
    per unit: per call, per line, per step), what it adds over the first
    row's (the baseline: no profiler), its ratio to the baseline, and its
    added cost as a multiple of mlprof's (the row at index ours; None where
    mlprof adds nothing to compare with). A note (a budget, how a peer was
    set up) follows its row."""
    base, mine = rows[0][1], rows[ours][1] if ours is not None else None
    print(title)
    print("  %-46s %10s %10s %8s %8s" % ("", unit, "added", "x none",
                                         "x ours"))
    for i, (label, v, note) in enumerate(rows):
        added, by_ours = "-", "-"
        if i:
            added = fmt % (v - base)
            if mine is not None and mine > base:
                by_ours = "%.2f" % ((v - base) / (mine - base))
        print("  %-46s %10s %10s %8.2f %8s%s"
              % (label, fmt % v, added, v / base, by_ours,
                 "  " + note if note else ""))
