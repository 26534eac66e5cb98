#!/usr/bin/env python3
"""PyTorch baseline of rayo's train-bench.

Trains the workloads of a request file written by train-bench (``request.json``
in its output folder) in PyTorch on the same GPU, with the same shapes, AdamW
hyperparameters, clipping and step count, and prints the training throughput
as JSON (also written to ``--out``). Each workload is trained twice: eagerly,
and with the whole step (forward, backward, clipping and a capturable AdamW)
captured once in a CUDA graph and replayed (``graph``). Both train on one
batch uploaded to the device once: the eager step reads it directly, and each
graph replay is preceded by a device-to-device copy of every input into the
graph's static inputs (``static.copy_(batch)``), as a training loop over a
device-resident data set does, and as rayo's replayed step is fed:

    python3 torch_train_baseline.py --request OUT/torch-request.json --out torch.json

fp32 with TF32 off, except where a workload names a precision: ``bf16`` runs
the forward and the loss under ``torch.autocast(dtype=torch.bfloat16)`` (f32
master weights and AdamW, as rayo's 'bf16' policy), ``tf32`` allows TF32.
A language model whose ``checkpoint`` is ``blocks`` (or ``{"every": n}``)
runs those blocks through ``torch.utils.checkpoint.checkpoint`` (non-reentrant),
as rayo recomputes its checkpointed blocks in backward.
With ``compile`` in the request each workload is also trained with the model
under ``torch.compile`` (``compiled``; its compilation falls in the warm-up
steps). Each step is timed on the host from its start
to ``loss.item()`` (which waits for the step), as rayo times its steps up to
the loss readback; throughput is the batch over the median step time. On a
GPU each run also reports its peak device memory (``memory``: the peaks of
``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` after
``reset_peak_memory_stats``, warm-up and capture included). When
torch or CUDA is missing the output says so (``available: false``) and the
script still exits 0.
"""

import argparse
import contextlib
import json
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
    sync,
    warm_on_side_stream,
)

SCHEMA_IN = "rayo-train-workloads/1"
SCHEMA_OUT = "rayo-train-torch/3"


def emit(path, payload):
    text = json.dumps(payload, indent=2)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)


def checkpoint_every(policy):
    """rayo's BlockCheckpointing as a stride of checkpointed blocks: 0 for 'none', 1 for 'blocks'."""
    if policy == "none":
        return 0
    if policy == "blocks":
        return 1
    return int(policy["every"])


def build_models(torch):
    nn = torch.nn
    F = nn.functional
    from torch.utils.checkpoint import checkpoint
    activations = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
                   "sigmoid": torch.sigmoid, "tanh": torch.tanh}

    class MLP(nn.Module):
        def __init__(self, sizes, activation):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
            self.activation = activations[activation]

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i < len(self.layers) - 1:
                    x = self.activation(x)
            return x

    class RMSNorm(nn.Module):
        """rayo's RMSNorm: x / sqrt(mean(x²) + eps) · weight, eps 1e-6."""

        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rope_tables(seq, head_dim, device, theta=10000.0):
        half = head_dim // 2
        freqs = theta ** (-2 * torch.arange(half, dtype=torch.float32, device=device) / head_dim)
        angles = torch.arange(seq, dtype=torch.float32, device=device)[:, None] * freqs[None, :]
        # [T, 1, 1, half]: broadcast over batch and heads of a [T, B, H, d] tensor.
        return angles.cos()[:, None, None, :], angles.sin()[:, None, None, :]

    def rope(x, cos, sin):
        """rayo's 'half' layout: pairs (i, i + d/2), like GPT-NeoX and Llama."""
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Attention(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.q = nn.Linear(dim, dim, bias=False)
            self.k = nn.Linear(dim, dim, bias=False)
            self.v = nn.Linear(dim, dim, bias=False)
            self.o = nn.Linear(dim, dim, bias=False)

        def forward(self, x, cos, sin):
            t, b, d = x.shape
            h = self.heads
            split = lambda z: z.view(t, b, h, d // h)  # noqa: E731
            q = rope(split(self.q(x)), cos, sin).permute(1, 2, 0, 3)
            k = rope(split(self.k(x)), cos, sin).permute(1, 2, 0, 3)
            v = split(self.v(x)).permute(1, 2, 0, 3)
            if sdpa is not None:
                out = sdpa(q, k, v, is_causal=True)
            else:
                scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                out = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
            # [B, H, T, d] → [T, B, H·d]
            return self.o(out.permute(2, 0, 1, 3).reshape(t, b, d))

    class Block(nn.Module):
        def __init__(self, dim, heads, hidden):
            super().__init__()
            self.norm1 = RMSNorm(dim)
            self.attn = Attention(dim, heads)
            self.norm2 = RMSNorm(dim)
            self.gate = nn.Linear(dim, hidden, bias=False)
            self.up = nn.Linear(dim, hidden, bias=False)
            self.down = nn.Linear(hidden, dim, bias=False)

        def forward(self, x, cos, sin):
            h = x + self.attn(self.norm1(x), cos, sin)
            n = self.norm2(h)
            return h + self.down(F.silu(self.gate(n)) * self.up(n))

    class CausalLM(nn.Module):
        def __init__(self, spec):
            super().__init__()
            dim = spec["dim"]
            self.dim = dim
            self.head_dim = dim // spec["heads"]
            self.embed = nn.Embedding(spec["vocab"], dim)
            self.blocks = nn.ModuleList(Block(dim, spec["heads"], spec["hidden"]) for _ in range(spec["blocks"]))
            self.norm = RMSNorm(dim)
            self.head = nn.Linear(dim, spec["vocab"], bias=False)
            self.every = checkpoint_every(spec.get("checkpoint", "none"))

        def forward(self, ids):
            t, b = ids.shape
            cos, sin = rope_tables(t, self.head_dim, ids.device)
            h = self.embed(ids)
            for i, block in enumerate(self.blocks):
                if self.every and i % self.every == 0:
                    # No dropout, so no RNG state to restore (and none to read inside a graph capture).
                    h = checkpoint(block, h, cos, sin, use_reentrant=False, preserve_rng_state=False)
                else:
                    h = block(h, cos, sin)
            return self.head(self.norm(h).view(t * b, self.dim))

    attention = "F.scaled_dot_product_attention(is_causal=True)" if sdpa is not None else "composite"
    return MLP, CausalLM, attention


def autocast_for(torch, device, spec, graph=False):
    """bf16 autocast for a 'bf16' workload, else nothing.

    Inside a CUDA graph capture without autocast's weight-cast cache, as torch.cuda.graphs asks.
    """
    if spec.get("precision") == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=not graph)
    return contextlib.nullcontext()


@contextlib.contextmanager
def tf32_for(torch, spec):
    """TF32 allowed for a 'tf32' workload only; the switches restored after it."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    allow = spec.get("precision") == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def workload(torch, device, spec, models, generator, wrap=None, graph=False):
    """The model, a fixed batch on the device and the loss on given inputs, as rayo builds them.

    Random features; next token = 3·id + 1. Returns (model, inputs, loss_fn(*inputs), tokens per step).
    `wrap` (e.g. torch.compile) makes the module the loss calls; the forward and loss run under the
    workload's autocast.
    """
    MLP, CausalLM, _ = models
    cross_entropy = torch.nn.functional.cross_entropy
    batch = spec["batch"]
    if spec["kind"] == "mlp":
        sizes = spec["sizes"]
        model = MLP(sizes, spec["activation"]).to(device)
        net = wrap(model) if wrap else model
        x = torch.randn(batch, sizes[0], generator=generator).to(device)
        y = torch.randint(0, sizes[-1], (batch,), generator=generator).to(device)
        return model, (x, y), autocast_loss(torch, device, spec, graph, net, cross_entropy), None
    model = CausalLM(spec).to(device)
    net = wrap(model) if wrap else model
    ids = torch.randint(0, spec["vocab"], (spec["seq"], batch), generator=generator)
    targets = ((3 * ids + 1) % spec["vocab"]).view(-1).to(device)
    ids = ids.to(device)
    loss_fn = autocast_loss(torch, device, spec, graph, net, cross_entropy)
    return model, (ids, targets), loss_fn, spec["seq"] * batch


def autocast_loss(torch, device, spec, graph, net, cross_entropy):
    def loss_fn(inputs, targets):
        with autocast_for(torch, device, spec, graph):
            return cross_entropy(net(inputs), targets)

    return loss_fn


def make_adamw(torch, params, hp, device, capturable=False):
    """AdamW with rayo's hyperparameters; fused where this torch and device have it, else foreach, else the loop.

    `capturable` keeps the step count on the device, so that a CUDA graph can hold the update.
    """
    kwargs = dict(lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"], weight_decay=hp["weightDecay"])
    options = ({"fused": True}, {"foreach": True}) if capturable else ({"fused": True}, {"foreach": True}, {})
    for extra in options:
        if extra.get("fused") and device.type != "cuda":
            continue
        if capturable:
            extra = {**extra, "capturable": True}
        try:
            return torch.optim.AdamW(params, **kwargs, **extra), ", ".join(extra) or "for-loop"
        except (TypeError, RuntimeError, ValueError):
            continue
    raise RuntimeError("torch.optim.AdamW could not be created" + (" capturable" if capturable else ""))


def clip_grads(torch, params, clip, device):
    try:
        torch.nn.utils.clip_grad_norm_(params, clip, **({"foreach": True} if device.type == "cuda" else {}))
    except TypeError:  # no foreach before torch 2.0
        torch.nn.utils.clip_grad_norm_(params, clip)


def throughput(spec, times, losses, tokens):
    """Samples (and tokens) per second at the median step time of `times` (milliseconds)."""
    percentiles = spread(times)
    median = percentiles["medianMs"]
    result = {
        "samplesPerSecond": 1000 * spec["batch"] / median,
        **percentiles,
        "stepsTimed": len(times),
        "firstLoss": losses[0],
        "lastLoss": losses[-1],
    }
    if tokens is not None:
        result["tokensPerSecond"] = 1000 * tokens / median
    return result


def start_memory(torch, device):
    """Empties the cache and resets the peaks, so that the next figures are this run's alone."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(torch, device):
    """The run's peak device memory since start_memory, as {"memory": ...}; nothing on a cpu."""
    if device.type != "cuda":
        return {}
    return {"memory": {
        "peakAllocatedBytes": int(torch.cuda.max_memory_allocated(device)),
        "peakReservedBytes": int(torch.cuda.max_memory_reserved(device)),
    }}


def run_eager(torch, device, request, spec, models, note, wrap=None):
    """Steps launched op by op from Python: what a PyTorch user gets by default (`wrap`: torch.compile)."""
    start_memory(torch, device)
    generator = torch.Generator().manual_seed(int(request.get("seed", 0)))
    model, data, loss_fn, tokens = workload(torch, device, spec, models, generator, wrap)
    optimizer, impl = make_adamw(torch, list(model.parameters()), request["adamw"], device)
    note["adamw"] = impl
    clip = float(request.get("clipNorm", 1))
    params = list(model.parameters())
    warmup, steps = int(request["warmup"]), int(request["steps"])
    times, losses = [], []
    sync(torch, device)
    for i in range(warmup + steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(*data)
        loss.backward()
        clip_grads(torch, params, clip, device)
        optimizer.step()
        losses.append(loss.item())  # waits for the step, as rayo's loss readback does
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    memory = peak_memory(torch, device)
    del model, optimizer
    return {**throughput(spec, times, losses, tokens), **memory}


def run_graph(torch, device, request, spec, models, note):
    """The whole step captured once in a CUDA graph (static inputs, capturable AdamW) and replayed.

    Each replay is fed the batch by a device-to-device copy into the static inputs.
    """
    start_memory(torch, device)
    generator = torch.Generator().manual_seed(int(request.get("seed", 0)))
    model, data, loss_fn, tokens = workload(torch, device, spec, models, generator, graph=True)
    static = [t.clone() for t in data]
    params = list(model.parameters())
    optimizer, impl = make_adamw(torch, params, request["adamw"], device, capturable=True)
    note["adamwGraph"] = impl
    note["graphInputs"] = "copied device to device into the static inputs (copy_) before each replay"
    clip = float(request.get("clipNorm", 1))

    def step():
        loss = loss_fn(*static)
        loss.backward()
        clip_grads(torch, params, clip, device)
        optimizer.step()
        return loss

    def warm_step(_i):
        optimizer.zero_grad(set_to_none=True)
        step()

    warm_on_side_stream(torch, warm_step)
    # Gradients are allocated inside the capture: every replay writes them afresh.
    optimizer.zero_grad(set_to_none=True)
    graph, static_loss = capture_graph(torch, step)
    warmup, steps = int(request["warmup"]), int(request["steps"])
    times, losses = [], []
    sync(torch, device)
    for i in range(warmup + steps):
        start = time.perf_counter()
        for s, d in zip(static, data):
            s.copy_(d)
        graph.replay()
        losses.append(static_loss.item())
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    memory = peak_memory(torch, device)
    del graph, model, optimizer
    return {**throughput(spec, times, losses, tokens), **memory}


def run_workload(torch, device, request, spec, models, note):
    with tf32_for(torch, spec):
        result = {"id": spec["id"], "status": "ok", **run_eager(torch, device, request, spec, models, note)}
        if device.type == "cuda":
            try:
                result["graph"] = run_graph(torch, device, request, spec, models, note)
            except Exception as error:  # noqa: BLE001 - a step that cannot be captured still has its eager figure
                result["graph"] = {"error": error_text(error)}
                sync(torch, device)
        if request.get("compile"):
            try:
                compiled = run_eager(torch, device, request, spec, models, note, wrap=torch.compile)
                result["compiled"] = compiled
            except Exception as error:  # noqa: BLE001 - a model torch.compile cannot take keeps its other figures
                result["compiled"] = {"error": error_text(error)}
                sync(torch, device)
    return result


def variant_text(name, figures):
    """', graph 12.3 samples/s (45.6 ms)', or the variant's error, or nothing."""
    if "samplesPerSecond" in figures:
        return ", %s %.1f samples/s (%.3g ms)" % (name, figures["samplesPerSecond"], figures["medianMs"])
    return ", %s: %s" % (name, figures["error"]) if "error" in figures else ""


def main(argv=None):
    parser = argparse.ArgumentParser(description="Times rayo's training workloads in PyTorch, eager and as a CUDA graph.")
    parser.add_argument("--request", required=True, help="the request file train-bench wrote")
    parser.add_argument("--out", default="", help="also write the results here (JSON)")
    add_device_option(parser)
    args = parser.parse_args(argv)

    opened = open_baseline(
        args.request, args.device, SCHEMA_IN, SCHEMA_OUT, "torch train baseline", "request", args.out, [], write=emit
    )
    if isinstance(opened, int):
        return opened
    request, torch, device = opened
    torch.manual_seed(int(request.get("seed", 0)))

    models = build_models(torch)
    note = {}
    results = []
    workloads = request["workloads"]
    for index, spec in enumerate(workloads, 1):
        print("[%d/%d] torch %s ... " % (index, len(workloads), spec["id"]), end="", file=sys.stderr, flush=True)
        try:
            result = run_workload(torch, device, request, spec, models, note)
            print(
                "eager %.1f samples/s (median step %.3g ms)%s%s"
                % (
                    result["samplesPerSecond"],
                    result["medianMs"],
                    variant_text("graph", result.get("graph", {})),
                    variant_text("compiled", result.get("compiled", {})),
                ),
                file=sys.stderr,
            )
        except Exception as error:  # noqa: BLE001 - one failing workload must not stop the others
            result = {"id": spec["id"], "status": "error", "message": "%s: %s" % (type(error).__name__, error)}
            print("error: " + result["message"], file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        results.append(result)

    emit(args.out, {
        "schema": SCHEMA_OUT,
        "available": True,
        **device_info(torch, device),
        "settings": {
            **fp32_settings(torch),
            "precisions": sorted({w.get("precision", "f32") for w in workloads}),
            "autocast": "torch.autocast(dtype=torch.bfloat16) around forward and loss for bf16 workloads",
            "attention": models[2],
            **note,
        },
        "results": results,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
