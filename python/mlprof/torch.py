"""PyTorch integration: per-module zones through hooks, FLOPs per layer,
data loading, preprocessing and training-step breakdowns, and
torch.profiler's operators and GPU kernels on tracks of the profile
(import_profile; Profiler(backend="torch")).

Everything records through an mlprof.Profiler into the same profile as the
rest of the program; the numbers come back from Profiler.summary(), that is
from the project's C analysis. Imported only when torch is installed:

    import mlprof, mlprof.torch
    with mlprof.Profiler(output="run/") as prof:
        mp = mlprof.torch.profile_model(model, prof)
        ... train ...
    print(mp.report())
"""
import json
import math
import os
import tempfile
import threading
import time
import warnings

import torch
from torch import nn

from . import Error, Profiler, _mlprof, zone_meta
from . import auto as _auto
from .auto import compiled_class, _note as _note_compiled

__all__ = ["profile_model", "ModelProfile", "profile_data_loading",
           "profile_preprocessing", "profile_training", "module_flops",
           "matmul_flops", "format_training", "import_profile",
           "SAVED_UNIT"]

FORWARD, BACKWARD = ":forward", ":backward"
LAYERS_META = "mlprof.layers:"  # + the model's class name

# ---- FLOPs ---------------------------------------------------------------
#
# Conventions (docs/python.md): one multiply-add is 2 FLOPs; a bias adds 1
# per output element; normalisations count 5 per element (mean, variance,
# normalise, scale, shift) and activations a fixed cost per element. These
# are forward FLOPs; a backward zone is credited with twice its forward's.

_ACT_COST = {
    nn.ReLU: 1, nn.ReLU6: 1, nn.LeakyReLU: 1, nn.Hardtanh: 1, nn.PReLU: 2,
    nn.ELU: 4, nn.SELU: 4, nn.CELU: 4, nn.GELU: 8, nn.SiLU: 4, nn.Mish: 8,
    nn.Sigmoid: 4, nn.Tanh: 4, nn.Hardsigmoid: 2, nn.Hardswish: 3,
    nn.Softmax: 5, nn.LogSoftmax: 5, nn.Softplus: 4,
}
_NORMS = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm,
          nn.modules.instancenorm._InstanceNorm, nn.LocalResponseNorm)
_POOLS = (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd,
          nn.modules.pooling._AdaptiveAvgPoolNd,
          nn.modules.pooling._AdaptiveMaxPoolNd)


def _tensors(x):
    """The tensors in a module's inputs or outputs, in order (a list: the
    hooks call this on every module call, a generator costs more)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        x = x.values()
    elif not isinstance(x, (list, tuple)):
        return []
    out = []
    for v in x:
        if isinstance(v, torch.Tensor):
            out.append(v)
        else:
            out.extend(_tensors(v))
    return out


def _first_tensor(x):
    ts = _tensors(x)
    return ts[0] if ts else None


def matmul_flops(a_shape, b_shape):
    """FLOPs of torch.matmul / bmm / mm of tensors of these shapes (2 per
    multiply-add, broadcasting batch dimensions)."""
    a, b = list(a_shape), list(b_shape)
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    m, k, n = a[-2], a[-1], b[-1]
    batch = torch.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return 2 * math.prod(batch) * m * k * n


def module_flops(module, inputs, output):
    """Forward FLOPs of one call of module, from the shapes it saw; 0 for
    modules without a formula (containers count through their children)."""
    x = _first_tensor(inputs)
    y = _first_tensor(output)
    if isinstance(module, nn.Linear):
        if y is None:
            return 0
        n = y.numel() // module.out_features
        f = 2 * n * module.in_features * module.out_features
        return f + (y.numel() if module.bias is not None else 0)
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        if y is None:
            return 0
        per_out = 2 * (module.in_channels // module.groups) * \
            math.prod(module.kernel_size)
        return y.numel() * per_out + (y.numel() if module.bias is not None
                                      else 0)
    if isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d,
                           nn.ConvTranspose3d)):
        if x is None or y is None:
            return 0
        per_in = 2 * (module.out_channels // module.groups) * \
            math.prod(module.kernel_size)
        return x.numel() * per_in + (y.numel() if module.bias is not None
                                     else 0)
    if isinstance(module, nn.MultiheadAttention):
        return _mha_flops(module, inputs)
    if isinstance(module, nn.Bilinear):
        n = y.numel() // module.out_features
        return 2 * n * module.in1_features * module.in2_features * \
            module.out_features
    if isinstance(module, _NORMS):
        return 5 * x.numel() if x is not None else 0
    for cls, cost in _ACT_COST.items():
        if type(module) is cls or isinstance(module, cls):
            return cost * (x.numel() if x is not None else 0)
    if isinstance(module, _POOLS):
        return x.numel() if x is not None else 0
    return 0


def _mha_flops(m, inputs):
    q = inputs[0] if inputs else None
    k = inputs[1] if len(inputs) > 1 else q
    if q is None or k is None:
        return 0
    e = m.embed_dim
    if m.batch_first or q.dim() == 2:
        lq, lk = q.shape[-2], k.shape[-2]
    else:
        lq, lk = q.shape[0], k.shape[0]
    n = q.numel() // (lq * e)
    kd, vd = m.kdim, m.vdim
    f = 2 * n * lq * e * e                 # q projection
    f += 2 * n * lk * kd * e + 2 * n * lk * vd * e  # k, v projections
    f += 2 * n * lq * lk * e               # scores q @ k^T (all heads)
    f += 5 * n * m.num_heads * lq * lk     # softmax
    f += 2 * n * lq * lk * e               # weights @ v
    f += 2 * n * lq * e * e                # output projection
    return f


# ---- per-module hooks ----------------------------------------------------

# The hooks' own work after a module's forward (the backward walk, hooks on
# the graph) is recorded in this zone, so it is not the self time of the
# module around.
OVERHEAD_ZONE = "mlprof hooks"


def _is_leaf(m):
    return isinstance(m, nn.MultiheadAttention) or not any(
        True for _ in m.children())


# The node that stores a parameter's gradient: the graph outside a module.
_ACCUMULATE_GRAD = type((torch.zeros(1, requires_grad=True) * 1)
                        .grad_fn.next_functions[0][0])


def _own_flops_begin():
    """A started torch profiler counting FLOPs, to count those of a module's
    own operators (a module whose children did not run); None when a torch
    profiler runs already."""
    if torch.autograd._profiler_enabled():
        return None
    p = torch.autograd.profiler.profile(with_flops=True)
    p.__enter__()
    return p


def _own_flops_end(p):
    """The FLOPs torch counted since _own_flops_begin (stops it)."""
    p.__exit__(None, None, None)
    return sum(e.flops for e in p.function_events)


class _Routed:
    """Hooks of a module that must carry none of its own: torch 2's
    nn.TransformerEncoderLayer leaves its fused fast path when any module
    under it has forward hooks, so hooks of ours would change what the
    program runs. Such modules are reached through one process-wide pair of
    module hooks (torch's register_module_forward_*_hook), installed while
    any module is routed, which looks the module up. remove() takes the
    module out (and the pair, with the last one)."""
    table = {}       # module -> the hooks object of _hooks.c
    handles = None   # the two global hook handles while table is not empty

    def __init__(self, module, hooks):
        cls = _Routed
        self.module = module
        if cls.handles is None:
            mm = torch.nn.modules.module
            cls.handles = (mm.register_module_forward_pre_hook(cls._pre),
                           mm.register_module_forward_hook(cls._post))
        cls.table[module] = hooks

    # Process-wide hooks run for every module, compiled ones' too: while
    # torch.compile traces, they are nothing (auto._compiling), as every
    # wrapper of mlprof's, so that no graph breaks or recompiles for them.
    @staticmethod
    def _pre(module, inputs):
        h = _Routed.table.get(module)
        if h is not None and not _auto._compiling():
            h.pre(module, inputs)

    @staticmethod
    def _post(module, inputs, output):
        h = _Routed.table.get(module)
        if h is not None and not _auto._compiling():
            h.post(module, inputs, output)

    def remove(self):
        cls = _Routed
        if cls.table.pop(self.module, None) is not None and not cls.table:
            for handle in cls.handles:
                handle.remove()
            cls.handles = None


# Units of a layer's forward zone: bytes of the tensors autograd saved for
# backward while the layer's own operators ran (docs/memory.md).
SAVED_UNIT = "saved_bytes"
MEMORY_META = "mlprof.torch.memory"


class _SavedBytes:
    """Activation memory of a model: while its forward runs, a pair of
    autograd saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks)
    sees each tensor an operator saves for backward, and counts its
    storage's bytes as SAVED_UNIT units of the innermost zone open (the
    forward zone of the innermost hooked module, whose operator saved it),
    each storage once per forward of the model, parameters and buffers
    left out (they live on whatever the graph does). The hooks are pushed
    only when torch can tell that no other pair is in place (activation
    checkpointing, a program's own offloading): those stay the program's,
    and that forward is not counted (nor any, with a torch that cannot
    tell). Installed on the model itself: remove() takes it away."""

    def __init__(self, model):
        self.model = model
        self.state = threading.local()
        self.skipped = 0  # forwards not counted: another pair of hooks
        # Left out of the count: their storages are looked up at each
        # forward (a module's .to() moves them), the list made once.
        self.weights = list(model.parameters()) + list(model.buffers())
        self.handles = [model.register_forward_pre_hook(self.pre)]
        try:  # run even when the forward raises (torch 2.1 and later)
            post = model.register_forward_hook(self.post, always_call=True)
        except TypeError:
            post = model.register_forward_hook(self.post)
        self.handles.append(post)

    def pre(self, module, inputs):
        st = self.state
        depth = getattr(st, "depth", 0)
        st.depth = depth + 1
        if depth or _auto._compiling() or not torch.is_grad_enabled():
            return
        ag = torch._C._autograd
        try:
            if ag._top_saved_tensors_default_hooks(False) is not None:
                self.skipped += 1
                return
            st.seen = {p.untyped_storage().data_ptr()
                       for p in self.weights}
            ag._push_saved_tensors_default_hooks(self.pack, _unpack)
        except Exception:  # disable_saved_tensors_hooks, another torch
            self.skipped += 1
            return
        st.pushed = True

    def post(self, module, inputs, output):
        st = self.state
        st.depth = max(0, getattr(st, "depth", 1) - 1)
        if st.depth == 0 and getattr(st, "pushed", False):
            st.pushed = False
            torch._C._autograd._pop_saved_tensors_default_hooks()

    def pack(self, t):
        try:  # on the thread whose forward pushed the hooks
            seen = self.state.seen
            s = t.untyped_storage()
            ptr = s.data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                n = s.nbytes()
                if n:
                    _mlprof.units(SAVED_UNIT, n)
        except Exception:
            pass  # a tensor without storage (a subclass): not counted
        # Detached: what the graph keeps must not hold the tensor itself
        # (a reference cycle through its grad_fn), torch's advice.
        return t.detach()

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _unpack(t):
    return t


class ModelProfile:
    """What profile_model installed: hooks (remove() takes them away; also
    a context manager), FLOPs per layer, and per-layer statistics read back
    from the profiler's summary. Layers are keyed by their path in the model
    (the model itself by its class name)."""

    def __init__(self, model, prof, depth, backward, flops, backward_every,
                 warn_compiled=True, memory=False):
        if isinstance(backward_every, bool) or not isinstance(
                backward_every, int) or backward_every < 1:
            raise ValueError("profile_model: backward_every must be an "
                             "integer >= 1, not %r" % (backward_every,))
        self.backward_every = backward_every
        self.model = model
        self.prof = prof
        self.depth = depth
        self.flops = {}          # key -> forward FLOPs of last call
        self.calls = {}          # key -> forward calls seen
        self.innermost = set()   # keys whose last call ran no hooked module
        self.handles = []
        self.labels = {}         # key -> zone name without ":forward"
        self.types = {}          # key -> class name
        self.paths = {}          # key -> path in the model ("": itself)
        self.params = {}         # key -> parameters, its children's included
        # What the hooks of all layers share (_hooks.c, SH_*).
        self._shared = (self.flops, self.calls, self.innermost,
                        set(),  # keys whose own operators' FLOPs to count
                        {},     # (key, input shape) -> FLOPs
                        module_flops, _own_flops_begin, _own_flops_end,
                        torch.is_grad_enabled, torch.Tensor, _ACCUMULATE_GRAD)
        root_name = (compiled_class(model) or type(model)).__name__
        self.root_name = root_name
        self.names = []
        self.leaves = set()
        self.compiled = []       # paths of the compiled modules ("": model)
        skip_under = []
        # Modules in an encoder layer's tree: their hooks are routed
        # (_Routed), so that its fast path stays the program's.
        self._fused = {id(c) for layer in model.modules()
                       if isinstance(layer, nn.TransformerEncoderLayer)
                       for c in layer.modules()}
        for name, m in model.named_modules():
            if any(name.startswith(p + ".") or p == "" for p in skip_under):
                continue  # inside a module counted as a whole (attention)
            d = 0 if name == "" else name.count(".") + 1
            if depth is not None and d > depth:
                continue
            if isinstance(m, (nn.ModuleList, nn.ModuleDict)):
                continue  # never called: no hook would ever fire
            key = root_name if name == "" else name
            leaf = _is_leaf(m) or (depth is not None and d == depth)
            if isinstance(m, nn.MultiheadAttention):
                skip_under.append(name)
            inner = compiled_class(m)
            if inner is not None:
                # torch.compile would trace the hooks of the modules inside
                # (a graph break at each): an OptimizedModule runs its own
                # hooks outside compiled code, so it is hooked as one layer;
                # a module compiled in place runs them inside: not hooked.
                self.compiled.append(name)
                _note_compiled("modules", inner.__name__)
                skip_under.append(name)
                if type(m) is inner:
                    continue
                leaf = True
            self.types[key] = (inner or type(m)).__name__
            self.paths[key] = name
            self.params[key] = sum(p.numel() for p in m.parameters())
            self.labels[key] = key if name == "" else \
                "%s (%s)" % (name, self.types[key])
            self._install(m, key, leaf, name == "", backward, flops)
            self.names.append(key)
            if leaf:
                self.leaves.add(key)
        # Activation memory: not inside compiled code (torch.compile
        # traces saved-tensor hooks), nor on a model whose hooks are routed.
        self.saved = None
        if memory:
            why = "compiled by torch.compile" if self.compiled else \
                "a fused encoder layer" if id(model) in self._fused else None
            if why is None:
                self.saved = _SavedBytes(model)
                self.handles.append(self.saved)
            prof.meta(MEMORY_META + ":" + root_name,
                      "saved for backward, per layer" if why is None else
                      "not recorded: %s" % why)
        if self.compiled and warn_compiled:
            warnings.warn(
                "mlprof.torch.profile_model: %s compiled by torch.compile: no "
                "per-layer zones inside compiled code (a compiled module is "
                "one zone, or none when compiled in place)" % ", ".join(
                    repr(p or root_name) for p in self.compiled),
                RuntimeWarning, stacklevel=3)
        # Every hooked module in the session metadata, so that a profile
        # tells which never ran (no zone) and their parameters (mlprof html's
        # Layers view): JSON [{"zone", "path", "type", "leaf", "params"}].
        prof.meta(LAYERS_META + root_name, json.dumps(
            [{"zone": self.labels[k], "path": self.paths[k],
              "type": self.types[k], "leaf": k in self.leaves,
              "params": self.params[k]} for k in self.names]))

    def _install(self, m, key, leaf, is_root, backward, flops):
        """The forward hooks of one module, in C (_hooks.c): its forward
        zone, FLOPs and calls, and after the forward, when gradients are
        on, its backward zone: hooks on its output and on the autograd
        nodes its backward ends with (found by a walk of the graph it
        made). That work is in the zone OVERHEAD_ZONE, not in the module's
        self time."""
        label = self.labels[key]
        h = _mlprof.layer_hooks(
            key, self.prof.zone(label + FORWARD, "forward"),
            self.prof.zone(label + BACKWARD, "backward"),
            self.prof.zone(OVERHEAD_ZONE), is_root, leaf, backward, flops,
            self.backward_every, tuple(m.parameters()), self._shared)
        if id(m) in self._fused:
            self.handles.append(_Routed(m, h))
        else:
            self.handles.append(m.register_forward_pre_hook(h.pre))
            self.handles.append(m.register_forward_hook(h.post))

    def remove(self):
        """Removes every hook profile_model installed."""
        for h in self.handles:
            h.remove()
        self.handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    @property
    def total_flops(self):
        """Forward FLOPs of one call of the model (sum over the innermost
        modules that ran)."""
        return sum(self.flops.get(k, 0) for k in self.innermost)

    def layers(self, summary=None):
        """Per module: its zone name, path and type, whether it ran and was
        innermost (no hooked module ran inside its last call), forward and
        backward count, mean, std, min, max, total (ns), FLOPs per call and
        achieved FLOP/s, from the profiler's summary (taken now when not
        given). forward and backward are None for a module that never ran
        (or has no backward zone)."""
        s = summary or self.prof.summary()
        zones = {z["name"]: z for z in s["zones"]}
        out = []
        for key in self.names:
            label = self.labels[key]
            row = {"name": label, "path": self.paths[key],
                   "type": self.types[key],
                   "leaf": key in self.leaves,
                   "ran": self.calls.get(key, 0) > 0,
                   "innermost": key in self.innermost,
                   "flops": self.flops.get(key, 0)}
            for kind, suffix in (("forward", FORWARD), ("backward", BACKWARD)):
                z = zones.get(label + suffix)
                if z is None:
                    row[kind] = None
                    continue
                u = _unit(z, "flops")
                row[kind] = {
                    "count": z["count"], "total_ns": z["total_ns"],
                    "self_ns": z["self_ns"], "mean_ns": z["mean_ns"],
                    "std_ns": z["std_ns"], "min_ns": z["min_ns"],
                    "max_ns": z["max_ns"], "p50_ns": z["p50_ns"],
                    "p99_ns": z["p99_ns"],
                    "flop_per_s": u["per_s"] if u else 0.0}
            out.append(row)
        return out

    def memory(self, summary=None):
        """Per module that ran: its zone name, path and type, forward
        calls, and the activation memory of its forward (docs/memory.md):
        saved_bytes, the bytes autograd saved for backward in one forward
        (mean over its forwards; None unless profile_model(memory=True));
        and, where this process's allocations were recorded (mlprof run),
        allocated_bytes (allocated while its forward was the innermost
        zone, over the run), peak_bytes (the most those allocations held
        live at once) and at_peak_bytes (what they held at the process's
        peak); None where allocations were not recorded."""
        s = summary or self.prof.summary()
        zones = {z["name"]: z for z in s["zones"]}
        mem = s.get("memory") or {}
        me = os.getpid()
        captured = any(p["pid"] == me for p in mem.get("processes", ()))
        by_zone = {z["zone"]: z for z in mem.get("zones", ())}
        out = []
        for key in self.names:
            label = self.labels[key]
            z = zones.get(label + FORWARD)
            if z is None:
                continue
            u = _unit(z, SAVED_UNIT)
            m = by_zone.get(label + FORWARD, {})
            row = {"name": label, "path": self.paths[key],
                   "type": self.types[key], "forwards": z["count"],
                   "saved_bytes": None, "allocated_bytes": None,
                   "peak_bytes": None, "at_peak_bytes": None}
            if self.saved is not None:
                row["saved_bytes"] = (u["n"] if u else 0) // z["count"]
            if captured:
                for k in ("allocated_bytes", "peak_bytes", "at_peak_bytes"):
                    row[k] = m.get(k, 0)
            out.append(row)
        return out

    def memory_report(self, summary=None):
        """The layers' activation memory (memory()) as lines."""
        rows = self.memory(summary)
        lines = ["%-40s %12s %12s %12s" % ("layer (forward)", "saved/fwd",
                                           "allocated", "at peak")]
        for r in sorted(rows, key=lambda r: -(r["saved_bytes"] or 0)):
            lines.append("%-40s %12s %12s %12s" % (
                r["name"][:40], _fmt_bytes(r["saved_bytes"]),
                _fmt_bytes(r["allocated_bytes"]),
                _fmt_bytes(r["at_peak_bytes"])))
        return "\n".join(lines)

    def slowest(self, n=5, summary=None, leaves_only=True):
        """The n layers with the largest forward+backward total time, among
        the modules that ran: the innermost ones (leaves_only; modules that
        ran none of their children count) or all."""
        rows = [r for r in self.layers(summary) if r["forward"] and
                (r["innermost"] or not leaves_only)]

        def total(r):
            return sum(r[k]["total_ns"] for k in ("forward", "backward")
                       if r[k])
        return sorted(rows, key=total, reverse=True)[:n]

    def most_variable(self, n=5, summary=None, min_count=2):
        """The n innermost modules that ran whose forward time varies most
        (std / mean)."""
        rows = [r for r in self.layers(summary) if r["innermost"] and
                r["forward"] and r["forward"]["count"] >= min_count
                and r["forward"]["mean_ns"] > 0]
        return sorted(rows, key=lambda r: r["forward"]["std_ns"] /
                      r["forward"]["mean_ns"], reverse=True)[:n]

    def report(self, n=10, summary=None):
        """A few lines naming the slowest and the most variable layers, and
        the modules that never ran."""
        s = summary or self.prof.summary()
        rows = self.layers(s)
        lines = ["slowest layers (forward + backward total):"]
        for r in self.slowest(n, s):
            f, b = r["forward"], r["backward"]
            lines.append(
                "  %-40s fwd %9s  bwd %9s  %10s FLOP/call  %9s FLOP/s"
                % (r["name"][:40], _fmt_ns(f["total_ns"]),
                   _fmt_ns(b["total_ns"]) if b else "-", _fmt_si(r["flops"]),
                   _fmt_si(f["flop_per_s"])))
        lines.append("most variable layers (forward std / mean):")
        for r in self.most_variable(n, s):
            f = r["forward"]
            lines.append("  %-40s mean %9s  std %9s  cv %.2f"
                         % (r["name"][:40], _fmt_ns(f["mean_ns"]),
                            _fmt_ns(f["std_ns"]), f["std_ns"] / f["mean_ns"]))
        idle = [r["name"] for r in rows if not r["ran"]]
        if idle:
            lines.append("never ran (%d): %s" % (len(idle), ", ".join(
                idle[:n]) + (", ..." if len(idle) > n else "")))
        lines.append("model forward FLOPs per call: %s"
                     % _fmt_si(self.total_flops))
        return "\n".join(lines)


# Backward zones in one forward of the model in this many by default: a
# forward with them costs about 14 µs per module (the hooks torch runs on
# the autograd graph, docs/python.md), one without about 3 µs; so about
# 4 µs per module per step, within the 5 µs budget.
BACKWARD_EVERY = 10


def profile_model(model, prof, depth=None, backward=True, flops=True,
                  backward_every=BACKWARD_EVERY, memory=False):
    """Installs hooks on model's modules (down to `depth` levels below the
    model; None: all): one zone per module call, "PATH (Type):forward"
    (category forward; the model itself is named after its class) and
    "PATH (Type):backward" (category backward); forward FLOPs of the
    innermost modules that ran as "flops" units of their zones. Backward
    zones are recorded for the model's 1st forward and then every
    backward_every-th (1: every forward). memory: also the bytes each
    layer's forward saves for backward, as SAVED_UNIT units of its forward
    zone (ModelProfile.memory(); docs/memory.md). Returns a ModelProfile
    (remove() takes the hooks away)."""
    return ModelProfile(model, prof, depth, backward, flops, backward_every,
                        memory=memory)


# ---- data loading, preprocessing, training --------------------------------

def _batch_info(batch):
    """(samples, bytes) of a batch: the first dimension of its first tensor,
    and the bytes of all its tensors."""
    size = [0]

    def walk(x):
        if isinstance(x, torch.Tensor):
            size[0] += x.element_size() * x.numel()
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
    walk(batch)
    t = _first_tensor(batch)
    n = t.shape[0] if t is not None and t.dim() > 0 else 1
    return int(n), size[0]


def _own_profiler(prof):
    """prof, or a new one joining the running session or writing to a
    temporary directory; (profiler, whether we started it)."""
    if prof is not None:
        if not prof.running:
            prof.start()
            return prof, True
        return prof, False
    p = Profiler(output=tempfile.mkdtemp(prefix="mlprof-") + "/")
    p.start()
    return p, True


def _zone_stats(summary, name):
    for z in summary["zones"]:
        if z["name"] == name:
            return z
    return None


def _unit(zone, name):
    """The units `name` of a zone of the summary ({"unit", "n", "per_s"})."""
    return next((u for u in zone["units"] if u["unit"] == name), None)


class _WorkerSetup:
    """worker_init_fn for DataLoader workers: names the worker's thread and
    records a zone per batch fetched, then calls the user's own init."""

    def __init__(self, user_init):
        self.user_init = user_init

    def __call__(self, worker_id):
        from . import _close_at_exit
        _close_at_exit()
        _mlprof.thread_name("DataLoader worker %d" % worker_id)
        try:
            from torch.utils.data._utils import fetch
            zone = _mlprof.Zone("worker_fetch", "data")
            for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
                orig = cls.fetch
                if getattr(orig, "_mlprof", False):
                    continue

                def fetch_zoned(self, index, _orig=orig):
                    with zone:
                        return _orig(self, index)
                fetch_zoned._mlprof = True
                cls.fetch = fetch_zoned  # only in this worker process
        except (ImportError, AttributeError):
            pass  # another torch: the worker still has its own profile
        if self.user_init is not None:
            self.user_init(worker_id)


def profile_data_loading(loader, num_batches, prof=None):
    """Iterates num_batches batches of loader, recording the wait for each
    in a zone "data_wait" (category data) with its samples as throughput
    and its bytes as a metric. With num_workers > 0 each worker process
    writes its own profile, with a zone "worker_fetch" per batch it made.
    Returns wait statistics, batch size, samples/s, bytes per batch and the
    loader's worker processes."""
    prof, started = _own_profiler(prof)
    workers = getattr(loader, "num_workers", 0)
    old_init = getattr(loader, "worker_init_fn", None)
    if workers:
        loader.worker_init_fn = _WorkerSetup(old_init)
    zone = prof.zone("data_wait", "data")
    samples = nbytes = batches = 0
    t0 = time.perf_counter()
    it = iter(loader)
    try:
        for _ in range(num_batches):
            with zone:
                try:
                    batch = next(it)
                except StopIteration:
                    break
                n, b = _batch_info(batch)
                prof.units("samples", n)
                prof.gauge("batch_bytes", b)
                zone_meta("batch_bytes", b)
            samples += n
            nbytes += b
            batches += 1
    finally:
        elapsed = time.perf_counter() - t0
        # This loader's workers (other children of this process, such as
        # an earlier loader's sampled workers, have profiles too).
        pids = {w.pid for w in getattr(it, "_workers", ())}
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()  # workers exit and close their profiles
        del it
        if workers:
            loader.worker_init_fn = old_init
    s = prof.summary()
    if started:
        prof.stop()
    z = _zone_stats(s, "data_wait") or {}
    me = os.getpid()
    procs = [p for p in s["processes"]
             if (p["pid"] in pids if pids else p["ppid"] == me)]
    wz = _zone_stats(s, "worker_fetch")
    return {
        "batches": batches, "samples": samples,
        "batch_size": samples / batches if batches else 0,
        "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
        "elapsed_s": elapsed,
        "bytes_per_batch": nbytes / batches if batches else 0,
        "wait_mean_ns": z.get("mean_ns", 0), "wait_p50_ns": z.get("p50_ns", 0),
        "wait_p99_ns": z.get("p99_ns", 0), "wait_max_ns": z.get("max_ns", 0),
        "wait_total_ns": z.get("total_ns", 0),
        "num_workers": workers,
        "worker_processes": [{"pid": p["pid"], "spans": p["spans"],
                              "clean_end": p["clean_end"]} for p in procs],
        "worker_fetch": wz, "summary": s, "profile": prof.path,
    }


def profile_preprocessing(fn, samples, prof=None, name="preprocess"):
    """Calls fn on every sample, each call in a zone `name` (category data)
    counting one sample. Returns per-sample statistics and samples/s."""
    prof, started = _own_profiler(prof)
    zone = prof.zone(name, "data")
    n = 0
    t0 = time.perf_counter()
    results = []
    for x in samples:
        with zone:
            results.append(fn(x))
            prof.units("samples", 1)
        n += 1
    elapsed = time.perf_counter() - t0
    s = prof.summary()
    if started:
        prof.stop()
    z = _zone_stats(s, name) or {}
    return {"samples": n, "elapsed_s": elapsed,
            "samples_per_s": n / elapsed if elapsed > 0 else 0.0,
            "mean_ns": z.get("mean_ns", 0), "std_ns": z.get("std_ns", 0),
            "p50_ns": z.get("p50_ns", 0), "p99_ns": z.get("p99_ns", 0),
            "max_ns": z.get("max_ns", 0), "results": results,
            "summary": s}


STEP_PARTS = (("data", "train_data"), ("forward", "train_forward"),
              ("backward", "train_backward"), ("optimizer", "train_optimizer"))


def profile_training(model, loader, optimizer, loss_fn, num_batches,
                     prof=None, device=None, model_profile=None):
    """Runs num_batches training steps, each a zone "train_step" holding
    "train_data" (waiting for the batch; category data), "train_forward"
    (model and loss), "train_backward" and "train_optimizer" (step and
    zero_grad), with the samples as throughput and a step mark after each.
    The batch is (inputs, targets). Returns the breakdown per step (mean and
    share of the step time for each part), samples/s, the share of step time
    spent waiting for data and, with model_profile, the slowest layers."""
    prof, started = _own_profiler(prof)
    z_step = prof.zone("train_step")
    zones = {k: prof.zone(n, k) for k, n in STEP_PARTS}
    model.train()
    it = iter(loader)
    steps = 0
    losses = []
    try:
        for _ in range(num_batches):
            with z_step:
                with zones["data"]:
                    try:
                        inputs, targets = next(it)
                    except StopIteration:
                        break
                    if device is not None:
                        inputs, targets = inputs.to(device), targets.to(device)
                with zones["forward"]:
                    out = model(inputs)
                    loss = loss_fn(out, targets)
                with zones["backward"]:
                    loss.backward()
                with zones["optimizer"]:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                prof.units("samples", _batch_info(inputs)[0])
                lv = float(loss.detach())
                prof.gauge("loss", lv)
                zone_meta("loss", lv)
                losses.append(lv)
            prof.step()
            steps += 1
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        del it
    s = prof.summary()
    if started:
        prof.stop()
    step = _zone_stats(s, "train_step") or {"total_ns": 0, "count": 0,
                                            "mean_ns": 0, "units": []}
    parts = {}
    part_total = 0
    for key, name in STEP_PARTS:
        z = _zone_stats(s, name) or {"total_ns": 0, "mean_ns": 0,
                                     "count": 0, "p50_ns": 0, "max_ns": 0}
        part_total += z["total_ns"]
        parts[key] = {"mean_ns": z["mean_ns"], "total_ns": z["total_ns"],
                      "p50_ns": z["p50_ns"], "max_ns": z["max_ns"],
                      "share": z["total_ns"] / step["total_ns"]
                      if step["total_ns"] else 0.0}
    su = _unit(step, "samples")
    res = {
        "steps": steps, "step_mean_ns": step["mean_ns"],
        "step_total_ns": step["total_ns"], "parts": parts,
        "parts_total_ns": part_total,
        "parts_share": part_total / step["total_ns"] if step["total_ns"]
        else 0.0,
        "data_wait_share": parts["data"]["share"],
        "samples_per_s": su["per_s"] if su else 0.0,
        "losses": losses, "summary": s, "profile": prof.path,
    }
    if model_profile is not None:
        res["slowest_layers"] = [r["name"] for r in
                                 model_profile.slowest(5, s)]
        res["layers_report"] = model_profile.report(5, s)
    return res


def format_training(res):
    """The result of profile_training as a few readable lines."""
    lines = ["%d steps, %s per step, %.1f samples/s"
             % (res["steps"], _fmt_ns(res["step_mean_ns"]),
                res["samples_per_s"])]
    for key, _ in STEP_PARTS:
        p = res["parts"][key]
        lines.append("  %-9s %9s per step  %5.1f%%" % (key, _fmt_ns(
            p["mean_ns"]), 100 * p["share"]))
    lines.append("waiting for data: %.1f%% of step time"
                 % (100 * res["data_wait_share"]))
    if "layers_report" in res:
        lines.append(res["layers_report"])
    return "\n".join(lines)


# ---- torch.profiler's events on tracks (backend="torch") ------------------

MAIN_TRACK = "torch ops"
_NOT_OPS = ("[memory]", "[OutOfMemory]")  # instant events, not operators


def _wall_minus_mono(reads=16):
    """CLOCK_REALTIME minus CLOCK_MONOTONIC in ns, from the pair of reads
    with the tightest bracket of monotonic reads around a wall-clock read."""
    best = None
    for _ in range(reads):
        m0 = time.monotonic_ns()
        w = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, w - (m0 + m1) // 2)
    return best[1]


def _clock_shift(t_ns):
    """What to subtract from torch's times to get CLOCK_MONOTONIC: torch
    1.x stamps events with the wall clock, others may use the monotonic
    one; an event time is decades away from the clock it is not on."""
    if abs(time.time_ns() - t_ns) < abs(time.monotonic_ns() - t_ns):
        return _wall_minus_mono()
    return 0


def _event_ns(e):
    """(begin, end) of a torch event in ns on torch's clock, from the ns
    accessors of newer torch when present."""
    if hasattr(e, "start_ns"):
        b = e.start_ns()
        return b, b + e.duration_ns()
    b = e.start_us() * 1000
    return b, b + e.duration_us() * 1000


def _fit_in_callers(spans):
    """torch 1.x gives whole microseconds, the begin and the duration each
    rounded down, so an operator can seem to end up to 1 µs after the one
    that called it. Such an end is moved back to the caller's, so that the
    operator nests as it ran. spans: (name, cat, begin, end, ...) tuples."""
    spans.sort(key=lambda s: (s[2], -s[3]))
    ends = []  # of the spans enclosing the current one
    for i, s in enumerate(spans):
        while ends and ends[-1] <= s[2]:
            ends.pop()
        if ends and ends[-1] < s[3] <= ends[-1] + 1000:
            s = spans[i] = s[:3] + (ends[-1],) + s[4:]
        while ends and ends[-1] < s[3]:
            ends.pop()
        ends.append(s[3])


def import_profile(torch_prof, prof=None):
    """Brings the events of a finished torch.profiler.profile (or
    torch.autograd.profiler.profile) into the running mlprof session, each
    on a track: CPU operators on "torch ops" (the thread of the earliest
    operator) and "torch ops (thread N)" for other torch threads (N is
    torch's own thread number), device kernels on "cuda:D stream S". FLOPs
    torch counted (with_flops=True) are "flops" units of the operator's
    span. Step markers (ProfilerStep#) and memory events are left out.
    prof: the Profiler to import into, which must be running; None: the
    session that runs. Import a profile once. Returns {track: events}."""
    if prof is not None and not prof.running:
        raise Error("import_profile: the mlprof Profiler is not running")
    results = getattr(getattr(torch_prof, "profiler", torch_prof),
                      "kineto_results", None)
    if results is None:
        raise Error("import_profile: the torch profiler has no results yet "
                    "(stop it first)")
    groups = {}  # torch thread id, or a device track's name -> spans
    shift = in_us = None  # taken from the first event
    for e in results.events():
        name = e.name()
        if name in _NOT_OPS or name.startswith("ProfilerStep#"):
            continue
        b, end = _event_ns(e)
        if shift is None:
            shift = _clock_shift(b)
            in_us = not hasattr(e, "start_ns")
        dev = e.device_type()
        kind = getattr(dev, "name", str(dev)).lower()
        key = e.start_thread_id() if kind == "cpu" else "%s:%d stream %d" % (
            kind, e.device_index(), e.device_resource_id())
        f = e.flops() if hasattr(e, "flops") else 0
        groups.setdefault(key, []).append(
            (name, 0, b - shift, end - shift, "flops" if f else None, f))
    threads = [k for k in groups if not isinstance(k, str)]
    main = min(threads, default=None,
               key=lambda k: min(s[2] for s in groups[k]))
    counts = {}
    for key, spans in groups.items():
        if in_us:
            _fit_in_callers(spans)
        track = key if isinstance(key, str) else MAIN_TRACK if key == main \
            else "%s (thread %d)" % (MAIN_TRACK, key)
        counts[track] = _mlprof.track_spans(track, spans)
    return counts


def _torch_action(schedule, step):
    """torch.profiler's action for a step of an mlprof schedule: a window of
    recorded steps is saved (imported) at its last step."""
    A = torch.profiler.ProfilerAction
    what = schedule(step)
    if what == "record":
        return A.RECORD_AND_SAVE if schedule(step + 1) != "record" \
            else A.RECORD
    return A.WARMUP if what == "warmup" else A.NONE


def _import_window(torch_prof):
    """on_trace_ready of backend="torch": an import that fails (spans past
    the memory cap, which are counted as dropped) is a warning, never an
    exception in the program's step()."""
    try:
        import_profile(torch_prof)
    except Error as e:
        warnings.warn("mlprof: torch.profiler's events were not all "
                      "imported: %s" % e, RuntimeWarning)


def _start_torch_profiler(prof):
    """A started torch.profiler.profile for Profiler(backend="torch"): CPU
    operators (and CUDA kernels when CUDA is available) with FLOPs, windows
    following prof's schedule from its current step, each imported into the
    session when it ends."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    opts = {"activities": acts, "with_flops": True}
    opts.update(prof.torch_options)
    if prof.schedule is not None:
        first, sched = prof.step_num, prof.schedule
        opts["schedule"] = lambda step: _torch_action(sched, first + step)
    tp = torch.profiler.profile(on_trace_ready=_import_window, **opts)
    tp.start()
    return tp


def _fmt_ns(ns):
    ns = float(ns or 0)
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= div:
            return "%.3g %s" % (ns / div, unit)
    return "%.0f ns" % ns


def _fmt_bytes(v):
    if v is None:
        return "-"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= div:
            return "%.3g %s" % (v / div, unit)
    return "%d B" % v


def _fmt_si(v):
    v = float(v or 0)
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= div:
            return "%.3g%s" % (v / div, unit)
    return "%.0f" % v
