#!/usr/bin/env python3
"""PyTorch baseline of rayo-bench.

Times the cases of a case file written by rayo-bench (``cases.json`` in its
output folder) with PyTorch on the same GPU, and writes their median times as
JSON. rayo-bench runs it for ``--baseline torch``; it can also be run by hand:

    python3 torch_baseline.py --cases bench-results/DATE/cases.json --out torch.json

fp32 throughout with TF32 off, so that the numbers compare with rayo's fp32
kernels. Kernel times come from CUDA events after warm-up; uploads and reads
are timed on the host around a synchronising copy. When torch or CUDA is
missing the output says so (``available: false``) and the script still exits 0.
"""

import argparse
import json
import math
import sys
import time

SCHEMA_IN = "rayo-bench-cases/1"
SCHEMA_OUT = "rayo-bench-torch/1"


def write(path, payload):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")


def unavailable(path, reason):
    write(path, {"schema": SCHEMA_OUT, "available": False, "reason": reason, "results": []})
    print("torch baseline: " + reason, file=sys.stderr)
    return 0


def quantile(sorted_values, q):
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class Timer:
    """Repeats a call: warm-up, an estimate, then timed repetitions."""

    def __init__(self, torch, device, timing):
        self.torch = torch
        self.device = device
        self.warmup = int(timing.get("warmup", 3))
        self.min_reps = int(timing.get("minReps", 5))
        self.max_reps = int(timing.get("maxReps", 2000))
        self.target_ms = float(timing.get("targetMs", 500))

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def reps_for(self, once):
        """Warm-up runs, then how many repetitions fill the target time."""
        start = time.perf_counter()
        for i in range(max(self.warmup, 1)):
            once(i)
            self.sync()
            if (time.perf_counter() - start) * 1e3 > self.target_ms:
                break
        start = time.perf_counter()
        once(0)
        self.sync()
        estimate_ms = max((time.perf_counter() - start) * 1e3, 1e-3)
        return int(min(self.max_reps, max(self.min_reps, self.target_ms / estimate_ms)))

    def device_times(self, once):
        """Milliseconds of each call between CUDA events (GPU time, launch gaps included)."""
        reps = self.reps_for(once)
        if self.device.type != "cuda":
            return self.host_times(once, reps), "host"
        cuda = self.torch.cuda
        events = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(reps)]
        for i, (begin, end) in enumerate(events):
            begin.record()
            once(i + 1)
            end.record()
        cuda.synchronize()
        return [begin.elapsed_time(end) for begin, end in events], "cuda-events"

    def host_times(self, once, reps=None):
        """Milliseconds of each call on the host, each one synchronised."""
        if reps is None:
            reps = self.reps_for(once)
        samples = []
        for i in range(reps):
            start = time.perf_counter()
            once(i + 1)
            self.sync()
            samples.append((time.perf_counter() - start) * 1e3)
        return samples


def make_input(torch, device, shape, fill):
    if shape is None:
        return None
    t = torch.rand(shape, dtype=torch.float32, device=device)
    # The same distributions as rayo's inputs: never zeros.
    return t + 0.5 if fill == "positive" else t * 2 - 1


def input_sets(torch, device, case):
    """`rotate` independent copies of the inputs, cycled through to defeat the L2 cache."""
    shapes = case["shapes"]
    fills = case.get("fills") or ["uniform"] * len(shapes)
    base = [make_input(torch, device, s, f) for s, f in zip(shapes, fills)]
    sets = [base]
    for _ in range(max(1, int(case.get("rotate", 1))) - 1):
        sets.append([None if t is None else t.clone() for t in base])
    return sets


def build(torch, device, case, note):
    """Returns (call(i), timer kind) for a case: `device` (CUDA events) or `host`.

    `note` collects what the result should say about how the case ran.
    """
    F = torch.nn.functional
    kind = case["kind"]
    attrs = case.get("attrs", {})

    if kind == "upload":
        (shape,) = case["shapes"]
        host = torch.rand(shape, dtype=torch.float32) * 2 - 1

        def upload(_i):
            host.to(device)

        return upload, "host"

    if kind == "read":
        (shape,) = case["shapes"]
        t = make_input(torch, device, shape, "uniform")

        def read(_i):
            t.cpu()

        return read, "host"

    if kind == "elementwiseChain":
        x, b = input_sets(torch, device, case)[0]
        chain = int(case.get("chain", 1000))

        def elementwise_chain(_i):
            y = x
            for k in range(chain):
                y = torch.add(y, b) if k % 2 == 0 else torch.mul(y, 0.5)
            return y

        return elementwise_chain, "device"

    sets = input_sets(torch, device, case)
    n = len(sets)

    if kind == "matmul":
        alpha = float(attrs.get("alpha", 1))
        beta = float(attrs.get("beta", 1))
        trans_a = bool(attrs.get("transA", False))
        trans_b = bool(attrs.get("transB", False))
        operands = []
        for a, b, c in (s + [None] * (3 - len(s)) for s in sets):
            # A transposed view: cuBLAS gets the transpose flag, nothing is copied.
            op_a = a.t() if trans_a else a
            op_b = b.t() if trans_b else b
            out = torch.empty((op_a.shape[0], op_b.shape[1]), dtype=torch.float32, device=device)
            operands.append((op_a, op_b, c, out))

        def matmul(i):
            op_a, op_b, c, out = operands[i % n]
            if c is None and alpha == 1:
                torch.mm(op_a, op_b, out=out)
            elif c is None:
                torch.mm(op_a, op_b, out=out).mul_(alpha)
            else:
                torch.addmm(c, op_a, op_b, beta=beta, alpha=alpha, out=out)

        return matmul, "device"

    if kind == "linear":

        def linear(i):
            x, w = sets[i % n]
            F.linear(x, w)

        return linear, "device"

    if kind == "copy":
        outs = [torch.empty_like(s[0]) for s in sets]

        def copy(i):
            outs[i % n].copy_(sets[i % n][0])

        return copy, "device"

    if kind == "softmax":

        def softmax(i):
            torch.softmax(sets[i % n][0], dim=-1)

        return softmax, "device"

    if kind == "rmsNorm":
        eps = float(attrs.get("eps", 1e-6))
        rms_norm = getattr(F, "rms_norm", None)
        note["impl"] = "F.rms_norm" if rms_norm is not None else "composite"

        def rmsnorm(i):
            x, w = sets[i % n]
            if rms_norm is not None:
                rms_norm(x, (x.shape[-1],), w, eps)
            else:
                x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

        return rmsnorm, "device"

    if kind == "layerNorm":
        eps = float(attrs.get("eps", 1e-5))

        def layernorm(i):
            x, g, b = sets[i % n]
            F.layer_norm(x, (x.shape[-1],), g, b, eps)

        return layernorm, "device"

    if kind == "rope":
        seq, _heads, dim = case["shapes"][0]
        half = dim // 2
        theta = float(attrs.get("theta", 10000))
        offset = int(attrs.get("positionOffset", 0))
        sign = -1.0 if attrs.get("inverse", False) else 1.0
        # cos and sin per position are cached, as models cache them.
        freqs = theta ** (-2.0 * torch.arange(half, dtype=torch.float64, device=device) / dim)
        positions = torch.arange(offset, offset + seq, dtype=torch.float64, device=device)
        angles = sign * positions[:, None] * freqs[None, :]
        cos = torch.cos(angles).float()[:, None, :]
        sin = torch.sin(angles).float()[:, None, :]
        interleaved = attrs.get("layout", "half") == "interleaved"

        def rope(i):
            x = sets[i % n][0]
            if interleaved:
                a, b = x[..., 0::2], x[..., 1::2]
                torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
            else:
                a, b = x[..., :half], x[..., half:]
                torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

        return rope, "device"

    if kind == "swiglu":

        def swiglu(i):
            gate, up = sets[i % n]
            F.silu(gate) * up

        return swiglu, "device"

    if kind == "kvCacheScatter":
        heads, _max_seq, dim = case["shapes"][0]
        position = int(attrs.get("position", 0))

        def kv_cache_scatter(i):
            cache, values = sets[i % n]
            tokens = values.numel() // (heads * dim)
            cache[:, position : position + tokens, :].copy_(values.view(tokens, heads, dim).transpose(0, 1))

        return kv_cache_scatter, "device"

    if kind == "incrementalAttention":
        heads, dim = case["shapes"][0]
        kv_heads = case["shapes"][1][0]
        seq_len = int(attrs["seqLen"])
        scale = float(attrs.get("scale", 0)) or 1.0 / math.sqrt(dim)
        views = []
        for q, k, v in sets:
            # q [1, heads, 1, d] against k and v [1, heads, T, d].
            k4 = k[:, :seq_len, :].unsqueeze(0)
            v4 = v[:, :seq_len, :].unsqueeze(0)
            if kv_heads != heads:
                k4 = k4.repeat_interleave(heads // kv_heads, dim=1)
                v4 = v4.repeat_interleave(heads // kv_heads, dim=1)
            views.append((q.view(1, heads, 1, dim), k4, v4))

        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None:
            try:
                q, k, v = views[0]
                sdpa(q, k, v, scale=scale)
                note["impl"] = "F.scaled_dot_product_attention"
            except TypeError:
                # Before torch 2.1 there is no scale argument: scale q so that the default 1/sqrt(d) gives it.
                views = [(q * (scale * math.sqrt(dim)), k, v) for q, k, v in views]
                scale = None
                note["impl"] = "F.scaled_dot_product_attention (q pre-scaled)"
        else:
            note["impl"] = "composite (no scaled_dot_product_attention in this torch)"

        def attention(i):
            q, k, v = views[i % n]
            if sdpa is None:
                torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * scale, dim=-1).matmul(v)
            elif scale is None:
                sdpa(q, k, v)
            else:
                sdpa(q, k, v, scale=scale)

        return attention, "device"

    if kind == "adamwStep":
        optimizers = []
        for param, grad, _m, _v in sets:
            # The moments start at zero here: the time of a step does not depend on their values.
            p = torch.nn.Parameter(param)
            p.grad = grad
            optimizers.append(make_adamw(torch, [p], attrs, device))
        note["impl"] = optimizers[0].rayo_impl

        def adamw(i):
            optimizers[i % n].step()

        return adamw, "device"

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

        return clip_by_global_norm, "device"

    return None, None


def make_adamw(torch, params, attrs, device):
    kwargs = dict(
        lr=float(attrs.get("lr", 1e-3)),
        betas=(float(attrs.get("beta1", 0.9)), float(attrs.get("beta2", 0.999))),
        eps=float(attrs.get("eps", 1e-8)),
        weight_decay=float(attrs.get("weightDecay", 0.01)),
    )
    # fused=True where this torch and device have it, else foreach, else the loop.
    for extra in ({"fused": True}, {"foreach": True}, {}):
        if extra.get("fused") and device.type != "cuda":
            continue
        try:
            opt = torch.optim.AdamW(params, **kwargs, **extra)
            opt.rayo_impl = next(iter(extra), "for-loop")
            return opt
        except (TypeError, RuntimeError, ValueError):
            continue
    raise RuntimeError("torch.optim.AdamW could not be created")


def run_case(torch, device, timer, case):
    note = {}
    call, kind = build(torch, device, case, note)
    if call is None:
        return {"id": case["id"], "status": "unsupported", "message": "no PyTorch equivalent of " + case["kind"]}
    times, how = timer.device_times(call) if kind == "device" else (timer.host_times(call), "host")
    times = sorted(times)
    return {
        "id": case["id"],
        "status": "ok",
        "medianMs": quantile(times, 0.5),
        "p10Ms": quantile(times, 0.1),
        "p90Ms": quantile(times, 0.9),
        "samples": len(times),
        "timer": how,
        **note,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="Times rayo-bench cases with PyTorch.")
    parser.add_argument("--cases", required=True, help="the case file rayo-bench wrote (cases.json)")
    parser.add_argument("--out", required=True, help="where to write the results (JSON)")
    parser.add_argument("--device", default="cuda", help="torch device (default cuda; cpu only checks the script)")
    parser.add_argument("--filter", default="", help="only cases whose id contains this text")
    args = parser.parse_args(argv)

    with open(args.cases, encoding="utf-8") as f:
        spec = json.load(f)
    if spec.get("schema") != SCHEMA_IN:
        print("torch baseline: %s is not a %s case file" % (args.cases, SCHEMA_IN), file=sys.stderr)
        return 2

    try:
        import torch
    except Exception as error:  # noqa: BLE001 - any import failure means no baseline
        return unavailable(args.out, "PyTorch is not installed (import torch: %s)" % error)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        built = getattr(torch.version, "cuda", None)
        return unavailable(
            args.out,
            "CUDA is not available to PyTorch %s (%s)"
            % (torch.__version__, "built with CUDA " + built if built else "a CPU-only build"),
        )

    # fp32 means fp32: no TF32 tensor-core shortcuts.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)

    timer = Timer(torch, device, spec.get("timing", {}))
    results = []
    cases = [c for c in spec["cases"] if args.filter in c["id"]]
    for index, case in enumerate(cases, 1):
        print("[%d/%d] torch %s ... " % (index, len(cases), case["id"]), end="", file=sys.stderr, flush=True)
        try:
            with torch.no_grad():
                result = run_case(torch, device, timer, case)
        except Exception as error:  # noqa: BLE001 - one failing case must not stop the others
            result = {"id": case["id"], "status": "error", "message": "%s: %s" % (type(error).__name__, error)}
        if device.type == "cuda":
            torch.cuda.empty_cache()
        results.append(result)
        if result["status"] == "ok":
            print("%.4g ms (%d runs, %s)" % (result["medianMs"], result["samples"], result["timer"]), file=sys.stderr)
        else:
            print("%s: %s" % (result["status"], result.get("message", "")), file=sys.stderr)

    payload = {
        "schema": SCHEMA_OUT,
        "available": True,
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "settings": {
            "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision()
            if hasattr(torch, "get_float32_matmul_precision")
            else None,
        },
        "results": results,
    }
    write(args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
