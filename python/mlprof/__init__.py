"""mlprof: a low-overhead profiler for ML pipelines.

    import mlprof
    with mlprof.Profiler(output="run.mlprof") as prof:
        for batch in loader:
            with prof.zone("forward"):
                ...
            prof.step()
    print(prof.summary()["zones"][0])

Zones, metrics and throughput go through the C extension (mlprof._mlprof),
which carries the project's recording library, statistics and exporters.
One session per process: under `mlprof run` (the library preloaded), a
Profiler joins the session that is already running. See docs/python.md.
"""
import atexit
import functools
import json
import linecache
import os
import sys
import types
import warnings

from . import _mlprof
from ._mlprof import Error, Zone
from .tables import to_duckdb

__all__ = ["Profiler", "Zone", "Error", "schedule", "profile", "zone",
           "gauge", "units", "zone_meta", "lines", "version", "read_events",
           "report", "to_duckdb"]

__version__ = _mlprof.version()
# The categories' names, in the order of their numbers (from the C header).
CATEGORIES = _mlprof.CATEGORIES

# Profiler(backend=...): None is the default, "mlprof"; "calls" and
# "torch" combine: backend=("calls", "torch").
BACKENDS = (None, "mlprof", "torch", "calls")

# Profiler(calls_options=...) and their defaults.
CALLS_OPTIONS = {"include": (), "exclude": (), "builtins": False,
                 "max_depth": 0, "min_duration": 0.0}

# Formats of Profiler.export and the file suffix each one gets.
EXPORT_SUFFIX = {"json": ".json", "csv": ".csv", "text": ".txt",
                 "findings-csv": ".findings.csv", "trace": ".trace.json"}


def _memory_mode_ok(mode):
    """Whether mode is one Profiler(memory=...) takes (docs/memory.md)."""
    if not isinstance(mode, str):
        return False
    if mode in ("sampled", "all", "off"):
        return True
    n = mode[len("sampled:"):]
    return mode.startswith("sampled:") and n.isdigit() and n.isascii() \
        and int(n) > 0


def version():
    """Version of the recording library in use (the preloaded one under
    `mlprof run`)."""
    return _mlprof.version()


class schedule:
    """Which steps to record, as torch.profiler.schedule: each cycle skips
    `wait` steps, warms up for `warmup` steps (not recorded), then records
    `active` steps; `repeat` cycles (0: cycle until the end). `skip_first`
    steps are skipped once at the start. Steps are counted by Profiler.step().
    """

    def __init__(self, *, wait=0, warmup=0, active=1, repeat=0, skip_first=0):
        for name, v in (("wait", wait), ("warmup", warmup), ("active", active),
                        ("repeat", repeat), ("skip_first", skip_first)):
            if not isinstance(v, int) or v < 0:
                raise ValueError("schedule: %s must be a whole number >= 0, "
                                 "not %r" % (name, v))
        if active < 1:
            raise ValueError("schedule: active must be at least 1")
        self.wait, self.warmup, self.active = wait, warmup, active
        self.repeat, self.skip_first = repeat, skip_first

    def __call__(self, step):
        """'record', 'warmup' or 'none' for step number `step` (0-based)."""
        if step < self.skip_first:
            return "none"
        step -= self.skip_first
        cycle = self.wait + self.warmup + self.active
        if self.repeat and step >= cycle * self.repeat:
            return "none"
        pos = step % cycle
        if pos < self.wait:
            return "none"
        if pos < self.wait + self.warmup:
            return "warmup"
        return "record"

    def __repr__(self):
        return ("mlprof.schedule(wait=%d, warmup=%d, active=%d, repeat=%d, "
                "skip_first=%d)" % (self.wait, self.warmup, self.active,
                                    self.repeat, self.skip_first))


def _stacks_setting(stacks):
    """(stacks_hz, native) for _mlprof.init from a Profiler's stacks=
    (None: the default; hz 0 the library's default rate, -1 none), or None
    when it is not one: None, False, 0..10000, 'native' or 'HZ,native'."""
    if stacks is None:
        return 0, False
    if stacks is False or stacks == 0 and not isinstance(stacks, str):
        return -1, False
    if isinstance(stacks, int) and not isinstance(stacks, bool):
        return (stacks, False) if 0 < stacks <= 10000 else None
    if isinstance(stacks, str):
        if stacks == "native":
            return 0, True
        hz, _, what = stacks.partition(",")
        if what == "native" and hz.isdigit() and 0 <= int(hz) <= 10000:
            return (int(hz), True) if int(hz) else (-1, False)
    return None


class Profiler(_mlprof.ProfilerBase):
    """A profiling session for this process (or a handle on the one already
    running, under `mlprof run`).

    output: a profile file path, or a directory (existing, or ending in '/')
        that gets one file per process. None: $MLPROF_OUTPUT, else
        ./mlprof-PID.mlprof. Forked children (DataLoader workers) write their
        own profile next to it.
    sample_interval: seconds between samples of CPU, memory, I/O,
        temperature, energy and GPU measures (default 0.1); 0 switches
        sampling off. gpu: False never loads NVML (no GPU sampling).
        Both apply when this Profiler starts the session; a joined session
        (under `mlprof run`) keeps the settings it was started with.
    stacks: stack samples per second of every Python thread (default 100;
        False or 0: none), for the report's Hot functions and folded
        stacks (docs/stacks.md); "native" or "HZ,native" add native frames
        (C extensions, libraries) merged with the Python ones. Applies when this Profiler starts the
        session (under `mlprof run`, --stacks decides). CPython 3.11+.
    enabled: False starts with recording switched off.
    memory_cap: bytes of event buffers at most (default 64 MiB); past it
        events are dropped and counted, never blocking the program.
    schedule: mlprof.schedule(...) to record only some steps.
    flush_ms: writer interval (default 200 ms).
    backend: "mlprof" (None, the default) records zones only; "torch" also
        runs torch.profiler (CPU operators, CUDA kernels when CUDA is
        available, FLOPs) from start() to stop(), following the schedule,
        and brings its events into the profile on tracks when it stops and
        at the end of each scheduled window (mlprof.torch.import_profile).
    torch_options: with backend="torch", more arguments for
        torch.profiler.profile (record_shapes=True, activities=...).
        backend="calls" makes every Python function call a zone named by
        its qualified name (module.Class.method), on its thread's timeline
        with the other zones; combine as backend=("calls", "torch").
    calls_options: with backend="calls", a dict of: include / exclude
        (lists of module names or path prefixes; mlprof's own code is never
        traced), builtins (True: C functions too; default False), max_depth
        (calls nested deeper are not recorded; 0: no limit), min_duration
        (seconds: shorter calls are dropped and counted; the kept ones go on
        a track per thread, "calls TID", see docs/python.md).
    lines: functions (or code objects) whose lines are timed: per line,
        hits, total time, time less the calls made from it, share of the
        function; summary()["lines"]. Also prof.lines(fn), @mlprof.lines.
    memory: which allocations are recorded from start() on: "sampled"
        (mlprof run's default), "sampled:BYTES", "all" or "off"; None
        leaves it as it is (docs/memory.md). Captured only where libmlprof
        is preloaded (under mlprof run): elsewhere a warning says so.
    """

    def __init__(self, output=None, sample_interval=None, gpu=None,
                 enabled=True, memory_cap=None, schedule=None, flush_ms=None,
                 backend=None, torch_options=None, calls_options=None,
                 lines=None, stacks=None, memory=None):
        if _stacks_setting(stacks) is None:
            raise ValueError("stacks must be samples per second (0 to "
                             "10000), 'native', 'HZ,native', False or None, "
                             "not %r" % (stacks,))
        if sample_interval is not None and not sample_interval >= 0:
            raise ValueError("sample_interval must be >= 0 seconds")
        if memory_cap is not None and memory_cap < 0:
            raise ValueError("memory_cap must be >= 0 bytes")
        if memory is not None and not _memory_mode_ok(memory):
            raise ValueError("memory must be 'sampled', 'sampled:BYTES' "
                             "(BYTES > 0), 'all' or 'off', not %r" % (memory,))
        self.memory = memory
        if schedule is not None and not callable(schedule):
            raise TypeError("schedule must be mlprof.schedule(...) or a "
                            "callable step -> 'record'|'warmup'|'none'")
        backends = set(backend) if isinstance(backend, (tuple, list, set,
                                                         frozenset)) \
            else {backend}
        if not backends or not backends <= set(BACKENDS):
            raise ValueError("backend must be one of %s (or a tuple of "
                             "them), not %r"
                             % (", ".join(map(repr, BACKENDS)), backend))
        backends = {b or "mlprof" for b in backends}
        if len(backends) > 1:
            backends.discard("mlprof")  # zones are always recorded
        if torch_options and "torch" not in backends:
            raise ValueError("torch_options need backend='torch'")
        if {"schedule", "on_trace_ready"} & set(torch_options or ()):
            raise ValueError("torch_options: the Profiler sets torch's "
                             "schedule and on_trace_ready (use schedule=)")
        self.output = os.fspath(output) if output is not None else None
        self.sample_interval = sample_interval
        self.stacks = stacks
        self.gpu = gpu
        self.enabled = bool(enabled)
        self.memory_cap = memory_cap
        self.schedule = schedule
        self.flush_ms = flush_ms
        if calls_options and "calls" not in backends:
            raise ValueError("calls_options need backend='calls'")
        unknown = set(calls_options or ()) - set(CALLS_OPTIONS)
        if unknown:
            raise ValueError("calls_options: unknown %s (known: %s)"
                             % (", ".join(sorted(unknown)),
                                ", ".join(CALLS_OPTIONS)))
        self.calls_options = dict(CALLS_OPTIONS, **(calls_options or {}))
        if not self.calls_options["min_duration"] >= 0:
            raise ValueError("calls_options: min_duration must be >= 0 "
                             "seconds")
        self.backends = frozenset(backends)
        # The single backend's name (backend=("calls", "torch"): "torch").
        self.backend = "torch" if "torch" in backends else min(backends)
        self.torch_options = dict(torch_options or {})
        if "torch" in backends:
            _torch_backend()  # fails here when torch is missing
        for f in lines or ():
            _code_of(f)  # a function or code object
        self._lines = list(lines or ())
        self._intercepted = []  # functions to restore at stop
        self._torch = None       # the running torch.profiler.profile
        self.joined = False      # True: the session was running already
        self.running = False
        self.path = None         # this process's profile file
        self.step_num = 0
        self._was_enabled = True

    # ---- lifecycle -------------------------------------------------------

    def start(self):
        """Starts recording (or joins the running session). Returns self."""
        if self.running:
            return self
        self.joined = not self._init_session()
        self._was_enabled = _mlprof.is_enabled()
        self.path = _mlprof.output_path()
        if self.memory is not None:
            _mlprof.memory_set(self.memory)
            if self.memory != "off" and not _mlprof.memory_active():
                warnings.warn(
                    "mlprof: memory=%r records nothing here: allocations are "
                    "captured only where libmlprof is preloaded (mlprof run, "
                    "or LD_PRELOAD)" % self.memory, stacklevel=2)
        if self.joined:
            _warn_unused_output(self.output, self.path)
        if self.output is not None and (self.output.endswith("/") or
                                        os.path.isdir(self.output)):
            _dir_outputs[os.path.realpath(self.output)] = True
        self.running = True
        self.step_num = 0
        _watch_multiprocessing()
        self._apply_enabled()
        if "torch.distributed" in sys.modules:
            from . import distributed  # records its operations from now on
            distributed.install()
        try:
            self._start_torch()
        except BaseException:
            self.stop()
            raise
        return self

    def _init_session(self):
        """Starts the library's session with this Profiler's settings;
        False when one was running already."""
        sample_ms = 0  # the library's default
        if self.sample_interval is not None:
            sample_ms = max(1, round(self.sample_interval * 1000)) \
                if self.sample_interval > 0 else -1
        stacks_hz, native = _stacks_setting(self.stacks)
        return _mlprof.init(self.output, flush_ms=self.flush_ms or 0,
                            memory_cap=self.memory_cap or 0,
                            enabled=self.enabled, sample_ms=sample_ms,
                            gpu=self.gpu is not False, stacks_hz=stacks_hz,
                            stacks_native=native)

    def _start_torch(self):
        self._start_tracers()
        if "torch" in self.backends:
            self._torch = _torch_backend()._start_torch_profiler(self)

    def _stop_torch(self):
        """Stops torch.profiler, importing the window it was recording, and
        the call and line tracers."""
        tp, self._torch = self._torch, None
        try:
            if tp is not None:
                tp.stop()
        finally:
            _mlprof.calls_stop()
            _mlprof.lines_local(False)
            _mlprof.lines_stop()
            for f in self._intercepted:
                if not any(f is c for c in _lines_chosen):
                    _restore(f)
            self._intercepted = []
            _traced.difference_update(map(id, self._lines))

    def _start_tracers(self):
        if "calls" in self.backends:
            o = self.calls_options
            _mlprof.calls_start(
                include=tuple(o["include"]), exclude=tuple(o["exclude"]),
                builtins=bool(o["builtins"]), max_depth=int(o["max_depth"]),
                min_duration_ns=int(round(o["min_duration"] * 1e9)))
        _mlprof.lines_local(True)  # chosen functions' trampolines
        for f in self._lines:
            self._reach(f)
        if _traced:
            _mlprof.lines_start()
        if self._lines or _lines_chosen:
            _keep_recording()

    def _reach(self, obj):
        fns = _reach(obj)
        if fns is None:
            _needs_trace(id(obj))
        else:
            self._intercepted += fns

    def lines(self, fn):
        """Times the lines of fn (a function or code object) from now on;
        returns fn, so it also serves as a decorator."""
        _code_of(fn)
        self._lines.append(fn)
        if self.running:
            self._reach(fn)
            _keep_recording()
        return fn

    def stop(self):
        """Stops recording. A session this Profiler started is closed (its
        file is complete); a joined session is flushed and left running.
        With backend="torch", torch.profiler's last window is imported
        first."""
        if not self.running:
            return
        try:
            self._stop_torch()
        finally:
            self.running = False
            _record_lines()
            if self.joined:
                _mlprof.set_enabled(self._was_enabled)
                _mlprof.flush()
            else:
                _mlprof.shutdown()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def _apply_enabled(self):
        on = self.enabled
        if on and self.schedule is not None:
            on = self.schedule(self.step_num) == "record"
        _mlprof.set_enabled(on)

    def set_enabled(self, on):
        """Switches recording on or off (a schedule still applies)."""
        self.enabled = bool(on)
        if self.running:
            self._apply_enabled()

    def step(self):
        """Marks the end of a step (iteration). With a schedule, the next
        step is recorded only when the schedule says 'record'; where a
        window of recorded steps ends, the step ends without a next one
        (the time until the next window is no step)."""
        if (self.running and self.schedule is not None and self.enabled
                and self.schedule(self.step_num + 1) != "record"):
            _mlprof.step_end()  # nothing while recording is off
        else:
            _mlprof.step()  # ends a recorded step, begins the next
        self.step_num += 1
        if self.running and self.schedule is not None:
            was = _mlprof.is_enabled()
            self._apply_enabled()
            if not was and _mlprof.is_enabled():
                _mlprof.step()  # the first recorded step of a window begins
        if self._torch is not None:
            self._torch.step()  # imports a window that just ended

    # ---- recording helpers (zone, gauge, units are in C)

    def function(self, fn=None, *, name=None, category=None):
        """Decorator: a zone around every call of the function, named after
        its qualified name. `@prof.function` or `@prof.function(name=...)`."""
        def wrap(f):
            z = self.zone(name or _qualname(f), category)

            @functools.wraps(f)
            def wrapper(*args, **kwargs):
                with z:
                    return f(*args, **kwargs)
            return wrapper
        return wrap(fn) if fn is not None else wrap

    def meta(self, key, value):
        """Session metadata (model, batch size, commit...)."""
        _mlprof.meta(key, value)

    def thread_name(self, name):
        """Names the calling thread in the profile."""
        _mlprof.thread_name(name)

    def track_spans(self, track, spans):
        """Records spans timed elsewhere, or that overlap without nesting
        (requests a server handles at once), on the track named `track`:
        (name, category, begin_ns, end_ns[, unit, units]) tuples,
        times from time.monotonic_ns(). Each is a call of its zone, with
        its percentiles and latency objectives. Returns how many were
        recorded."""
        return _mlprof.track_spans(track, spans)

    # ---- reading back ----------------------------------------------------

    def profile_paths(self):
        """The profile files of this process and of its descendants that
        started since this session began (forked DataLoader workers...)."""
        mine = self.path or _mlprof.output_path()
        if not mine:
            raise Error("no profile: start() the Profiler first")
        return _descendant_profiles(mine)

    def summary(self, sort="total", top=0, **filters):
        """What was recorded so far, analysed in process as `mlprof report`
        does: mlprof.report() of this process's profile and of its
        descendants' (forked DataLoader workers), that is the JSON report
        (schema mlprof.report/1, docs/json-schema.md: zones, processes,
        threads, counters, units, resources, steps, findings, leaks...) as a
        dict, plus "session": this Profiler's path, joined, running, steps
        and process (CPU time and peak memory of this process so far); with
        backend="calls", "calls" (dropped_short: calls under min_duration;
        dropped_no_memory: calls not recorded for lack of memory;
        mechanism: "eval_frame", "monitoring" or "profile", and
        fallback: why "profile" stands in for "monitoring", or None,
        docs/python.md);
        when timed lines ran, "lines" (mlprof.line_table()). filters:
        those of mlprof.report() (zone=, steps=, skip_warmup=, window=,
        rank=...)."""
        if self.running:
            _record_lines()
            _mlprof.flush()
        d = report(self.profile_paths(), sort=sort, top=top, **filters)
        if self.running:
            # This process's own profile has no closing chunk yet: it is
            # still being written, which is no cause for a warning.
            me = "process %d (" % os.getpid()
            d["warnings"] = [w for w in d["warnings"] if not (
                w.startswith(me) and "still running" in w)]
        d["session"] = {"path": self.path, "joined": self.joined,
                        "running": self.running, "steps": self.step_num,
                        "process": _mlprof.resources()}
        if "calls" in self.backends:
            d["calls"] = {"dropped_short": _mlprof.calls_dropped(),
                          "dropped_no_memory": _mlprof.calls_dropped_memory(),
                          "mechanism": _mlprof.calls_mechanism(),
                          "fallback": _mlprof.calls_fallback()}
        # As in the report of the profile (one document): the key when some
        # timed line ran, not for functions chosen that did not run here.
        rows = line_table() if self._lines or _lines_chosen else []
        if rows:
            d["lines"] = rows
        return d

    def export(self, path, formats=("json", "csv", "text", "trace"),
               sort="total", top=0):
        """Writes the report as files: path + .json / .csv / .txt /
        .trace.json (Chrome trace for Perfetto). When path is a directory
        (or ends in '/'), files go in it named summary.*. Returns
        {format: file written}. Each file appears only once complete."""
        if isinstance(formats, str):
            formats = [formats]
        for f in formats:
            if f not in EXPORT_SUFFIX:
                raise ValueError("unknown format %r: use json, csv, "
                                 "findings-csv, text or trace" % (f,))
        if self.running:
            _record_lines()
            _mlprof.flush()
        paths = self.profile_paths()
        base = os.fspath(path)
        if base.endswith("/") or os.path.isdir(base):
            os.makedirs(base, exist_ok=True)
            base = os.path.join(base, "summary")
        written = {}
        for f in formats:
            out = base + EXPORT_SUFFIX[f]
            _mlprof.export(paths, out, f, sort=sort, top=top)
            written[f] = out
        return written

    def clear(self):
        """Forgets what was recorded so far: the session starts a fresh
        profile file (same path). Only for a session this Profiler started;
        a joined session (under `mlprof run`) belongs to the run."""
        if not self.running:
            raise Error("clear(): the Profiler is not running")
        if self.joined:
            raise Error("clear(): this Profiler joined a session it did not "
                        "start (mlprof run); its profile belongs to the run")
        self._stop_torch()
        _mlprof.shutdown()
        self._init_session()
        self.path = _mlprof.output_path()
        self._apply_enabled()
        self._start_torch()


def _warn_unused_output(output, path):
    """Warns, once per output, that a Profiler joining the running session
    writes to that session's file, not to the output it was given."""
    if output is None or not path or output in _warned_outputs:
        return
    o, p = os.path.realpath(output), os.path.realpath(path)
    if o in (p, os.path.dirname(p)):
        return
    _warned_outputs.add(output)
    warnings.warn("mlprof: Profiler(output=%r) joins the session already "
                  "running in this process, which writes to %s; %r is not "
                  "written" % (output, path, output), RuntimeWarning,
                  stacklevel=3)


_warned_outputs = set()


def _torch_backend():
    """mlprof.torch, or mlprof.Error when torch cannot be imported."""
    try:
        from . import torch as mt
    except ImportError as e:
        raise Error("backend='torch' needs PyTorch, which cannot be "
                    "imported: %s" % e) from None
    return mt


def _code_of(fn):
    """The code object of a function, method or code object (a function
    whose calls are intercepted: its own code, not the trampoline's)."""
    f = getattr(fn, "__func__", fn)
    if isinstance(f, types.FunctionType) and f in _originals:
        return _originals[f]
    code = getattr(f, "__code__", fn)
    if type(code).__name__ != "code":
        raise TypeError("lines: a Python function or code object, not %s"
                        % type(fn).__name__)
    return code


# ---- line timings ---------------------------------------------------------
#
# A chosen plain function is reached through its function object: its
# __code__ becomes a trampoline with the same signature that calls the
# function's own code through _mlprof.lines_call, which switches line events
# on, on its thread, for that call only. Every reference to the function
# (taken before, `from m import f`, bound methods) goes through it, and
# assigning __code__ invalidates the call sites CPython specialised for the
# old code. The rest of the program runs untraced. What cannot be reached so
# (generator and coroutine functions, nested functions and code objects
# chosen by name or code, names not found yet) needs the trace function on
# every thread; a name is resolved when its module has been imported, or
# else at its first call, and the trace function is released once nothing
# needs it.

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CO_VARARGS, _CO_VARKEYWORDS, _CO_NESTED = 0x04, 0x08, 0x10
_CO_SUSPENDS = 0x20 | 0x80 | 0x200  # generator, coroutine, async generator
_CALL, _ORIGINAL = "\x00mlprof.lines_call", "\x00mlprof.original"

_originals = {}      # intercepted function -> its own code
_lines_chosen = []   # what @mlprof.lines chose (every Profiler times it)
_awaited = {}        # "module:qualname" -> its module's name, not imported
_traced = set()      # choices that need the trace function on every thread
LINES_RECORD_S = 1.0  # how often the line timings reach the session


def _trampoline(fn):
    """A code object with fn's signature, name, file and first line whose
    body, on that one line, is `return lines_call(ORIGINAL, <arguments>)`,
    ORIGINAL a function of fn's own code, globals and closure (its defaults
    are applied by the trampoline). It has fn's free variables, as
    assigning __code__ requires, and does not read them."""
    code = fn.__code__
    names = code.co_varnames
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    pos, kw = list(names[:npos]), list(names[npos:npos + nkw])
    rest = iter(names[npos + nkw:])
    star = next(rest) if code.co_flags & _CO_VARARGS else None
    dstar = next(rest) if code.co_flags & _CO_VARKEYWORDS else None
    params = pos[:]
    if code.co_posonlyargcount:
        params.insert(code.co_posonlyargcount, "/")
    params += ["*" + star] if star else ["*"] if kw else []
    params += kw + (["**" + dstar] if dstar else [])
    args = [repr(_ORIGINAL)] + pos + (["*" + star] if star else []) + \
        ["%s=%s" % (k, k) for k in kw] + (["**" + dstar] if dstar else [])
    free = code.co_freevars
    src = "def outer():\n"
    if free:
        src += " %s = None\n" % " = ".join(free)
    src += " def f(%s): return %r(%s)%s\n" % (
        ", ".join(params), _CALL, ", ".join(args),
        "; " + ", ".join(free) + "," if free else "")
    with warnings.catch_warnings():  # calling a str constant
        warnings.simplefilter("ignore", SyntaxWarning)
        outer = compile(src, code.co_filename, "exec").co_consts[0]
    inner = [c for c in outer.co_consts if type(c) is type(code)][0]
    original = type(fn)(code, fn.__globals__, fn.__name__, None,
                        fn.__closure__)
    consts = tuple(_mlprof.lines_call if c == _CALL else
                   original if c == _ORIGINAL else c
                   for c in inner.co_consts)
    new = {"co_consts": consts, "co_name": code.co_name,
           "co_firstlineno": code.co_firstlineno}
    if hasattr(code, "co_qualname"):
        new["co_qualname"] = code.co_qualname
    trampoline = inner.replace(**new)
    _mlprof.lines_trampoline(trampoline)
    return trampoline


def _intercept(fn):
    """Makes fn's calls time its lines (while a Profiler runs) through its
    trampoline; True when it did now, False when fn was already."""
    if fn in _originals:
        return False
    code = fn.__code__
    fn.__code__ = _trampoline(fn)
    _originals[fn] = code
    return True


def _restore(fn):
    fn.__code__ = _originals.pop(fn)


def _functions_of(code):
    """The functions whose code is `code`."""
    import gc
    return [f for f in gc.get_referrers(code)
            if type(f) is types.FunctionType and f.__code__ is code]


def _reach(obj, by_code=False):
    """Chooses obj (a function, method or code object) for line timing.
    Returns the functions this call intercepted (a plain function, or the
    functions of a code object that is neither nested nor chosen by code
    alone when by_code), or None when obj needs the trace function on every
    thread (generators, coroutines, nested code chosen by code or name)."""
    code = _code_of(obj)
    _mlprof.lines_add(code)
    f = getattr(obj, "__func__", obj)
    if code.co_flags & _CO_SUSPENDS:
        return None
    if f is code:
        if code.co_flags & _CO_NESTED:
            return None  # functions of it made later would escape
        fns = _functions_of(code)
        if not fns:
            return None
    else:
        fns = [f]
    return [f for f in fns if _intercept(f)]


def _resolve_name(name):
    """Reaches the function named "module:qualname" when its module is
    imported and it is found there; True when it is reached so."""
    mod, _, q = name.partition(":")
    obj = sys.modules.get(mod)
    if obj is None or "<locals>" in q:
        return False
    for part in q.split("."):
        obj = getattr(obj, part, None)
    f = getattr(obj, "__func__", obj)
    code = getattr(f, "__code__", None)
    if code is None or getattr(code, "co_qualname", q) != q or \
            code.co_flags & _CO_SUSPENDS or \
            code.co_filename.startswith(_PACKAGE):
        return False  # (mlprof's own __main__ runs before the program's)
    return _reach(f) is not None


def _choose_name(name):
    """Chooses "module:qualname": reached at once when its module is
    imported, when it is imported (_ImportHook), or else through the trace
    function until its first call (_found)."""
    _mlprof.lines_add_name(name)
    if _resolve_name(name):
        return
    mod = name.partition(":")[0]
    if mod not in sys.modules and "<locals>" not in name:
        _awaited[name] = mod
        if not any(isinstance(f, _ImportHook) for f in sys.meta_path):
            sys.meta_path.insert(0, _ImportHook())
        return
    _needs_trace(name)


def _needs_trace(choice):
    _traced.add(choice)
    _mlprof.lines_resolver(_found)
    if _mlprof.output_path():
        _mlprof.lines_start()


def _found(code):
    """The trace function's first sight of code chosen by name: its
    functions are reached through their trampolines from now on (not a
    nested or generator function's); the trace function is released when
    no choice needs it any more."""
    q = getattr(code, "co_qualname", code.co_name)
    names = {"%s:%s" % (f.__globals__.get("__name__"), q)
             for f in _functions_of(code)} & _traced
    if not names or _reach(code) is None:
        return
    for n in names:
        _traced.discard(n)
    if not _traced:
        _mlprof.lines_release()


class _ImportHook:
    """On sys.meta_path while chosen names' modules are not imported: runs
    _resolve_name on them once their module's code has run."""

    def find_spec(self, name, path=None, target=None):
        if name not in _awaited.values():
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is not None and not isinstance(loader, type) and \
                hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module):
                del loader.exec_module  # this loader's own again
                run(module)
                _imported(name)
            loader.exec_module = exec_module
        return spec


def _imported(mod):
    for n in [n for n, m in _awaited.items() if m == mod]:
        del _awaited[n]
        if not _resolve_name(n):
            _needs_trace(n)


def lines(fn):
    """Decorator: the lines of fn are timed while a Profiler runs (its
    summary()["lines"]). Returns fn, whose calls from then on (through any
    reference) switch line events on, on their thread, for the duration of
    the call, so the rest of the program runs untraced. Also takes a
    "module:qualname" string (the function need not exist yet). Generator
    and coroutine functions are timed through a trace function on every
    thread."""
    if isinstance(fn, str):
        _choose_name(fn)
    elif _reach(fn) is None:
        _needs_trace(fn)
    _lines_chosen.append(fn)
    if _mlprof.output_path():
        _keep_recording()
    return fn


def line_table():
    """The line timings so far: one row per line that ran, of every timed
    function, in source order: function, file, line, hits, total_ns,
    exclusive_ns (less the calls made from the line), share (% of the
    function's time) and source."""
    rows = []
    for code, stats in _mlprof.lines_stats():
        total = sum(s[2] for s in stats) or 1
        fn = getattr(code, "co_qualname", code.co_name)
        for line, hits, tot, excl in stats:
            rows.append({"function": fn, "file": code.co_filename,
                         "line": line, "hits": hits, "total_ns": tot,
                         "exclusive_ns": excl,
                         "share": round(100.0 * tot / total, 2),
                         "source": linecache.getline(code.co_filename,
                                                     line).rstrip()})
    return rows


_recorded = {}  # code -> its line timings as last handed to the session


def _record_lines(changed_only=False):
    """Hands the line timings (changed_only: those that changed since they
    were last handed over) to the session, which writes them into the
    profile (a LINES chunk per function, docs/format.md) at its next flush;
    `mlprof report` shows them."""
    if not (_mlprof.output_path() or _mlprof.is_enabled()):
        return  # no session (a forked child's starts with these timings)
    for code, stats in _mlprof.lines_stats():
        if not stats or changed_only and _recorded.get(code) == stats:
            continue  # none of its lines ran (since)
        _recorded[code] = stats
        _mlprof.lines_record(
            getattr(code, "co_qualname", code.co_name), code.co_filename,
            code.co_firstlineno,
            [(line, hits, tot, excl,
              linecache.getline(code.co_filename, line).rstrip())
             for line, hits, tot, excl in stats])


_recorder_pid = None


def _keep_recording():
    """Starts, once per process, a daemon thread that hands the line
    timings to the session every LINES_RECORD_S seconds, so a job that
    is killed keeps them up to the last second."""
    global _recorder_pid
    if _recorder_pid == os.getpid():
        return
    _recorder_pid = os.getpid()
    import threading
    import time

    def run():
        sys.settrace(None)  # not traced itself
        while True:
            time.sleep(LINES_RECORD_S)
            try:
                _record_lines(changed_only=True)
            except Error:
                pass  # the session is closing
    threading.Thread(target=run, name="mlprof-lines", daemon=True).start()


def _lines_after_fork():
    """A forked child (a DataLoader worker) times its lines from zero into
    its own profile, handed over every second as its parent's are: the
    parent's timings stay the parent's, and a killed worker keeps its own."""
    if _recorder_pid is None:
        return
    _mlprof.lines_clear()
    _recorded.clear()
    _keep_recording()


os.register_at_fork(after_in_child=_lines_after_fork)
# A forked child (a DataLoader or multiprocessing worker) of a process that
# samples stacks starts its own profile now, not on its first zone.
os.register_at_fork(after_in_child=_mlprof._after_fork_child)
# Registered first, so it runs last of the package's exit hooks: the
# interpreter frees its thread states after it.
atexit.register(_mlprof._stacks_finalizing)


def _start_from_env():
    """Starts the tracers that MLPROF_CALLS=1 and MLPROF_LINES=
    "module:function,..." ask for (the hook of `python -m mlprof run
    --calls/--lines`). Returns the started Profiler, or None."""
    return _start_tracers(
        os.environ.get("MLPROF_CALLS", "") not in ("", "0"),
        [n for n in os.environ.get("MLPROF_LINES", "").split(",") if n])


def _main_names(names, main):
    """names ("module:function") with the module `main`, the program run as
    __main__, written as __main__ (None: none is)."""
    out = []
    for n in names:
        mod, _, fn = n.partition(":")
        out.append("__main__:" + fn if main and mod == main else n)
    return out


def _start_tracers(calls, names):
    """Starts call tracing (calls true) and the line timings of the
    functions named "module:function" in the session that runs (also the
    start-up module's, for `mlprof run --calls/--lines`), until exit.
    Returns the started Profiler, or None when neither is asked for."""
    if not calls and not names:
        return None
    for n in names:
        lines(n)
    prof = Profiler(backend="calls" if calls else None).start()
    import atexit
    atexit.register(prof.stop)
    return prof


def _qualname(f):
    mod = getattr(f, "__module__", None)
    q = getattr(f, "__qualname__", None) or getattr(f, "__name__", repr(f))
    return q if not mod or mod == "__main__" else "%s.%s" % (mod, q)


def _descendant_profiles(mine):
    """mine plus the profiles, next to it, of processes descended from it
    that started after it (pids are checked through the profile headers)."""
    mine = os.path.abspath(mine)
    d = os.path.dirname(mine)
    base = os.path.basename(mine)
    stem = base[:-7] if base.endswith(".mlprof") else base
    try:
        names = os.listdir(d)
    except OSError:
        names = []
    # A directory output holds PROGRAM-PID.mlprof per process; a file output
    # gets STEM-PID.mlprof for each child.
    cands = [os.path.join(d, n) for n in names
             if n.endswith(".mlprof") and n != base]
    if not _is_dir_output(mine):
        cands = [c for c in cands
                 if os.path.basename(c).startswith(stem + "-")]
    if not cands:
        return [mine]
    try:
        profs = _mlprof.profiles([mine] + cands)
    except Error:
        good = [mine]
        for c in cands:
            try:
                _mlprof.profiles([c])
                good.append(c)
            except Error:
                pass  # being created, or not a profile
        profs = _mlprof.profiles(good)
    idx = next((i for i, p in enumerate(profs)
                if os.path.abspath(p["path"]) == mine), None)
    if idx is None:
        return [mine]
    keep = []
    for i, p in enumerate(profs):
        j, seen = i, 0
        while j >= 0 and j != idx and seen <= len(profs):
            j = profs[j]["parent"]
            seen += 1
        if j == idx and p["offset_ns"] >= profs[idx]["offset_ns"]:
            keep.append(p["path"])
    return keep


def _is_dir_output(path):
    out = os.environ.get("MLPROF_OUTPUT", "")
    d = os.path.dirname(path)
    # Written as PROGRAM-PID.mlprof inside a directory output: every file in
    # the directory is a process of the run.
    return (out and os.path.isdir(out) and
            os.path.realpath(out) == os.path.realpath(d)) or \
        _dir_outputs.get(os.path.realpath(d), False)


_dir_outputs = {}
_default = _mlprof.ProfilerBase()


def zone(name, category=None, **metadata):
    """A zone in whatever session runs (no Profiler object needed)."""
    return _default.zone(name, category, **metadata)


# gauge(name, value) and units(name, n) in whatever session runs, as
# Profiler.gauge and Profiler.units; zone_meta(key, value): key=value on the
# innermost open zone of the thread (mlprof_zone_meta).
gauge = _mlprof.gauge
units = _mlprof.units
zone_meta = _mlprof.zone_meta


def profile(fn=None, *, name=None, category=None):
    """Decorator: a zone around every call, in whatever session runs.
    `@mlprof.profile` or `@mlprof.profile(name="load", category="data")`."""
    def wrap(f):
        z = _default.zone(name or _qualname(f), category)

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            with z:
                return f(*args, **kwargs)
        return wrapper
    return wrap(fn) if fn is not None else wrap


def report(paths, sort="total", top=0, *, zone=None, exclude=None,
           category=None, process=None, thread=None, track=None, rank=None,
           steps=None, skip_warmup=None, window=None):
    """The report of profile files or run directories, as `mlprof report
    -f json` writes it (schema mlprof.report/1, docs/json-schema.md), as a
    dict: statistics, resources, steps, findings and leaks. Profiler.summary
    is this for its own session, plus "session".

    The filters are mlprof report's options of the same names, with the
    same specs (docs/guide.md, "Filters"): zone="fwd*", exclude=...,
    category="data", process=..., thread=..., track="PROC/THREAD", rank=0,
    steps="10:20", skip_warmup=5, window="10s:20s"; a list gives
    alternatives, as a repeated option does. A bad spec raises ValueError."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    filters = {"zone": zone, "exclude": exclude, "category": category,
               "process": process, "thread": thread, "track": track,
               "rank": rank, "steps": steps, "skip_warmup": skip_warmup,
               "window": window}
    return json.loads(_mlprof.report_json(list(paths), sort=sort, top=top,
                                          filters=filters))


def read_events(path):
    """Every record of one profile file: spans (with metadata and units),
    counters, units, steps, threads; allocations ("allocs": (tid, t,
    address, size, weight, zone, stack), size 0 for a free) and the stack
    tables they name ("stack_funcs", "stack_frames", "stack_nodes")."""
    return _mlprof.read_events(path)


def _close_at_exit():
    """Closes this process's profile from a multiprocessing finalizer: the
    children of multiprocessing (DataLoader workers) leave through
    os._exit(), which skips the C library's atexit flush, but they run their
    finalizers first."""
    import multiprocessing.util as util
    util.Finalize(None, _mlprof.shutdown, exitpriority=-100)


class _ForkHook:
    pass


_fork_hook = _ForkHook()


def _watch_multiprocessing():
    """Makes every multiprocessing child (forked after this) close its
    profile at exit. The registry of after-fork callbacks is inherited, and
    runs in the child once multiprocessing has reset its finalizers."""
    import multiprocessing.util as util
    util.register_after_fork(_fork_hook, lambda _: _close_at_exit())
