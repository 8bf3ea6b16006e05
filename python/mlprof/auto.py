"""What `mlprof run` loads into every Python process, through its start-up
module (mlprof/_startup/sitecustomize.py): PyTorch training recorded with no
code change, once the program imports torch (docs/python.md, "Python under
mlprof run").

When the program imports torch, these become zones of its profile:

    data_wait      the main process's wait for each DataLoader batch (data)
    data_fetch     a batch made from the dataset, in the DataLoader worker
                   processes' own profiles (data)
    data_collate   collating it, inside data_fetch (data)
    CLASS          each root module call: a module called while no other
                   module runs (the model, the loss), named by its class
                   (forward)
    backward       torch.autograd.backward and Tensor.backward (backward)
    optimizer_step, zero_grad   each optimizer's step and zero_grad
                   (optimizer)

and a step mark follows each step of the first optimizer that steps, so the
report's step breakdown and findings work on an unmodified script. torch is
never imported here: it is patched right after the program imports it.

torch.compile: a compiled module's call is one zone at its boundary, named
by the original module's class; nothing of mlprof runs inside compiled code.
Each compilation is a zone, torch.compile, inside the call that made it.
Each wrapper steps aside while torch.compile traces it (no graph break, no
guard, no recompilation), and what was traced, so not recorded, is session
metadata ("mlprof.torch.compile"), as are the compiled modules.
"""
import functools
import importlib.util
import os
import sys
import threading
import weakref

from . import _mlprof

# The options `mlprof run` passes on from its Python flags (MLPROF_PY_OPTIONS:
# "no-torch,layers,calls,lines=train:step"): one word each, "word=value" for
# a flag with a value; a flag given several times keeps each value, in a
# list.
OPTIONS = ("no-torch", "layers", "calls", "lines")


def parse_options(text):
    """{option: value} of MLPROF_PY_OPTIONS (value None for a flag without
    one, a list of the values for "lines"); unknown words are left out with
    a line on stderr."""
    opts = {}
    for word in filter(None, text.split(",")):
        name, eq, value = word.partition("=")
        if name == "lines":
            opts.setdefault(name, []).append(value)
        elif name in OPTIONS:
            opts[name] = value if eq else None
        else:
            sys.stderr.write("mlprof: this mlprof package does not know the "
                             "option %r of mlprof run; ignored\n" % name)
    return opts


def install(options=""):
    """Loads the instrumentation that the options ask for into this
    process's session (the preloaded library's, under `mlprof run`)."""
    opts = parse_options(options)
    _mlprof.meta("mlprof.python", "loaded")
    _name_threads()
    if "calls" in opts or "lines" in opts:
        from . import _start_tracers, _main_names
        _start_tracers("calls" in opts,
                       _main_names(opts.get("lines", ()), _program_module()))
    if "no-torch" in opts:
        _mlprof.meta("mlprof.torch", "off (--no-torch)")
    else:
        after_import("torch", functools.partial(
            _instrument_torch, layers="layers" in opts))


def _name_threads():
    """Names each threading.Thread in the profile (not in the system: its
    OS name is left alone) as it starts: wraps Thread._set_native_id, which
    each thread calls once as it starts (CPython 3.8+), so that no frame of
    mlprof's stays on the thread's stack. A Python without it: no names."""
    set_native_id = getattr(threading.Thread, "_set_native_id", None)
    if set_native_id is None:
        return

    def _set_native_id(self):
        set_native_id(self)
        try:
            _mlprof.thread_name(str(self.name))
        except Exception:
            pass
    threading.Thread._set_native_id = _set_native_id


def _program_module():
    """The module name the program run as __main__ goes by: the script's
    file name without .py, the module of `python -m MODULE`; None for
    `python -c` and an interactive Python."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":
        orig = getattr(sys, "orig_argv", [])
        if "-m" in orig[:-1]:
            return orig[orig.index("-m") + 1].rpartition(".")[2]
        return None
    if argv0.endswith(".py"):
        return os.path.basename(argv0)[:-3]
    return None


def after_import(name, callback):
    """Calls callback(module) once top-level module `name` is imported: now
    when it is, else right after the program imports it (a meta-path finder
    that wraps the loader's exec_module). Never imports it."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport:
    def __init__(self, name, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run, callback = loader.exec_module, self.callback

        def exec_module(module):
            del loader.exec_module  # back to the loader's own
            try:
                run(module)
            except BaseException as e:
                _hide(e)
                raise
            callback(module)
        loader.exec_module = exec_module
        return spec


def _instrument_torch(torch, layers):
    """Patches torch (see the module's doc); a failure is recorded in the
    session metadata ("mlprof.torch"), never raised into the program."""
    try:
        _patch_torch(torch, layers)
    except Exception as e:
        _mlprof.meta("mlprof.torch", "not instrumented: %s: %s"
                     % (type(e).__name__, e))
        return
    _mlprof.meta("mlprof.torch", "instrumented (torch %s%s)"
                 % (torch.__version__, ", --layers" if layers else ""))
    _cuda_history(torch)
    # torch.distributed's collectives, by mlprof.distributed (when this
    # package has it): install() patches them once a process group exists.
    try:
        from . import distributed
    except ImportError:
        return
    try:
        distributed.install()
    except Exception as e:
        _mlprof.meta("mlprof.distributed", "not instrumented: %s: %s"
                     % (type(e).__name__, e))


def _saved_bytes():
    """Whether --layers counts the bytes each layer saves for backward:
    with mlprof run --memory=all (or all,python)."""
    return os.environ.get("MLPROF_MEMORY", "") == "all" and \
        _mlprof.memory_active()


def _cuda_history(torch):
    """MLPROF_CUDA_MEMORY_HISTORY=1: torch's CUDA memory history, dumped
    beside the profile at exit (mlprof.cuda_memory.history_start); what
    happened is session metadata "mlprof.cuda_memory" when it was asked."""
    from . import cuda_memory
    path, why = cuda_memory.history_start(torch, _mlprof.output_path())
    if why != "off":
        _mlprof.meta("mlprof.cuda_memory", "snapshot at exit: %s" % path
                     if path else "not recorded: %s" % why)


def _never():
    return False


# torch.compiler.is_compiling once torch.compile's dynamo is imported (no
# tracing before; until then, a cheaper function): True while dynamo traces
# the code that calls it, which it folds into a constant, so a wrapper that
# tests it first is traced as the bare function it wraps.
_compiling = _never

# What the session metadata "mlprof.torch.compile" says so far: the compiled
# root modules seen, the functions given to torch.compile, and the wrappers
# traced into compiled code.
_compiled = {"modules": [], "functions": [], "traced": []}
_compiled_lock = threading.Lock()
COMPILE_META = "mlprof.torch.compile"


def _compile_meta():
    parts = []
    if _compiled["modules"]:
        parts.append("compiled modules: %s (one zone per call at their "
                     "boundary, their first calls include compilation; no "
                     "per-layer zones inside compiled code)"
                     % ", ".join(_compiled["modules"]))
    if _compiled["functions"]:
        parts.append("compiled functions: %s (no zone inside them: what "
                     "they run is compiled code, their modules' forward "
                     "included)" % ", ".join(_compiled["functions"]))
    if _compiled["traced"]:
        parts.append("traced by torch.compile, so not recorded where it "
                     "runs compiled: %s"
                     % ", ".join(_compiled["traced"]))
    _mlprof.meta(COMPILE_META, "; ".join(parts))


def _note(kind, name):
    """Adds name to _compiled[kind] and the metadata, once."""
    with _compiled_lock:
        if name in _compiled[kind]:
            return
        _compiled[kind].append(name)
        _compile_meta()


def _traced(name):
    """Run by torch.compile while it traces a wrapper of ours (a function
    marked as a constant is called at trace time, not put in the graph):
    says in the metadata that `name` is not recorded inside compiled
    code. Returns True."""
    try:
        _note("traced", name)
    except Exception:
        pass
    return True


# What torch.compiler.assume_constant_result(_traced) does, without importing
# torch._dynamo (torch.compile imports it when first used).
_traced._dynamo_marked_constant = True


def compiled_class(module):
    """The class of the module that `module` compiles: that of _orig_mod for
    torch.compile(module) (an OptimizedModule), its own for a module
    compiled in place (module.compile()); None when it is not compiled."""
    if getattr(module, "_compiled_call_impl", None) is not None:
        return type(module)
    if type(module).__name__ == "OptimizedModule":
        inner = module._modules.get("_orig_mod")
        if inner is not None:
            return type(inner)
    return None


def _with_dynamo(torch, dynamo):
    """Once torch._dynamo is imported: _compiling, and a zone COMPILE_ZONE
    around each compilation of torch.compile, by its callbacks where torch
    has them (2.6 and later)."""
    global _compiling
    try:
        compiler = getattr(torch, "compiler", None)  # torch 2.1 and later
        _compiling = getattr(compiler, "is_compiling", None) or getattr(
            dynamo, "is_compiling", _never)
        handler = getattr(dynamo, "callback_handler", None)
        if handler is not None:
            _zone_compilations(handler)
    except Exception as e:  # never raised into the program's import
        _mlprof.meta(COMPILE_META + ".error", "%s: %s"
                     % (type(e).__name__, e))


def _zone_compilations(handler):
    """COMPILE_ZONE from the start callback of dynamo's callback handler to
    its end callback (run once around nested compilations), on the thread
    that began it."""
    zone, on = _mlprof.Zone(COMPILE_ZONE), threading.local()

    def start(args):
        if not getattr(on, "zone", False):
            on.zone = True
            zone.__enter__()

    def end(args):
        if getattr(on, "zone", False):  # begun on this thread
            on.zone = False
            zone.__exit__(None, None, None)
    handler.register_start_callback(start)
    handler.register_end_callback(end)


COMPILE_ZONE = "torch.compile"


class _State(threading.local):
    in_module = False    # a module call runs on this thread
    in_step = False      # an optimizer step runs on this thread


def _hide(e):
    """Takes the calling wrapper's own frame off e's traceback, as pytest
    hides its own: the program's error reads as if mlprof were not there.
    The wrapper then re-raises with a bare `raise`, which adds no frame
    (Python 3.11 and later; before, the frame stays). Outside the paths
    torch.compile traces, so that it never sees the try."""
    tb = e.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        e.__traceback__ = tb.tb_next


def _zoned(fn, zone):
    """fn with a zone around each call (fn alone inside compiled code)."""
    name = zone.name

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _compiling():
            _traced(name)
            return fn(*args, **kwargs)
        try:
            with zone:
                return fn(*args, **kwargs)
        except BaseException as e:
            _hide(e)
            raise
    wrapper._mlprof = True
    return wrapper


_clip_zones = {}


def _zone_of(Zone, name):
    """One optimizer zone per clipping function's name, shared by the
    names torch gives it (torch.nn.utils and torch.nn.utils.clip_grad)."""
    if name not in _clip_zones:
        _clip_zones[name] = Zone(name, "optimizer")
    return _clip_zones[name]


def _batch_size(batch, tensor):
    """The first dimension of the first tensor of a batch (a tensor, or
    lists, tuples and dicts of them), or 0."""
    for _ in range(8):  # nesting depth looked into
        if isinstance(batch, tensor):
            return int(batch.shape[0]) if batch.dim() else 0
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        else:
            return 0
    return 0


def _patch_torch(torch, layers):
    Zone = _mlprof.Zone
    st = _State()
    nn, data = torch.nn, torch.utils.data

    # Data: the main process's wait for a batch; in whichever process makes
    # batches (the workers), the fetch and the collate inside it.
    # Each batch the main process gets counts its samples as units
    # ("samples", the first tensor's first dimension), so that runs of
    # different batch sizes compare by throughput (mlprof compare).
    base_iter = data.dataloader._BaseDataLoaderIter
    next_batch, z_wait = base_iter.__next__, Zone("data_wait", "data")

    @functools.wraps(next_batch)
    def data_wait(self):
        if _compiling():
            return next_batch(self)
        try:
            with z_wait:
                batch = next_batch(self)
                n = _batch_size(batch, torch.Tensor)
                if n:
                    _mlprof.units("samples", n)
        except BaseException as e:  # StopIteration included
            _hide(e)
            raise
        return batch
    data_wait._mlprof = True
    base_iter.__next__ = data_wait
    fetch = data._utils.fetch
    z_fetch = Zone("data_fetch", "data")
    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        cls.fetch = _zoned(cls.fetch, z_fetch)
    z_collate = Zone("data_collate", "data")
    fetcher_init = fetch._BaseDatasetFetcher.__init__

    @functools.wraps(fetcher_init)
    def init_fetcher(self, *args, **kwargs):
        try:
            fetcher_init(self, *args, **kwargs)
        except BaseException as e:
            _hide(e)
            raise
        self.collate_fn = _zoned(self.collate_fn, z_collate)
    fetch._BaseDatasetFetcher.__init__ = init_fetcher

    # Forward: one zone per root module call, named by the module's class.
    call = nn.Module.__call__
    zones = {}
    with_layers = weakref.WeakSet()
    prof = None
    if layers:
        from . import Profiler
        from .torch import BACKWARD_EVERY, ModelProfile
        prof = Profiler().start()  # joins the session of the run

        def profile_model(module, prof):
            # A compiled module's layers: said in the metadata, not warned.
            # Activation memory per layer too, with every allocation
            # recorded (--memory=all: it costs a few µs per module and
            # step, docs/memory.md).
            return ModelProfile(module, prof, None, True, True,
                                BACKWARD_EVERY, warn_compiled=False,
                                memory=_saved_bytes())

    def root_zone(self):
        """The zone of a root module: by its class; a compiled module's by
        the class it compiles (recorded in the metadata)."""
        cls = type(self)
        inner = compiled_class(self)
        if inner is None:
            zone = zones[cls] = Zone(cls.__name__, "forward")
            return zone
        _note("modules", inner.__name__)
        zone = zones.get(inner)  # not cached by class: OptimizedModule
        if zone is None:
            zone = zones[inner] = Zone(inner.__name__, "forward")
        return zone

    @functools.wraps(call)
    def module_call(self, *args, **kwargs):
        if _compiling():
            if not st.in_module:
                _traced("root module calls")
            return call(self, *args, **kwargs)
        try:
            if st.in_module:
                return call(self, *args, **kwargs)
            zone = zones.get(type(self))
            if zone is None:
                zone = root_zone(self)
            if prof is not None and self not in with_layers:
                with_layers.add(self)
                profile_model(self, prof)
            st.in_module = True
            try:
                with zone:
                    return call(self, *args, **kwargs)
            finally:
                st.in_module = False
        except BaseException as e:
            _hide(e)
            raise
    nn.Module.__call__ = module_call

    # torch.compile(fn) of a function (not a module): noted, since nothing
    # inside compiled code is recorded (a module's forward there included).
    compile_ = getattr(torch, "compile", None)
    if compile_ is not None:
        @functools.wraps(compile_)
        def compile_noted(model=None, *args, **kwargs):
            # Module.compile() compiles its module's _call_impl: noted as a
            # compiled module at its first call instead.
            owner = getattr(model, "__self__", None)
            if model is not None and not isinstance(model, nn.Module) and \
                    not isinstance(owner, nn.Module):
                _note("functions", getattr(model, "__qualname__", None)
                      or type(model).__name__)
            try:
                return compile_(model, *args, **kwargs)
            except BaseException as e:
                _hide(e)
                raise
        torch.compile = compile_noted

    # Once torch.compile imports dynamo: the wrappers step aside while it
    # traces them, and the compilations themselves (dynamo's, and AOT
    # autograd's lazy one of the backward) are a zone.
    after_import("torch._dynamo", functools.partial(_with_dynamo, torch))

    # Backward: Tensor.backward calls torch.autograd.backward.
    torch.autograd.backward = _zoned(torch.autograd.backward,
                                     Zone("backward", "backward"))

    # Optimizer: zero_grad on the base classes; step on each subclass (they
    # define their own), those defined later as they are first instantiated,
    # with a step mark after each step of the first optimizer that steps.
    z_zero = Zone("zero_grad", "optimizer")
    for cls in (torch.optim.Optimizer, nn.Module):
        cls.zero_grad = _zoned(cls.zero_grad, z_zero)
    z_step = Zone("optimizer_step", "optimizer")
    marker = [lambda: None]  # weak reference to the optimizer that marks

    def wrap_step(cls):
        step = cls.step
        if getattr(step, "_mlprof", False):
            return

        @functools.wraps(step)  # keeps torch's own "hooked" flag too
        def optimizer_step(self, *args, **kwargs):
            if _compiling():
                if not st.in_step:
                    _traced("optimizer_step (and its step mark)")
                return step(self, *args, **kwargs)
            try:
                if st.in_step:  # a subclass's step calling its base's
                    return step(self, *args, **kwargs)
                st.in_step = True
                try:
                    with z_step:
                        out = step(self, *args, **kwargs)
                finally:
                    st.in_step = False
            except BaseException as e:
                _hide(e)
                raise
            first = marker[0]()
            if first is None:
                marker[0] = weakref.ref(self)
                first = self
            if first is self:
                _mlprof.step()
            return out
        optimizer_step._mlprof = True
        cls.step = optimizer_step

    # Parts of the optimizer's work outside its step: gradient clipping
    # and the learning-rate schedule.
    utils = nn.utils
    for mod in (utils, getattr(utils, "clip_grad", None)):
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            fn = getattr(mod, name, None)
            if fn is not None and not getattr(fn, "_mlprof", False):
                setattr(mod, name, _zoned(fn, _zone_of(Zone, name)))
    sched = torch.optim.lr_scheduler
    base = getattr(sched, "LRScheduler", None) or sched._LRScheduler
    z_sched = Zone("lr_scheduler_step", "optimizer")
    for cls in {base, sched.ReduceLROnPlateau}:
        if not getattr(cls.step, "_mlprof", False):
            cls.step = _zoned(cls.step, z_sched)

    classes = torch.optim.Optimizer.__subclasses__()
    while classes:
        cls = classes.pop()
        classes += cls.__subclasses__()
        wrap_step(cls)
    opt_init = torch.optim.Optimizer.__init__

    @functools.wraps(opt_init)
    def init_optimizer(self, *args, **kwargs):
        try:
            opt_init(self, *args, **kwargs)
        except BaseException as e:
            _hide(e)
            raise
        wrap_step(type(self))
    torch.optim.Optimizer.__init__ = init_optimizer
