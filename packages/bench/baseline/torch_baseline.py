#!/usr/bin/env python3
"""PyTorch baseline of rayo-bench.

Times the cases of a case file written by rayo-bench (``cases.json`` in its
output folder) with PyTorch on the same GPU, and writes their median times as
JSON. rayo-bench runs it for ``--baseline torch``; it can also be run by hand:

    python3 torch_baseline.py --cases bench-results/DATE/cases.json --out torch.json

fp32 throughout with TF32 off, so that the numbers compare with rayo's fp32
kernels. The timing rules are rayo's own (``measure`` and
``calibrate_calls`` mirror ``timing.ts`` line for line, and a test holds them
equal):

- device-timed cases: a sample is N calls between one pair of CUDA events,
  divided by N, with N grown until a sample lasts ``deviceSampleMs`` (at most
  ``maxCallsPerSample``). Each case is timed twice: the N calls captured in
  one CUDA graph and replayed (``graph``: no launch gaps, as rayo's one
  submission) and the N calls launched eagerly back to back (``eager``).
- host-timed cases (uploads, reads, the weight cache, the 1000-kernel chain):
  wall time around the call and a synchronise.

Where PyTorch has several ways to do a case (GEMV through ``mm``, ``mv`` or
``F.linear``; attention through each SDPA backend or two batched matmuls),
each is timed and the fastest is the baseline; the output says which ran
(``impl``, ``method``) and lists every candidate. When torch or CUDA is
missing the output says so (``available: false``) and the script still exits 0.
"""

import argparse
import contextlib
import math
import sys
import time

from rayo_torch import (
    add_device_option,
    capture_graph,
    device_info,
    error_text,
    fp32_settings,
    open_baseline,
    spread,
    warm_on_side_stream,
    write_json,
)

SCHEMA_IN = "rayo-bench-cases/2"
SCHEMA_OUT = "rayo-bench-torch/2"


# --- The timing rules: the same as rayo's timing.ts ------------------------------------------------


class TimingRules:
    """The timing settings of the case file (rayo's TimingOptions)."""

    def __init__(self, timing):
        self.warmup = int(timing.get("warmup", 3))
        self.min_reps = int(timing.get("minReps", 5))
        self.max_reps = int(timing.get("maxReps", 2000))
        self.target_ms = float(timing.get("targetMs", 500))
        self.device_sample_ms = float(timing.get("deviceSampleMs", 2))
        self.max_calls_per_sample = int(timing.get("maxCallsPerSample", 1024))


def next_calls_per_sample(calls, ms, target_ms, max_calls):
    """How many calls a sample needs to last `target_ms`, given that `calls` took `ms` (rayo's nextCallsPerSample)."""
    if ms >= target_ms or calls >= max_calls:
        return calls
    wanted = math.ceil((calls * target_ms * 1.25) / ms) if ms > 0 else calls * 8
    return min(max_calls, max(wanted, calls + 1))


def calibrate_calls(sample, rules):
    """Grows the calls per sample from one (the first warm-up) until a sample lasts long enough (rayo's calibrateCalls).

    `sample(calls)` runs one sample of `calls` calls and returns its milliseconds.
    """
    calls = 1
    ms = sample(calls)
    while True:
        following = next_calls_per_sample(calls, ms, rules.device_sample_ms, rules.max_calls_per_sample)
        if following == calls:
            return calls
        calls = following
        ms = sample(calls)


def measure(once, rules, now=None, warmup=None):
    """Warm-up runs (fewer once they took the target time), then repetitions (rayo's measure).

    `once(rep)` returns the milliseconds a device clock measured, or None: then
    the host time around the call counts.
    """
    now = now or (lambda: time.perf_counter() * 1e3)
    warmup = rules.warmup if warmup is None else warmup
    rep = 0
    warm_start = now()
    i = 0
    while i < warmup and now() - warm_start < rules.target_ms:
        once(rep)
        rep += 1
        i += 1
    samples = []
    total = 0.0
    while len(samples) < rules.max_reps and (len(samples) < rules.min_reps or total < rules.target_ms):
        start = now()
        device = once(rep)
        rep += 1
        elapsed = now() - start
        samples.append(device if device is not None else elapsed)
        total += elapsed
    return samples


# --- Timers on a torch device ---------------------------------------------------------------------


class Timer:
    """Times calls on a torch device by rayo's rules."""

    def __init__(self, torch, device, rules):
        self.torch = torch
        self.device = device
        self.rules = rules

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def events(self, enqueue):
        """Milliseconds between CUDA events around what `enqueue` puts on the stream."""
        cuda = self.torch.cuda
        begin = cuda.Event(enable_timing=True)
        end = cuda.Event(enable_timing=True)
        begin.record()
        enqueue()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end)

    def eager(self, once):
        """N calls launched back to back between one pair of events, per call."""
        if self.device.type != "cuda":
            return self.host(once), 1

        def calls_of(calls, rep):
            def enqueue():
                for i in range(calls):
                    once(rep * calls + i)

            return enqueue

        calls = calibrate_calls(lambda c: self.events(calls_of(c, 0)), self.rules)
        samples = measure(
            lambda rep: self.events(calls_of(calls, rep + 1)) / calls,
            self.rules,
            warmup=max(0, self.rules.warmup - 1),
        )
        return samples, calls

    def graph(self, once):
        """N calls captured in one CUDA graph, events around its replay, per call."""
        graphs = {}

        self.warm_side_stream(once)

        def graph_of(calls):
            if calls not in graphs:
                graphs.clear()
                self.sync()

                def record():
                    for i in range(calls):
                        once(i)

                graphs[calls], _ = capture_graph(self.torch, record)
            return graphs[calls]

        try:
            calls = calibrate_calls(lambda c: self.events(graph_of(c).replay), self.rules)
            g = graph_of(calls)
            samples = measure(
                lambda _rep: self.events(g.replay) / calls, self.rules, warmup=max(0, self.rules.warmup - 1)
            )
        finally:
            graphs.clear()
        return samples, calls

    def warm_side_stream(self, once):
        """Runs the call on a side stream first, as CUDA graph capture needs (library handles, workspaces)."""
        warm_on_side_stream(self.torch, once)

    def host(self, once):
        """Wall time around each call and a synchronise (the first call is the first warm-up)."""
        once(0)
        self.sync()

        def timed(rep):
            once(rep + 1)
            self.sync()

        return measure(timed, self.rules, warmup=max(0, self.rules.warmup - 1))

    def host_graph(self, once):
        """Wall time around one replay of a graph of one call, and a synchronise."""
        self.warm_side_stream(once)
        g, _ = capture_graph(self.torch, lambda: once(0))
        return self.host(lambda _i: g.replay())


def stats(samples, calls, method, impl):
    return {
        "impl": impl,
        "method": method,
        **spread(samples),
        "samples": len(samples),
        "callsPerSample": calls,
    }


# --- The cases ------------------------------------------------------------------------------------


class Candidate:
    """One way to do a case in PyTorch: a call of the rep index, and the context it runs in."""

    def __init__(self, impl, call, context=None, note=None, graph=True):
        self.impl = impl
        self.call = call
        self.context = context or contextlib.nullcontext
        self.note = note
        # Whether the call can be captured in a CUDA graph (copies from pageable host memory cannot).
        self.graph = graph


TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def torch_dtype(torch, name):
    return getattr(torch, TORCH_DTYPES.get(name or "f32", "float32"))


def make_input(torch, device, shape, fill, dtype="f32"):
    if shape is None:
        return None
    t = torch.rand(shape, dtype=torch.float32, device=device)
    # The same distributions as rayo's inputs: never zeros; stored in the case's dtype.
    t = t + 0.5 if fill == "positive" else t * 2 - 1
    return t.to(torch_dtype(torch, dtype))


def input_sets(torch, device, case):
    """`rotate` independent copies of the inputs, cycled through to defeat the L2 cache."""
    shapes = case["shapes"]
    fills = case.get("fills") or ["uniform"] * len(shapes)
    dtypes = case.get("dtypes") or ["f32"] * len(shapes)
    base = [make_input(torch, device, s, f, d) for s, f, d in zip(shapes, fills, dtypes)]
    sets = [base]
    for _ in range(max(1, int(case.get("rotate", 1))) - 1):
        sets.append([None if t is None else t.clone() for t in base])
    return sets


@contextlib.contextmanager
def allow_tf32(torch):
    """PyTorch's TF32 products for f32 operands (cuBLAS on tensor cores), as rayo's precision 'tf32'."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def matmul_candidates(torch, device, case, sets):
    F = torch.nn.functional
    attrs = case.get("attrs", {})
    n = len(sets)
    alpha = float(attrs.get("alpha", 1))
    beta = float(attrs.get("beta", 1))
    trans_a = bool(attrs.get("transA", False))
    trans_b = bool(attrs.get("transB", False))
    operands = []
    # PyTorch multiplies operands of one dtype: an f32 row against half weights
    # (rayo widens the weights as it reads them) becomes a half row here.
    mixed = sets[0][0].dtype != sets[0][1].dtype
    for a, b, c in (s + [None] * (3 - len(s)) for s in sets):
        if mixed:
            a = a.to(b.dtype)
            c = None if c is None else c.to(b.dtype)
        # Transposed views: cuBLAS gets the transpose flag, nothing is copied.
        op_a = a.t() if trans_a else a
        op_b = b.t() if trans_b else b
        out = torch.empty((op_a.shape[0], op_b.shape[1]), dtype=a.dtype, device=device)
        operands.append((op_a, op_b, c, out))

    def mm(i):
        op_a, op_b, c, out = operands[i % n]
        if c is None and alpha == 1:
            torch.mm(op_a, op_b, out=out)
        elif c is None:
            torch.mm(op_a, op_b, out=out).mul_(alpha)
        else:
            torch.addmm(c, op_a, op_b, beta=beta, alpha=alpha, out=out)

    note = "x cast to the weights' %s" % str(sets[0][1].dtype).replace("torch.", "") if mixed else None
    if attrs.get("precision") == "tf32":
        return [Candidate("torch.mm (allow_tf32)", mm, context=lambda: allow_tf32(torch))]
    candidates = [Candidate("torch.mm", mm, note=note)]
    if operands[0][0].shape[0] == 1 and sets[0][2:3] in ([], [None]) and alpha == 1:
        # One row: PyTorch's GEMV entry points may pick another cuBLAS kernel.
        vectors = [(op_a.reshape(-1), op_b.t(), out.view(-1)) for op_a, op_b, _c, out in operands]

        def mv(i):
            x, w, out = vectors[i % n]
            torch.mv(w, x, out=out)

        def linear(i):
            op_a, op_b, _c, _out = operands[i % n]
            F.linear(op_a, op_b.t())

        candidates += [Candidate("torch.mv", mv, note=note), Candidate("F.linear", linear, note=note)]
    return candidates


def attention_candidates(torch, device, case, sets):
    F = torch.nn.functional
    attrs = case.get("attrs", {})
    n = len(sets)
    heads, dim = case["shapes"][0]
    kv_heads = case["shapes"][1][0]
    group = heads // kv_heads
    seq_len = int(attrs["seqLen"])
    scale = float(attrs.get("scale", 0)) or 1.0 / math.sqrt(dim)
    # Contiguous caches of exactly seqLen tokens (copied before timing): the fast paths want them.
    # A half cache takes a query of its dtype (rayo keeps the query in f32).
    caches = [
        (q.to(k.dtype), k[:, :seq_len, :].contiguous(), v[:, :seq_len, :].contiguous()) for q, k, v in sets
    ]
    candidates = []

    # softmax(q·Kᵀ·scale)·V as two batched matmuls, the query heads of one KV head together.
    grouped = [(q.view(kv_heads, group, dim), k, v) for q, k, v in caches]
    scores = [torch.empty((kv_heads, group, seq_len), dtype=k.dtype, device=device) for _q, k, _v in grouped]

    def two_matmuls(i):
        q, k, v = grouped[i % n]
        s = torch.baddbmm(scores[i % n], q, k.transpose(1, 2), beta=0, alpha=scale)
        torch.bmm(torch.softmax(s, dim=-1), v)

    candidates.append(Candidate("baddbmm+softmax+bmm", two_matmuls))

    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None:
        return candidates
    gqa = {}
    if group > 1:
        try:
            q, k, v = caches[0]
            sdpa(q.view(1, heads, 1, dim), k.unsqueeze(0), v.unsqueeze(0), scale=scale, enable_gqa=True)
            gqa = {"enable_gqa": True}
        except (TypeError, RuntimeError):
            gqa = {}
    views = []
    for q, k, v in caches:
        k4, v4 = k.unsqueeze(0), v.unsqueeze(0)
        if group > 1 and not gqa:
            # No enable_gqa in this torch: the KV heads are repeated before timing.
            k4 = k4.repeat_interleave(group, dim=1)
            v4 = v4.repeat_interleave(group, dim=1)
        views.append((q.view(1, heads, 1, dim), k4, v4))

    def attention(i):
        q, k, v = views[i % n]
        sdpa(q, k, v, scale=scale, **gqa)

    note = None if group == 1 or gqa else "KV heads repeated (no enable_gqa)"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        candidates.append(Candidate("F.scaled_dot_product_attention", attention, note=note))
        return candidates
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue
        candidates.append(
            Candidate(
                "sdpa[%s]" % name.lower(),
                attention,
                context=lambda backend=backend: sdpa_kernel([backend]),
                note=note,
            )
        )
    return candidates


def causal_attention_candidates(torch, device, case, sets):
    """A prompt's causal attention over its cache: SDPA with the flash backend, as rayo's causalAttention."""
    F = torch.nn.functional
    attrs = case.get("attrs", {})
    n = len(sets)
    tokens, heads, dim = case["shapes"][0]
    kv_heads = case["shapes"][1][0]
    position = int(attrs.get("position", 0))
    scale = float(attrs.get("scale", 0)) or 1.0 / math.sqrt(dim)
    rows = position + tokens
    views = []
    for q, k, v in sets:
        # [T, H, D] is [1, T, H, D]: SDPA's [1, H, T, D] as a strided view (nothing copied).
        q4 = q.view(1, tokens, heads, dim).transpose(1, 2)
        views.append((q4, k[:, :rows].unsqueeze(0), v[:, :rows].unsqueeze(0)))
    # is_causal aligns the mask top-left; rayo's queries are the cache's last rows (the same at position 0).
    if position == 0:
        causal = {"is_causal": True}
    else:
        mask = torch.ones(tokens, rows, dtype=torch.bool, device=device).tril(diagonal=position)
        causal = {"attn_mask": mask}
    gqa = {"enable_gqa": True} if kv_heads != heads else {}

    def attention(i):
        q, k, v = views[i % n]
        F.scaled_dot_product_attention(q, k, v, scale=scale, **causal, **gqa)

    from torch.nn.attention import SDPBackend, sdpa_kernel

    return [
        Candidate(
            "sdpa[flash_attention]",
            attention,
            context=lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION]),
        )
    ]


def attention_backward_candidates(torch, device, case, sets):
    """flashAttentionBackward: SDPA's backward (causal, grouped-query) on [T, B, H, D] inputs viewed as [B, H, T, D].

    The forward runs once per input set outside the timing; each call is one
    `torch.autograd.grad` of its output. f32 has no flash kernel in PyTorch:
    it runs the memory-efficient backend (kv heads repeated where grouped, as
    that backend takes no GQA), and the flash backend in bf16 is timed beside
    it as the tensor-core reference.
    """
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    attrs = case.get("attrs", {})
    tokens, batch, heads, dim = case["shapes"][0]
    kv_heads = case["shapes"][1][2]
    scale = float(attrs.get("scale", 0)) or 1.0 / math.sqrt(dim)
    n = len(sets)

    def graphs(dtype, backend, repeat):
        made = []
        for q, k, v, _out, d_out, _lse in sets:
            leaves = [t.to(dtype).permute(1, 2, 0, 3).detach().requires_grad_(True) for t in (q, k, v)]
            qh, kh, vh = leaves
            extra = {}
            if kv_heads != heads:
                if repeat:
                    kh = kh.repeat_interleave(heads // kv_heads, dim=1)
                    vh = vh.repeat_interleave(heads // kv_heads, dim=1)
                else:
                    extra = {"enable_gqa": True}
            # Cases run under no_grad: the forward must record its graph for autograd.grad.
            with torch.enable_grad(), sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(qh, kh, vh, scale=scale, is_causal=True, **extra)
            made.append((out, leaves, d_out.to(dtype).permute(1, 2, 0, 3)))
        return made

    def timed(made):
        def call(i):
            out, leaves, d_out = made[i % n]
            with torch.enable_grad():
                torch.autograd.grad(out, leaves, d_out, retain_graph=True)

        return call

    def backward(impl, dtype, backend, repeat, note=None):
        """The backward of `backend` on the sets in `dtype`, uncaptured (autograd.grad is not graphed)."""
        made = graphs(dtype, backend, repeat)
        return Candidate(impl, timed(made), context=lambda: sdpa_kernel([backend]), note=note, graph=False)

    candidates = []
    if case["dtypes"][0] == "f32":
        candidates.append(backward("sdpa[efficient_attention].backward", torch.float32, SDPBackend.EFFICIENT_ATTENTION, True))
    candidates.append(
        backward(
            "sdpa[flash_attention].backward bf16",
            torch.bfloat16,
            SDPBackend.FLASH_ATTENTION,
            False,
            note="bf16 inputs: the tensor-core reference",
        )
    )
    return candidates


def rotary(torch, device, attrs, seq, dim, offset, sign):
    """RoPE of [seq, heads, dim] rows at positions offset …, with cos and sin cached as models cache them."""
    half = dim // 2
    theta = float(attrs.get("theta", 10000))
    freqs = theta ** (-2.0 * torch.arange(half, dtype=torch.float64, device=device) / dim)
    positions = torch.arange(offset, offset + seq, dtype=torch.float64, device=device)
    angles = sign * positions[:, None] * freqs[None, :]
    cos = torch.cos(angles).float()[:, None, :]
    sin = torch.sin(angles).float()[:, None, :]
    interleaved = attrs.get("layout", "half") == "interleaved"

    def rotate(x):
        if interleaved:
            a, b = x[..., 0::2], x[..., 1::2]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    return rotate


def build(torch, device, case):
    """Returns (candidates, timer) for a case: timer `device` (CUDA events) or `host`."""
    F = torch.nn.functional
    kind = case["kind"]
    attrs = case.get("attrs", {})

    if kind == "upload":
        (shape,) = case["shapes"]
        host = torch.rand(shape, dtype=torch.float32) * 2 - 1
        return [Candidate("Tensor.to (pageable)", lambda _i: host.to(device), graph=False)], "host"

    if kind == "read":
        (shape,) = case["shapes"]
        t = make_input(torch, device, shape, "uniform")
        return [Candidate("Tensor.cpu", lambda _i: t.cpu(), graph=False)], "host"

    sets = input_sets(torch, device, case)
    n = len(sets)

    if kind == "elementwiseChain":
        x, b = sets[0]
        chain = int(case.get("chain", 1000))

        def elementwise_chain(_i):
            y = x
            for k in range(chain):
                y = torch.add(y, b) if k % 2 == 0 else torch.mul(y, 0.5)
            return y

        return [Candidate("add/mul", elementwise_chain)], "host"

    if kind == "weightCache":
        # The weight cache is timed on the host around the product and a sync, on both sides.
        def linear(i):
            x, w = sets[i % n]
            F.linear(x, w)

        return [Candidate("F.linear", linear)], "host"

    if kind == "matmul":
        return matmul_candidates(torch, device, case, sets), "device"

    if kind == "incrementalAttention":
        return attention_candidates(torch, device, case, sets), "device"

    if kind == "causalAttention":
        return causal_attention_candidates(torch, device, case, sets), "device"

    if kind == "flashAttentionBackward":
        return attention_backward_candidates(torch, device, case, sets), "device"

    if kind == "copy":
        outs = [torch.empty_like(s[0]) for s in sets]
        return [Candidate("Tensor.copy_", lambda i: outs[i % n].copy_(sets[i % n][0]))], "device"

    if kind == "softmax":
        return [Candidate("torch.softmax", lambda i: torch.softmax(sets[i % n][0], dim=-1))], "device"

    if kind == "argmax":
        return [Candidate("torch.argmax", lambda i: torch.argmax(sets[i % n][0], dim=-1))], "device"

    if kind == "rmsNorm":
        eps = float(attrs.get("eps", 1e-6))
        rms_norm = getattr(F, "rms_norm", None)

        def rmsnorm(i):
            x, w = sets[i % n]
            if rms_norm is not None:
                rms_norm(x, (x.shape[-1],), w, eps)
            else:
                x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

        return [Candidate("F.rms_norm" if rms_norm is not None else "composite", rmsnorm)], "device"

    if kind == "layerNorm":
        eps = float(attrs.get("eps", 1e-5))

        def layernorm(i):
            x, g, b = sets[i % n]
            F.layer_norm(x, (x.shape[-1],), g, b, eps)

        return [Candidate("F.layer_norm", layernorm)], "device"

    if kind == "rope":
        seq, _heads, dim = case["shapes"][0]
        sign = -1.0 if attrs.get("inverse", False) else 1.0
        rotate = rotary(torch, device, attrs, seq, dim, int(attrs.get("positionOffset", 0)), sign)
        return [Candidate("rotate-half, cached cos/sin", lambda i: rotate(sets[i % n][0]))], "device"

    if kind == "ropeKvScatter":
        seq, _heads, dim = case["shapes"][0]
        kv_heads = case["shapes"][3][0]
        position = int(attrs.get("position", 0))
        rotate = rotary(torch, device, attrs, seq, dim, position, 1.0)
        rows = slice(position, position + seq)

        def rope_kv_scatter(i):
            q, k, v, k_cache, v_cache = sets[i % n]
            rotate(q)
            k_cache[:, rows, :].copy_(rotate(k.view(seq, kv_heads, dim)).transpose(0, 1))
            v_cache[:, rows, :].copy_(v.view(seq, kv_heads, dim).transpose(0, 1))

        return [Candidate("rotate-half of q and k, cached cos/sin, two strided copy_", rope_kv_scatter)], "device"

    if kind == "swiglu":

        def swiglu(i):
            gate, up = sets[i % n]
            F.silu(gate) * up

        return [Candidate("F.silu(gate) * up", swiglu)], "device"

    if kind == "gateUpSwiglu":
        eps = float(attrs.get("eps", 1e-6))
        rms_norm = getattr(F, "rms_norm", None)

        def normed(x, w):
            if w is None:
                return x
            if rms_norm is not None:
                return rms_norm(x, (x.shape[-1],), w, eps)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

        def gate_up(i):
            x, wg, wu, *rest = sets[i % n]
            h = normed(x, rest[0] if rest else None)
            F.silu(F.linear(h, wg)) * F.linear(h, wu)

        # The layout models that fuse the two projections use: one weight [2N, K], one product.
        stacked = [torch.cat((s[1], s[2]), dim=0) for s in sets]

        def gate_up_stacked(i):
            x, _wg, _wu, *rest = sets[i % n]
            gate, up = F.linear(normed(x, rest[0] if rest else None), stacked[i % n]).chunk(2, dim=-1)
            F.silu(gate) * up

        norm = "rms_norm, then " if len(case["shapes"]) > 3 and case["shapes"][3] is not None else ""
        return [
            Candidate(norm + "F.silu(F.linear(x, wg)) * F.linear(x, wu)", gate_up),
            Candidate(norm + "one F.linear on [wg; wu], chunk, silu * up", gate_up_stacked),
        ], "device"

    if kind == "linear":
        activations = {"none": lambda z: z, "relu": F.relu, "silu": F.silu, "sigmoid": torch.sigmoid,
                       "tanh": torch.tanh, "gelu": lambda z: F.gelu(z, approximate="tanh")}
        act = activations[attrs.get("activation", "none")]
        keep_z = bool(attrs.get("preActivation", False))

        def linear_act(i):
            x, w, *rest = sets[i % n]
            z = F.linear(x, w, rest[0] if rest else None)
            return (act(z), z) if keep_z else act(z)

        return [Candidate(f"act(F.linear(x, w, b)), act = {attrs.get('activation', 'none')}", linear_act)], "device"

    if kind == "quantizedMatmul":
        # PyTorch has no int8 or 4-bit GEMV of its own. The reference row is the
        # same product with the weight dequantized to bf16: 2 bytes a weight,
        # what the codes replace. One weight per rotation set, like the inputs.
        rows = case["shapes"][1][0]
        xs = [s[0].to(torch.bfloat16) for s in sets]
        weights = [(torch.rand((rows, xs[0].shape[1]), device=device) * 2 - 1).to(torch.bfloat16) for _ in sets]

        def bf16_linear(i):
            F.linear(xs[i % n], weights[i % n])

        return [Candidate("F.linear on the weight dequantized to bf16 (no int8/int4 GEMV in PyTorch)", bf16_linear)], "device"

    if kind == "rmsNormMatmul":
        eps = float(attrs.get("eps", 1e-6))
        rms_norm = getattr(F, "rms_norm", None)

        def norm_linear(i):
            x, nw, w = sets[i % n]
            if rms_norm is not None:
                h = rms_norm(x, (x.shape[-1],), nw, eps)
            else:
                h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * nw
            F.linear(h, w)

        name = "F.rms_norm" if rms_norm is not None else "composite rms_norm"
        return [Candidate(name + ", then F.linear", norm_linear)], "device"

    if kind == "rmsNormMatmul3":
        eps = float(attrs.get("eps", 1e-6))
        rms_norm = getattr(F, "rms_norm", None)

        def normed(x, nw):
            if rms_norm is not None:
                return rms_norm(x, (x.shape[-1],), nw, eps)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * nw

        def norm_linears(i):
            x, nw, *ws = sets[i % n]
            h = normed(x, nw)
            for w in ws:
                F.linear(h, w)

        # The layout models that fuse q, k and v use: one weight [N0 + N1 + N2, K], one product.
        stacked = [torch.cat(s[2:], dim=0) for s in sets]
        sizes = [w.shape[0] for w in sets[0][2:]]

        def norm_linear_stacked(i):
            x, nw, *_ws = sets[i % n]
            F.linear(normed(x, nw), stacked[i % n]).split(sizes, dim=-1)

        name = "F.rms_norm" if rms_norm is not None else "composite rms_norm"
        return [
            Candidate(name + ", then one F.linear per weight", norm_linears),
            Candidate(name + ", then one F.linear on the stacked weights, split", norm_linear_stacked),
        ], "device"

    if kind == "kvCacheScatter":
        heads, _max_seq, dim = case["shapes"][0]
        position = int(attrs.get("position", 0))

        def kv_cache_scatter(i):
            cache, values = sets[i % n]
            tokens = values.numel() // (heads * dim)
            cache[:, position : position + tokens, :].copy_(values.view(tokens, heads, dim).transpose(0, 1))

        return [Candidate("strided copy_", kv_cache_scatter)], "device"

    if kind == "adamwStep":
        optimizers = []
        for param, grad, _m, _v in sets:
            # The moments start at zero here: the time of a step does not depend on their values.
            p = torch.nn.Parameter(param)
            p.grad = grad
            optimizers.append(make_adamw(torch, [p], attrs, device))
        return [Candidate("AdamW(%s)" % optimizers[0].rayo_impl, lambda i: optimizers[i % n].step())], "device"

    if kind == "multiTensorAdamw":
        # clip_grad_norm_ given the norm (one coefficient, every gradient scaled with _foreach_mul_), then
        # AdamW over all the tensors, the undecayed ones in their own parameter group.
        max_norm = float(attrs.get("maxNorm", 1))
        clip_eps = float(attrs.get("clipEps", 1e-6))
        decays = attrs.get("weightDecay", [0.01])
        clipped = case["shapes"][2] is not None
        steps = []
        for tensors in sets:
            # After step, lr, gradNorm and lossScale (absent: no loss scaling here).
            quads = tensors[4:]
            groups = {}
            grads = []
            for j in range(len(quads) // 4):
                p = torch.nn.Parameter(quads[4 * j])
                p.grad = quads[4 * j + 1]
                grads.append(p.grad)
                groups.setdefault(float(decays[0] if len(decays) == 1 else decays[j]), []).append(p)
            param_groups = [{"params": ps, "weight_decay": wd} for wd, ps in groups.items()]
            # The norm rayo's case holds: large enough that the clip acts.
            norm = torch.full((), 1000.0, device=device)
            steps.append((make_adamw(torch, param_groups, attrs, device, weight_decay=0.0), grads, norm))

        def clip_adamw(i):
            opt, grads, norm = steps[i % n]
            if clipped:
                torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + clip_eps), max=1.0))
            opt.step()

        impl = steps[0][0].rayo_impl
        name = ("_foreach_mul_ by the clip coefficient, then " if clipped else "") + "AdamW(%s)" % impl
        return [Candidate(name, clip_adamw)], "device"

    if kind == "clipByGlobalNorm":
        max_norm = float(attrs.get("maxNorm", 1))
        groups = []
        for grads in sets:
            params = []
            for g in grads:
                p = torch.nn.Parameter(torch.empty_like(g))
                p.grad = g
                params.append(p)
            groups.append(params)
        clip = torch.nn.utils.clip_grad_norm_

        def clip_by_global_norm(i):
            try:
                clip(groups[i % n], max_norm, foreach=True)
            except TypeError:
                clip(groups[i % n], max_norm)

        return [Candidate("clip_grad_norm_(foreach)", clip_by_global_norm)], "device"

    return None, None


def make_adamw(torch, params, attrs, device, weight_decay=None):
    kwargs = dict(
        lr=float(attrs.get("lr", 1e-3)),
        betas=(float(attrs.get("beta1", 0.9)), float(attrs.get("beta2", 0.999))),
        eps=float(attrs.get("eps", 1e-8)),
        weight_decay=float(attrs.get("weightDecay", 0.01)) if weight_decay is None else weight_decay,
    )
    # fused=True where this torch and device have it, else foreach, else the loop. Capturable keeps
    # the step count on the device, so the step can be captured in a CUDA graph.
    options = ({"fused": True, "capturable": True}, {"fused": True}, {"foreach": True}, {})
    for extra in options:
        if extra.get("fused") and device.type != "cuda":
            continue
        try:
            opt = torch.optim.AdamW(params, **kwargs, **extra)
            opt.rayo_impl = ", ".join(k for k in extra) or "for-loop"
            return opt
        except (TypeError, RuntimeError, ValueError):
            continue
    raise RuntimeError("torch.optim.AdamW could not be created")


def time_candidate(torch, timer, candidate, timer_kind):
    """Every way a candidate can be timed on this device, each as a result or an error."""
    cuda = timer.device.type == "cuda"
    methods = ["eager", "graph"] if cuda and candidate.graph else ["eager"]
    outcomes = []
    for method in methods:
        if outcomes and "error" in outcomes[0]:
            # The path does not run eagerly here (an SDPA backend that takes no fp32, say): nothing to capture.
            outcomes.append({"impl": candidate.impl, "method": method, "error": "not captured: it failed eagerly"})
            continue
        try:
            with candidate.context():
                if timer_kind == "host":
                    samples = timer.host_graph(candidate.call) if method == "graph" else timer.host(candidate.call)
                    calls = 1
                elif method == "graph":
                    samples, calls = timer.graph(candidate.call)
                else:
                    samples, calls = timer.eager(candidate.call)
            outcome = stats(samples, calls, method, candidate.impl)
        except Exception as error:  # noqa: BLE001 - a path this torch or device lacks is no failure
            outcome = {"impl": candidate.impl, "method": method, "error": error_text(error)}
            timer.sync()
        if candidate.note:
            outcome["note"] = candidate.note
        outcomes.append(outcome)
    return outcomes


def run_case(torch, device, timer, case):
    candidates, timer_kind = build(torch, device, case)
    if candidates is None:
        return {"id": case["id"], "status": "unsupported", "message": "no PyTorch equivalent of " + case["kind"]}
    outcomes = []
    for candidate in candidates:
        outcomes += time_candidate(torch, timer, candidate, timer_kind)
    timed = [o for o in outcomes if "error" not in o]
    if not timed:
        return {
            "id": case["id"],
            "status": "error",
            "message": "; ".join("%s (%s): %s" % (o["impl"], o["method"], o["error"]) for o in outcomes),
            "candidates": outcomes,
        }
    best = min(timed, key=lambda o: o["medianMs"])
    eager = [o for o in timed if o["method"] == "eager"]
    return {
        "id": case["id"],
        "status": "ok",
        "timer": "device" if timer_kind == "device" and device.type == "cuda" else "host",
        **best,
        "eagerMs": min(o["medianMs"] for o in eager) if eager else None,
        "candidates": outcomes,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="Times rayo-bench cases with PyTorch.")
    parser.add_argument("--cases", required=True, help="the case file rayo-bench wrote (cases.json)")
    parser.add_argument("--out", required=True, help="where to write the results (JSON)")
    add_device_option(parser)
    parser.add_argument("--filter", default="", help="only cases whose id contains this text")
    args = parser.parse_args(argv)

    opened = open_baseline(args.cases, args.device, SCHEMA_IN, SCHEMA_OUT, "torch baseline", "case file", args.out, [])
    if isinstance(opened, int):
        return opened
    spec, torch, device = opened
    torch.manual_seed(0)

    timer = Timer(torch, device, TimingRules(spec.get("timing", {})))
    results = []
    cases = [c for c in spec["cases"] if args.filter in c["id"]]
    for index, case in enumerate(cases, 1):
        print("[%d/%d] torch %s ... " % (index, len(cases), case["id"]), end="", file=sys.stderr, flush=True)
        try:
            with torch.no_grad():
                result = run_case(torch, device, timer, case)
        except Exception as error:  # noqa: BLE001 - one failing case must not stop the others
            result = {"id": case["id"], "status": "error", "message": error_text(error)}
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        results.append(result)
        if result["status"] == "ok":
            print(
                "%.4g ms (%s, %s, %d samples of %d calls)"
                % (result["medianMs"], result["method"], result["impl"], result["samples"], result["callsPerSample"]),
                file=sys.stderr,
            )
        else:
            print("%s: %s" % (result["status"], result.get("message", "")), file=sys.stderr)

    payload = {
        "schema": SCHEMA_OUT,
        "available": True,
        **device_info(torch, device),
        "settings": fp32_settings(torch),
        "results": results,
    }
    write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
