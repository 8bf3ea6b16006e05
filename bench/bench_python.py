"""Python-side overhead of mlprof, every figure beside a baseline measured in
the same run:

  - `with prof.zone("x"):`, recording and switched off, against a no-op
    context manager written in C (mlprof._mlprof.NoopProfiler: same call
    shape, no work) and against torch.profiler.record_function under
    torch.profiler.profile() with its default settings and with no
    profiler, in interleaved rounds beside the empty loop, medians
    (budget: <= 1.3x the no-op, >= 10x cheaper than record_function);
  - hooks of mlprof.torch.profile_model per module per forward+backward on
    50 tiny Linear layers, against the same step without hooks (budget:
    <= 5 µs), and on a ResNet-like CPU training step (<= 5% added);
  - Profiler(backend="torch") on the same step: torch.profiler's own cost,
    against the step without any profiler and with mlprof's zones only,
    and the import of its events at stop();
  - a CPU tensor's .item() with the host-sync wrapper that
    mlprof.distributed.install() puts on torch.Tensor, against torch's own.

usage: python3 bench/bench_python.py [--quick]
Needs the package importable (make bench-python installs it) and torch."""
import statistics
import sys
import tempfile
import time

import mlprof
from mlprof import _mlprof
from side_by_side import cpu_ns, interleaved, medians, table

QUICK = "--quick" in sys.argv
N = 200_000 if QUICK else 1_000_000
REPEAT = 5 if QUICK else 9
ROUNDS = 3 if QUICK else 9


def per_iter(fn, n):
    """Best of REPEAT runs, ns per iteration."""
    best = float("inf")
    for _ in range(REPEAT):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def loop_empty(n):
    for _ in range(n):
        pass


def make_with_loop(obj):
    zone = obj.zone

    def run(n):
        for _ in range(n):
            with zone("x"):
                pass
    return run


def bench_zones():
    """A with statement per iteration of a loop: mlprof's zone recording and
    switched off, a no-op context manager written in C with the same call
    shape (the budget's baseline), and torch.profiler.record_function under
    torch.profiler.profile() with its default settings and with no profiler;
    interleaved rounds, medians, beside the empty loop of the same run."""
    out = tempfile.mkdtemp(prefix="mlprof-bench-") + "/"
    noop = _mlprof.NoopProfiler()
    prof = mlprof.Profiler(output=out, memory_cap=256 << 20).start()
    run_zone = make_with_loop(prof)
    run_noop = make_with_loop(noop)
    n_rf = max(N // 200, 1000)  # record_function costs µs: fewer of them

    def off(n):
        prof.set_enabled(False)
        try:
            run_zone(n)
        finally:
            prof.set_enabled(True)

    def per_with(fn, n, clock=time.thread_time_ns):
        return lambda: cpu_ns(fn, n, clock=clock) / n

    ways = {
        "empty": per_with(loop_empty, N),
        "noop": per_with(run_noop, N),
        "zone": per_with(run_zone, N),
        "zone_process": per_with(run_zone, N, time.process_time_ns),
        "off": per_with(off, N),
    }
    try:
        import torch
        from torch.profiler import record_function

        def run_rf(n):
            for _ in range(n):
                with record_function("x"):
                    pass

        def rf_profiled():
            with torch.profiler.profile():
                return cpu_ns(run_rf, n_rf, clock=time.thread_time_ns) / n_rf
        rf_profiled()  # the first start initialises torch's profiler
        ways["rf"] = per_with(run_rf, n_rf)
        ways["rf_prof"] = rf_profiled
    except ImportError:
        torch = None
    ns = medians(interleaved(ways, ROUNDS))
    dropped = _mlprof.dropped()
    prof.stop()
    rows = [
        ("empty loop (baseline)", ns["empty"], ""),
        ("mlprof: with prof.zone('x'), recording", ns["zone"],
         "x%.2f the C no-op (budget <= 1.3)" % (ns["zone"] / ns["noop"])),
        ("  the same, CPU time of all threads", ns["zone_process"],
         "its writer thread included"),
        ("mlprof: with prof.zone('x'), switched off", ns["off"], ""),
        ("with noop.zone('x'): a no-op written in C", ns["noop"],
         "the budget's baseline"),
    ]
    if torch is not None:
        rows += [
            ("with record_function('x'), torch.profiler on", ns["rf_prof"],
             "%.1fx mlprof's zone (budget >= 10)" % (ns["rf_prof"] /
                                                      ns["zone"])),
            ("with record_function('x'), no profiler", ns["rf"], ""),
        ]
    table("Python zones (%s; %d iterations, record_function %d; median of "
          "%d interleaved rounds, CPU time of the thread)"
          % (sys.version.split()[0], N, n_rf, ROUNDS), "ns/iter", rows)
    print("  torch.profiler.profile() with its default settings, started "
          "and stopped around each of its rounds (not timed: its cost at "
          "stop comes on top); mlprof events dropped: %d" % dropped)


def resnet_like():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False),
                    nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + idt)

    class ResNetLike(nn.Module):
        def __init__(self, w=32, classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False),
                                      nn.BatchNorm2d(w), nn.ReLU(inplace=True))
            self.layer1 = nn.Sequential(Block(w, w, 1), Block(w, w, 1))
            self.layer2 = nn.Sequential(Block(w, 2 * w, 2),
                                        Block(2 * w, 2 * w, 1))
            self.layer3 = nn.Sequential(Block(2 * w, 4 * w, 2),
                                        Block(4 * w, 4 * w, 1))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(4 * w, classes)

        def forward(self, x):
            x = self.layer3(self.layer2(self.layer1(self.stem(x))))
            return self.fc(torch.flatten(self.pool(x), 1))

    return ResNetLike()


def resnet_step():
    """(model, step, timed): the ResNet-like model, one CPU training step
    of it (batch 32, 3x32x32), and timed(k) -> ns per step over k steps."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    torch.set_num_threads(1)  # less noise on a small machine
    model = resnet_like()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(32, 3, 32, 32)
    y = torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    def timed(k):
        t0 = time.perf_counter_ns()
        for _ in range(k):
            step()
        return (time.perf_counter_ns() - t0) / k
    return model, step, timed


def bench_hooks():
    import mlprof.torch as mt
    model, step, timed = resnet_step()
    out = tempfile.mkdtemp(prefix="mlprof-bench-") + "/"
    prof = mlprof.Profiler(output=out).start()
    for _ in range(3):
        step()  # warm up
    k = 3 if QUICK else 5
    rounds = 4 if QUICK else 8
    base, hooked = [], []
    mp = None
    for _ in range(rounds):
        base.append(timed(k))
        mp = mt.profile_model(model, prof)
        hooked.append(timed(k))
        mp.remove()
    mp = mt.profile_model(model, prof)
    step()
    s = prof.summary()
    mp.remove()
    prof.stop()
    nzones = sum(z["count"] for z in s["zones"])
    b, h = statistics.median(base), statistics.median(hooked)
    print("ResNet-like CPU training step (batch 32, 3x32x32, 1 thread, "
          "%d hooked modules, median of %d rounds of %d steps)"
          % (len(mp.names), rounds, k))
    print("  without hooks (baseline)  %8.2f ms/step" % (b / 1e6))
    print("  with profile_model hooks  %8.2f ms/step  +%.2f%% (budget <= 5%%)"
          % (h / 1e6, 100 * (h - b) / b))
    print("  zones recorded: %d; model forward FLOPs: %.3g"
          % (nzones, mp.total_flops))
    return (h - b) / b


def bench_hook_cost():
    """Cost of profile_model's hooks per module per forward+backward, on 50
    Linear(8, 8) layers (the layers cost little, so the hooks show): the
    step hooked against the same step without hooks, interleaved, best of
    the rounds, in thread CPU time (torch on one thread) so that other
    processes on a shared machine do not add to either."""
    import torch
    from torch import nn
    import mlprof.torch as mt
    torch.set_num_threads(1)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(50)])
    x = torch.randn(4, 8)

    def timed(k):
        t0 = time.thread_time_ns()
        for _ in range(k):
            model(x).sum().backward()
        return (time.thread_time_ns() - t0) / k
    out = tempfile.mkdtemp(prefix="mlprof-bench-") + "/"
    prof = mlprof.Profiler(output=out).start()
    timed(20)  # warm up
    k = 20 if QUICK else 50
    rounds = 5 if QUICK else 15
    # Without hooks; forward zones only; backward zones every forward; the
    # default (backward zones in one forward in mt.BACKWARD_EVERY).
    kinds = (None, {"backward": False}, {"backward_every": 1}, {})
    t = [[] for _ in kinds]
    for _ in range(rounds):
        for i, kw in enumerate(kinds):
            if kw is None:
                t[i].append(timed(k))
                continue
            with mt.profile_model(model, prof, **kw) as mp:
                t[i].append(timed(k))
    s = prof.summary()
    prof.stop()
    modules = len(mp.names)
    b, fo, every, h = (min(x) for x in t)
    over = next((z for z in s["zones"] if z["name"] == mt.OVERHEAD_ZONE),
                None)
    print("profile_model hooks on %d x Linear(8, 8), forward+backward "
          "(%d modules hooked, best of %d rounds of %d steps, thread CPU "
          "time)" % (len(model), modules, rounds, k))
    print("  without hooks (baseline)  %8.3f ms/step" % (b / 1e6))
    for name, v in (("forward zones only", fo),
                    ("backward zones every step", every),
                    ("default (backward 1 in %d)" % mt.BACKWARD_EVERY, h)):
        print("  %-26s%8.3f ms/step  +%.2f µs per module per step%s"
              % (name, v / 1e6, (v - b) / modules / 1e3,
                 " (budget <= 5)" if v is h else ""))
    if over is not None:
        print("  of which in the '%s' zone (walk, hooks on the graph): "
              "%.2f µs per module call" % (mt.OVERHEAD_ZONE,
                                           over["mean_ns"] / 1e3))
    return (h - b) / modules


def bench_torch_op():
    """ns per operator (x.add_(1) on one element) without torch.profiler,
    and what torch.profiler adds with and without FLOPs: interleaved
    rounds, each profiled one under a profiler of its own (torch keeps tens
    of kB per operator event until the profile is freed), medians."""
    import torch
    x = torch.ones(1)
    n = 2000

    def ops(n):
        for _ in range(n):
            x.add_(1)

    def profiled(flops):
        def run():
            with torch.profiler.profile(with_flops=flops):
                return cpu_ns(ops, n, clock=time.thread_time_ns) / n
        return run
    t = medians(interleaved({
        None: lambda: cpu_ns(ops, n, clock=time.thread_time_ns) / n,
        True: profiled(True), False: profiled(False)}, ROUNDS))
    print("  one operator (x.add_(1))        %8.2f µs; torch.profiler adds "
          "%.2f µs with FLOPs (backend='torch'), %.2f µs without"
          % (t[None] / 1e3, (t[True] - t[None]) / 1e3,
             (t[False] - t[None]) / 1e3))


def bench_torch_backend():
    import torch
    import mlprof.torch as mt
    model, step, timed = resnet_step()
    out = tempfile.mkdtemp(prefix="mlprof-bench-") + "/"
    k = 3 if QUICK else 5
    rounds = 4 if QUICK else 8
    times = {"none": [], "mlprof": [], "torch": []}
    stops = {"mlprof": [], "torch": []}

    def profiled(backend):
        """ns per step with a Profiler of this backend and profile_model's
        hooks, and the ns its stop() took."""
        prof = mlprof.Profiler(output=out, backend=backend).start()
        with mt.profile_model(model, prof):
            t = timed(k)
        t0 = time.perf_counter_ns()
        prof.stop()
        return t, time.perf_counter_ns() - t0

    for _ in range(2):
        step()  # warm up
    profiled("torch")  # torch.profiler's first start initialises Kineto
    for _ in range(rounds):
        times["none"].append(timed(k))
        for backend in ("mlprof", "torch"):
            t, stop_ns = profiled(backend)
            times[backend].append(t)
            stops[backend].append(stop_ns)
    # The import alone, of the same steps profiled by torch.profiler.
    tp = torch.profiler.profile(with_flops=True)
    tp.start()
    timed(k)
    tp.stop()
    prof = mlprof.Profiler(output=out).start()
    t0 = time.perf_counter_ns()
    ops = sum(mt.import_profile(tp).values())
    imp = time.perf_counter_ns() - t0
    prof.stop()
    # Best of the rounds: on a shared machine noise only adds time.
    best = {b: min(v) for b, v in times.items()}
    stop_more = min(stops["torch"]) - min(stops["mlprof"])
    print("Profiler(backend='torch') on the ResNet-like CPU training step "
          "(best of %d rounds of %d steps)" % (rounds, k))
    print("  no profiler (baseline)          %8.2f ms/step" %
          (best["none"] / 1e6))
    print("  mlprof zones (profile_model)    %8.2f ms/step  %+.1f%%" %
          (best["mlprof"] / 1e6, 100 * (best["mlprof"] / best["none"] - 1)))
    print("  backend='torch' (zones + ops)   %8.2f ms/step  %+.1f%% over "
          "the baseline, %+.1f%% over zones only"
          % (best["torch"] / 1e6, 100 * (best["torch"] / best["none"] - 1),
             100 * (best["torch"] / best["mlprof"] - 1)))
    bench_torch_op()
    print("  stop(): %.1f ms more than without torch (torch's own "
          "processing and the import)" % (stop_more / 1e6))
    print("  import_profile: %.1f ms for %d operator events (%.2f µs each, "
          "%d per step)" % (imp / 1e6, ops, imp / 1e3 / ops, ops // k))


def bench_host_sync():
    import torch
    from mlprof import distributed
    t = torch.tensor(1.0)

    def run(n):
        for _ in range(n):
            t.item()

    saved = {n: getattr(torch.Tensor, n) for n in distributed.SYNC_METHODS}
    cuda_sync = torch.cuda.synchronize
    plain, wrapped = float("inf"), float("inf")
    for _ in range(3):  # alternated, against drift of the machine's speed
        plain = min(plain, per_iter(run, N))
        distributed._hook_host_syncs(torch)
        try:
            wrapped = min(wrapped, per_iter(run, N))
        finally:
            for name, fn in saved.items():
                setattr(torch.Tensor, name, fn)
            torch.cuda.synchronize = cuda_sync
    print("CPU tensor .item() (%d iterations, best of %d x 3)" % (N, REPEAT))
    print("  torch's own (baseline)           %7.1f ns/call" % plain)
    print("  with mlprof's host-sync wrapper  %7.1f ns/call  +%.1f ns"
          % (wrapped, wrapped - plain))


def main():
    bench_zones()
    print()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch not installed: hook overhead not measured")
        return
    bench_hook_cost()
    print()
    bench_hooks()
    print()
    bench_torch_backend()
    print()
    bench_host_sync()


if __name__ == "__main__":
    main()
