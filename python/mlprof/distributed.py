"""torch.distributed capture: every collective and point-to-point operation
recorded as a zone of category communication (docs/distributed.md).

    import mlprof.distributed
    mlprof.distributed.install()   # what Profiler.start and `mlprof run` do

install() wraps the operations of torch.distributed (and of its
distributed_c10d module, where torch's own helpers find them), so a call
made anywhere is recorded once: a zone named after the operation
("all_reduce"), with units "bytes" (this rank's payload), "elements" and,
for a collective, "seq" (its number on its process group, the same on every
rank), and metadata "group" ("world" or "ranks 0,2"), "dtype", "op" (the
reduction) and "peer" or "root" (global ranks). An asynchronous operation
(async_op=True, isend, irecv, batch_isend_irecv) also gets a span
"all_reduce done" from its call to its completion on the track
"torch.distributed" (see _done). DistributedDataParallel's gradient
all-reduces go through the default communication hook, registered at the
first forward unless the user registered a hook of their own. An operation
torch calls from inside another (torch 2's all_gather_into_tensor calls
all_gather_single, FSDP2's) is part of it, recorded once.

torch 2's functional collectives (torch.distributed._functional_collectives:
DTensor, tensor parallelism) never call those functions: theirs are wrapped
once the program imports that module, each a zone "funcol.all_reduce" (and
so on) recording the same, its completion a span "funcol.all_reduce done"
ending when wait_tensor has waited for its outputs (see _wrap_functional).
Under torch.compile's tracing every wrapper calls straight through.

Host syncs: a tensor's .item(), .tolist() and .cpu() on a device (any
device but the CPU), and torch.cuda.synchronize(), stall the host until the
device catches up; each such call is a zone "host sync .item()" (and so on)
that the distributed analysis counts a step. On a CPU tensor the call is no
sync and goes straight to torch's (see _hook_host_syncs).

init_process_group and destroy_process_group record the rank, world size
and backend, and this rank's clock offset to rank 0, measured by round
trips through the group's store. Nothing here imports torch: install()
does nothing until the program has imported torch.distributed.
"""
import datetime
import functools
import sys
import threading

from . import _mlprof

__all__ = ["install"]

TRACK = "torch.distributed"
DDP_TRACK = "DDP"
CLOCK_ROUNDS = 16
CLOCK_TIMEOUT = datetime.timedelta(seconds=10)

_lock = threading.Lock()
_installed = False
_inside = threading.local()  # an operation of ours is running on this thread
_groups = {}  # process group (None: the world) -> its name in the profile
_seq = {}     # process group -> collectives so far
_syncs = [0]  # clock exchanges so far (each gets keys of its own)


def _tensor_list(ts):
    return [t for t in (ts or ()) if t is not None]


# name: (the argument holding the payload, or a function of the bound
# arguments giving a list of tensors; the argument naming the peer or root
# and which it is; collective)
def _p2p(arg):
    return lambda a: [op.tensor for op in a[arg]]


_OPS = {
    "all_reduce": ("tensor", None, True),
    "broadcast": ("tensor", ("src", "root"), True),
    "reduce": ("tensor", ("dst", "root"), True),
    "all_gather": ("tensor", None, True),
    "_all_gather_base": ("input_tensor", None, True),
    "all_gather_single": ("input_tensor", None, True),
    "all_gather_into_tensor": ("input_tensor", None, True),
    "gather": ("tensor", ("dst", "root"), True),
    "scatter": ("tensor", ("src", "root"), True),
    "reduce_scatter": (lambda a: _tensor_list(a["input_list"]), None, True),
    "_reduce_scatter_base": ("input", None, True),
    "reduce_scatter_single": ("input", None, True),
    "reduce_scatter_tensor": ("input", None, True),
    "all_to_all": (lambda a: _tensor_list(a["input_tensor_list"]), None,
                   True),
    "all_to_all_single": ("input", None, True),
    "barrier": (None, None, True),
    "monitored_barrier": (None, None, True),
    "send": ("tensor", ("dst", "peer"), False),
    "recv": ("tensor", ("src", "peer"), False),
    "isend": ("tensor", ("dst", "peer"), False),
    "irecv": ("tensor", ("src", "peer"), False),
    "batch_isend_irecv": (_p2p("p2p_op_list"), None, False),
}
_ASYNC = {"isend", "irecv", "batch_isend_irecv"}


def _group_name(c10d, group):
    name = _groups.get(group)
    if name is None:
        if group is None or group is c10d.GroupMember.WORLD:
            name = "world"
        else:
            ranks = c10d.get_process_group_ranks(group)
            name = "ranks " + ",".join(map(str, ranks))
        _groups[group] = name
    return name


def _reduce_op(c10d, op):
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        if op == getattr(c10d.ReduceOp, name, None):
            return name.lower()
    return "other"


def _next_seq(c10d, group):
    """The number of this collective on group (None: the world)."""
    key = group if group is not None else c10d.GroupMember.WORLD
    with _lock:
        _seq[key] = seq = _seq.get(key, 0) + 1
    return seq


def _describe(c10d, name, spec, bound):
    """Records what the operation moves into the zone that is open."""
    payload, peer, collective = spec
    if payload is None:
        tensors = []
    elif callable(payload):
        tensors = payload(bound)
    else:
        tensors = [bound[payload]]
    group = bound.get("group")
    if name == "batch_isend_irecv" and bound["p2p_op_list"]:
        group = bound["p2p_op_list"][0].group
    elements = sum(t.numel() for t in tensors)
    _mlprof.units("bytes", sum(t.numel() * t.element_size() for t in tensors))
    _mlprof.units("elements", elements)
    gname = _group_name(c10d, group)
    if collective:
        _mlprof.units("seq", _next_seq(c10d, group))
    _mlprof.zone_meta("group", gname)
    if tensors:
        _mlprof.zone_meta("dtype", str(tensors[0].dtype).replace("torch.", ""))
    if "op" in bound:
        _mlprof.zone_meta("op", _reduce_op(c10d, bound["op"]))
    if peer is not None and bound.get(peer[0]) is None and \
            bound.get("group_" + peer[0]) is not None:
        # torch 2's group_src / group_dst: a rank in the group
        bound[peer[0]] = c10d.get_global_rank(
            c10d.GroupMember.WORLD if group is None else group,
            bound["group_" + peer[0]])
    if peer is not None and bound.get(peer[0]) is not None:
        _mlprof.zone_meta(peer[1], str(bound[peer[0]]))
    elif name == "batch_isend_irecv":
        peers = sorted({op.peer for op in bound["p2p_op_list"]})
        _mlprof.zone_meta("peer", ",".join(map(str, peers)))


def _record_span(track, name, begin_ns):
    """A communication span from begin_ns to now on track."""
    try:
        _mlprof.track_spans(track, [(name, "communication", begin_ns,
                                     _mlprof.monotonic_ns())])
    except Exception:
        pass


# Works without a future (gloo's point-to-point operations): completed, as
# far as anyone can see, when the program's wait() on them returns (a second
# waiter would steal gloo's completion from the program). id(work) ->
# [name, begin_ns, works of the call not yet waited for, the works].
_unwaited = {}
MAX_UNWAITED = 4096  # Works never waited for are forgotten past this


def _wait_hook(work_type):
    wait = work_type.wait

    @functools.wraps(wait)
    def timed_wait(self, *args, **kwargs):
        result = wait(self, *args, **kwargs)
        if _unwaited:
            with _lock:
                entry = _unwaited.pop(id(self), None)
                if entry is not None:
                    entry[2] -= 1
            if entry is not None and entry[2] == 0:
                _record_span(TRACK, entry[0] + " done", entry[1])
        return result

    work_type.wait = timed_wait


def _done(name, begin_ns, works):
    """Records the span from begin_ns to the completion of works: when
    their futures complete, or, for Works without one, when the program's
    wait() has returned on each."""
    import torch
    try:
        futs = [w.get_future() for w in works]
    except RuntimeError:
        with _lock:
            if len(_unwaited) + len(works) <= MAX_UNWAITED:
                entry = [name, begin_ns, len(works), works]
                for w in works:
                    _unwaited[id(w)] = entry
        return
    fut = futs[0] if len(futs) == 1 else torch.futures.collect_all(futs)
    fut.then(lambda _fut: _record_span(TRACK, name + " done", begin_ns))


def _wrap(c10d, name, fn, spec):
    import inspect
    params = inspect.signature(fn).parameters
    names = list(params)
    defaults = {k: p.default for k, p in params.items()
                if p.default is not inspect.Parameter.empty}
    zone = _mlprof.Zone(name, "communication")
    group_at = names.index("group") if "group" in names else len(names)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if getattr(_inside, "on", False):
            return fn(*args, **kwargs)  # torch's own nested call
        _inside.on = True
        try:
            if not _mlprof.is_enabled():
                # Collectives are numbered while recording is off too, so
                # that ranks switching it at different times still agree.
                if spec[2]:
                    group = kwargs.get("group", args[group_at]
                                       if group_at < len(args) else None)
                    _next_seq(c10d, group)
                return fn(*args, **kwargs)
            begin_ns = _mlprof.monotonic_ns()
            with zone:
                result = fn(*args, **kwargs)
                try:
                    bound = dict(defaults)
                    bound.update(zip(names, args))
                    bound.update(kwargs)
                    if name in ("recv", "irecv") and bound.get("src") is None \
                            and isinstance(result, int):
                        bound["src"] = result  # who sent it
                    _describe(c10d, name, spec, bound)
                    if result is not None and (name in _ASYNC or
                                               bound.get("async_op")):
                        works = result if isinstance(result, list) else [result]
                        _done(name, begin_ns, works)
                except Exception:
                    pass  # recording must never break the program's call
            return result
        finally:
            _inside.on = False

    wrapper._mlprof_wrapped = fn
    return wrapper


# Functional collectives (torch.distributed._functional_collectives, torch
# 2: DTensor and tensor parallelism, compiled code): name -> (the argument
# holding the payload, the reduction's, the root's). They are asynchronous:
# each returns an AsyncCollectiveTensor, waited for by wait_tensor when the
# program first uses it.
FUNCOL = "funcol."  # their zones' prefix: "funcol.all_reduce"
_FUNCOL_OPS = {
    "broadcast": ("self", None, "src"),
    "all_reduce": ("self", "reduceOp", None),
    "all_reduce_coalesced": ("self", "reduceOp", None),
    "all_gather_single": ("self", None, None),
    "all_gather_tensor": ("self", None, None),
    "all_gather_single_autograd": ("self", None, None),
    "all_gather_tensor_autograd": ("self", None, None),
    "all_gather_single_coalesced": ("self", None, None),
    "all_gather_into_tensor_coalesced": ("self", None, None),
    "reduce_scatter_single": ("self", "reduceOp", None),
    "reduce_scatter_tensor": ("self", "reduceOp", None),
    "reduce_scatter_single_autograd": ("self", "reduceOp", None),
    "reduce_scatter_tensor_autograd": ("self", "reduceOp", None),
    "reduce_scatter_single_coalesced": ("inputs", "reduceOp", None),
    "reduce_scatter_tensor_coalesced": ("inputs", "reduceOp", None),
    "all_to_all_single": ("self", None, None),
    "all_to_all_single_autograd": ("self", None, None),
}
# Functional collectives' outputs not yet waited for: the address of an
# output's storage (its views share it) -> [name, begin_ns, outputs of the
# call not yet waited for]. An output never waited for stays until another
# takes its storage, or is forgotten past MAX_UNWAITED.
_inflight = {}


def _functional_group(fc, c10d, bound):
    """The process group of a functional collective's group argument (a
    process group, its name, a device mesh (and dimension), ranks)."""
    group, tag = bound["group"], bound.get("tag", "")
    if isinstance(group, list):  # ranks (_resolve_group would warn again)
        group = c10d._resolve_group_name_by_ranks_and_tag(group, tag)
    else:
        group = fc._resolve_group(group, tag)
    if isinstance(group, str):
        group = c10d._resolve_process_group(group)
    return group


def _describe_functional(fc, c10d, spec, bound, group, result, begin_ns,
                         name):
    """Records a functional collective's payload, group and seq into the
    zone that is open, and keeps its outputs for wait_tensor."""
    payload, op, root = spec
    tensors = bound[payload]
    tensors = _tensor_list(tensors if isinstance(tensors, (list, tuple))
                           else [tensors])
    _mlprof.units("bytes", sum(t.numel() * t.element_size() for t in tensors))
    _mlprof.units("elements", sum(t.numel() for t in tensors))
    _mlprof.units("seq", _next_seq(c10d, group))
    _mlprof.zone_meta("group", _group_name(c10d, group))
    if tensors:
        _mlprof.zone_meta("dtype", str(tensors[0].dtype).replace("torch.", ""))
    if op is not None:
        _mlprof.zone_meta("op", str(bound[op]).lower())
    if root is not None:
        _mlprof.zone_meta("root", str(c10d.get_global_rank(group,
                                                           bound[root])))
    outs = result if isinstance(result, (list, tuple)) else [result]
    keys = [t.elem.untyped_storage().data_ptr() for t in outs
            if isinstance(t, fc.AsyncCollectiveTensor)]
    keys = [k for k in keys if k]
    if not keys:
        return  # waited for already (a plain tensor), or empty
    entry = [name, begin_ns, len(keys)]
    with _lock:
        if len(_inflight) + len(keys) <= MAX_UNWAITED:
            for k in keys:
                _inflight[k] = entry


def _wrap_functional(fc, c10d, name, fn, spec):
    """fn, a functional collective, recorded as a zone FUNCOL + name: its
    call (the launch); its completion, a span "FUNCOL + name done" on TRACK,
    ends when wait_tensor has waited for its last output. Tracing
    (torch.compile, export, fake tensors) calls fn alone."""
    import inspect
    params = inspect.signature(fn).parameters
    names = list(params)
    defaults = {k: p.default for k, p in params.items()
                if p.default is not inspect.Parameter.empty}
    zone = _mlprof.Zone(FUNCOL + name, "communication")
    tracing = fc._are_we_tracing

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if tracing() or getattr(_inside, "on", False):
            return fn(*args, **kwargs)
        _inside.on = True
        try:
            if not _mlprof.is_enabled():
                result = fn(*args, **kwargs)
                try:  # numbered while recording is off too (see _wrap)
                    bound = dict(zip(names, args), **kwargs)
                    bound.setdefault("tag", "")
                    _next_seq(c10d, _functional_group(fc, c10d, bound))
                except Exception:
                    pass
                return result
            begin_ns = _mlprof.monotonic_ns()
            with zone:
                result = fn(*args, **kwargs)
                try:
                    bound = dict(defaults)
                    bound.update(zip(names, args))
                    bound.update(kwargs)
                    group = _functional_group(fc, c10d, bound)
                    _describe_functional(fc, c10d, spec, bound, group, result,
                                         begin_ns, FUNCOL + name)
                except Exception:
                    pass  # recording must never break the program's call
            return result
        finally:
            _inside.on = False

    wrapper._mlprof_wrapped = fn
    return wrapper


def _wrap_wait(fc, wait):
    """wait_tensor, through which an AsyncCollectiveTensor waits for its
    collective: a zone FUNCOL + "wait_tensor" (communication, the host
    blocked) when the tensor is a recorded collective's output, and that
    collective's "done" span once all its outputs were waited for."""
    zone = _mlprof.Zone(FUNCOL + "wait_tensor", "communication")
    tracing = fc._are_we_tracing

    @functools.wraps(wait)
    def wait_tensor(tensor):
        if tracing() or not _inflight:
            return wait(tensor)
        try:
            key = tensor.untyped_storage().data_ptr()
            with _lock:
                entry = _inflight.pop(key, None)
                if entry is not None:
                    entry[2] -= 1
        except Exception:
            entry = None
        if entry is None or not _mlprof.is_enabled():
            return wait(tensor)
        with zone:
            result = wait(tensor)
        if entry[2] == 0:
            _record_span(TRACK, entry[0] + " done", entry[1])
        return result

    wait_tensor._mlprof_wrapped = wait
    return wait_tensor


def _install_functional(fc):
    """Wraps the functional collectives of module fc (run when the program
    imports it: torch imports it only for DTensor, FSDP2 and the like); a
    failure is recorded in the session metadata, never raised into the
    program's import."""
    try:
        _wrap_functionals(fc)
    except Exception as e:
        _mlprof.meta("mlprof.distributed.functional", "not instrumented: "
                     "%s: %s" % (type(e).__name__, e))


def _wrap_functionals(fc):
    import torch.distributed.distributed_c10d as c10d
    for name, spec in _FUNCOL_OPS.items():
        fn = getattr(fc, name, None)
        if fn is not None and not hasattr(fn, "_mlprof_wrapped"):
            setattr(fc, name, _wrap_functional(fc, c10d, name, fn, spec))
    wait = getattr(fc, "wait_tensor", None)
    if wait is not None and not hasattr(wait, "_mlprof_wrapped"):
        fc.wait_tensor = _wrap_wait(fc, wait)
    # torch.compile replaces a call to torch.distributed's collectives by
    # their functional form, recognising them by identity: the wrappers
    # are given the same replacement (no graph break, nothing recorded
    # inside compiled code).
    remaps = getattr(fc, "traceable_collective_remaps", None)
    if isinstance(remaps, dict):
        for name in _OPS:
            fn = getattr(c10d, name, None)
            orig = getattr(fn, "_mlprof_wrapped", None)
            if orig in remaps:
                remaps[fn] = remaps[orig]


def _clock_sync(c10d, key):
    """Measures this rank's CLOCK_MONOTONIC offset to rank 0's by round trips
    through the default group's store and records it as META key (as
    src/intercept/mpi.c does: "OFFSET_NS UNCERTAINTY_NS AT_NS"). Gives up,
    recording nothing, when a rank does not answer within CLOCK_TIMEOUT."""
    store = c10d._get_default_store()
    rank, size = c10d.get_rank(), c10d.get_world_size()
    _syncs[0] += 1
    base = "mlprof/clock/%d/" % _syncs[0]
    now = _mlprof.monotonic_ns
    if rank == 0:
        for r in range(1, size):
            for k in range(CLOCK_ROUNDS):
                store.wait(["%s%d/%d/ping" % (base, r, k)], CLOCK_TIMEOUT)
                store.set("%s%d/%d/pong" % (base, r, k), str(now()))
        _mlprof.meta(key, "0 0 %d" % now())
        return
    best = None
    for k in range(CLOCK_ROUNDS):
        t0 = now()
        store.set("%s%d/%d/ping" % (base, rank, k), "")
        pong = "%s%d/%d/pong" % (base, rank, k)
        store.wait([pong], CLOCK_TIMEOUT)
        t = int(store.get(pong))
        t1 = now()
        if best is None or t1 - t0 < best[0]:
            at = t0 + (t1 - t0) // 2
            best = (t1 - t0, t - at, at)
    rtt, offset, at = best
    _mlprof.meta(key, "%d %d %d" % (offset, (rtt + 1) // 2, at))


def _started(c10d, clock_key):
    _mlprof.meta("dist.rank", str(c10d.get_rank()))
    _mlprof.meta("dist.world_size", str(c10d.get_world_size()))
    _mlprof.meta("dist.backend", str(c10d.get_backend()))
    if clock_key:
        try:
            _clock_sync(c10d, clock_key)
        except Exception:
            pass  # a rank that does not answer: no offset, the run goes on


def _wrap_lifecycle(c10d):
    init, destroy = c10d.init_process_group, c10d.destroy_process_group

    @functools.wraps(init)
    def init_process_group(*args, **kwargs):
        result = init(*args, **kwargs)
        _started(c10d, "dist.clock.init")
        return result

    @functools.wraps(destroy)
    def destroy_process_group(group=None):
        if group is None and c10d.is_initialized():
            try:
                _clock_sync(c10d, "dist.clock.final")
            except Exception:
                pass
        return destroy(group)

    return {"init_process_group": init_process_group,
            "destroy_process_group": destroy_process_group}


class _Buckets:
    """The state of mlprof's DDP hook: the process group, and the futures of
    the buckets launched so far in this backward pass."""

    def __init__(self, group):
        self.group, self.futures = group, []


def _ddp_hook(state, bucket):
    """torch's default hook (allreduce_hook), and the wait that follows the
    last bucket: once it is launched the rank has computed its gradients,
    and DDP, in C++, waits for every bucket's all-reduce before backward
    returns. That wait, from the last launch to the last completion, is
    recorded as a span "DDP wait": the blocking part of DDP's
    communication, so that the analysis sees the rank's compute without it
    (a rank behind the others makes it long on theirs). The waiting for
    that rank is the buckets' own, their "all_reduce done" spans paired
    with their zones by src/analyze/dist.c."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    fut = default_hooks.allreduce_hook(state.group, bucket)
    try:
        state.futures.append(fut)
        if bucket.is_last():
            futs, state.futures = state.futures, []
            if _mlprof.is_enabled():
                begin_ns = _mlprof.monotonic_ns()
                torch.futures.collect_all(futs).then(
                    lambda _fut: _record_span(DDP_TRACK, "DDP wait",
                                              begin_ns))
    except Exception:
        pass  # recording must never break the program's backward
    return fut


def _hook_ddp():
    """Routes DDP's gradient all-reduces through the default communication
    hook (which calls the wrapped all_reduce), unless the user registers a
    hook of their own before the first forward."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    forward, register = DDP.forward, DDP.register_comm_hook
    builtin = DDP._register_builtin_comm_hook

    @functools.wraps(forward)
    def ddp_forward(self, *args, **kwargs):
        if not self.__dict__.get("_mlprof_hooked"):
            self.__dict__["_mlprof_hooked"] = True
            register(self, _Buckets(self.process_group), _ddp_hook)
        return forward(self, *args, **kwargs)

    @functools.wraps(register)
    def register_comm_hook(self, state, hook):
        self.__dict__["_mlprof_hooked"] = True
        return register(self, state, hook)

    @functools.wraps(builtin)
    def register_builtin_comm_hook(self, comm_hook_type):
        self.__dict__["_mlprof_hooked"] = True
        return builtin(self, comm_hook_type)

    DDP.forward = ddp_forward
    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = register_builtin_comm_hook


SYNC_METHODS = ("item", "tolist", "cpu")


def _hook_host_syncs(torch):
    """Wraps the Tensor methods of SYNC_METHODS and
    torch.cuda.synchronize so that each host sync is a zone. The methods
    are _mlprof.SyncMethod: on a CPU tensor, no sync, they cost one
    attribute read more than torch's (bench/bench_python.py)."""
    for name in SYNC_METHODS:
        fn = getattr(torch.Tensor, name)
        zone = _mlprof.Zone("host sync .%s()" % name)
        setattr(torch.Tensor, name, _mlprof.SyncMethod(fn, zone))
    synchronize = torch.cuda.synchronize
    zone = _mlprof.Zone("host sync torch.cuda.synchronize()")

    @functools.wraps(synchronize)
    def cuda_synchronize(*args, **kwargs):
        with zone:
            return synchronize(*args, **kwargs)
    cuda_synchronize._mlprof_wrapped = synchronize
    torch.cuda.synchronize = cuda_synchronize


def install():
    """Records torch.distributed's operations from now on (once per process;
    later calls do nothing). Returns True when torch.distributed is
    recorded, False when the program has not imported it (nothing is
    imported here) or it is not available."""
    global _installed
    dist = sys.modules.get("torch.distributed")
    with _lock:
        if _installed:
            return True
        if dist is None or not dist.is_available():
            return False
        _installed = True
    import torch.distributed.distributed_c10d as c10d
    patched = {name: _wrap(c10d, name, getattr(c10d, name), spec)
               for name, spec in _OPS.items() if hasattr(c10d, name)}
    patched.update(_wrap_lifecycle(c10d))
    for name, fn in patched.items():
        setattr(c10d, name, fn)
        if hasattr(dist, name):
            setattr(dist, name, fn)
    _hook_ddp()
    _hook_host_syncs(sys.modules["torch"])
    _wait_hook(c10d.Work)
    from .auto import after_import
    after_import("torch.distributed._functional_collectives",
                 _install_functional)
    if c10d.is_initialized():
        _started(c10d, None)
    return True
