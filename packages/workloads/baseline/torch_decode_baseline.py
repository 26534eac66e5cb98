#!/usr/bin/env python3
"""PyTorch baseline of rayo's decode benchmark.

Loads a Llama-family checkpoint in the Hugging Face layout (``config.json``
and ``model.safetensors``, or shards listed in ``model.safetensors.index.json``)
in the request's ``dtype`` (``f32``, ``f16`` or ``bf16``: the matrix weights
and the embedding; norm weights f32, as rayo keeps them) with a KV cache in
its ``kvDtype``, prefills a prompt, and decodes greedily twice, timing every
token:

- ``eager``: each step launched op by op from Python, attention over exactly
  the tokens cached so far;
- ``graph``: one decode step captured once in a CUDA graph on a static KV cache
  (attention over the cache's capacity, masked past the position) and replayed
  per token, the token and the position fed back on the device.

The first token comes from the prefill's last row; each later one is timed
on the host from the start of its step until its id has been read back
(``.item()``), as rayo's ``generate`` yields ids to its caller. Activations,
norms, softmax and logits are fp32 with TF32 off, as in rayo; with half
weights each product takes its input rounded to the weights' dtype and
returns fp32 (cuBLAS accumulates in fp32), so that the products read the
half weights as they are stored, as rayo's do. Writes JSON (``--out``) with ms per token and the tokens of
both runs (``newTokens`` each, the first included) and, beside it, the logits
of the prompt's last position as little-endian float32 (``--logits``). With
half weights or cache a third run comes first, ``reference``: rayo's
arithmetic (fp32 products on the widened weights, the cache rounded as
stored), eager and untimed for comparison; the logits are its. Without torch or CUDA the output says so
(``available: false``) and the script exits 0.

    python3 torch_decode_baseline.py --model DIR --request request.json --out torch-decode.json
"""

import argparse
import json
import math
import os
import struct
import sys
import time

from rayo_torch import (
    add_device_option,
    capture_graph,
    error_text,
    open_baseline,
    quantile,
    sync,
    warm_on_side_stream,
    write_available,
)

SCHEMA_IN = "rayo-decode-request/1"
SCHEMA_OUT = "rayo-decode-torch/1"

DTYPES = {"F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2)}
# The request's dtypes, as torch names them.
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}



# Bytes of f32 prompt scores the prefill may store at once (see Llama.prefill).
PREFILL_SCORES_BYTES = 8 << 30

def is_norm(name):
    return name.endswith("norm.weight")


def safetensors_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        return sorted({os.path.join(model_dir, name) for name in weight_map.values()})
    return [os.path.join(model_dir, "model.safetensors")]


def load_safetensors(torch, path, device, into, weight_dtype):
    """Reads one safetensors file tensor by tensor, straight to `device`: norm weights as fp32,
    the rest as `weight_dtype`."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        base = 8 + header_len
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            dtype, width = DTYPES[entry["dtype"]]
            start, end = entry["data_offsets"]
            f.seek(base + start)
            raw = bytearray(f.read(end - start))
            host = torch.frombuffer(raw, dtype=getattr(torch, dtype)) if raw else torch.empty(0)
            target = torch.float32 if is_norm(name) else weight_dtype
            into[name] = host.reshape(entry["shape"]).to(device=device, dtype=target)


class Llama:
    """A Llama-family decoder in plain tensor code: RMSNorm, rotate-half RoPE, GQA, SwiGLU."""

    def __init__(self, torch, config, weights, capacity, device, kv_dtype, exact=False):
        self.torch = torch
        self.F = torch.nn.functional
        self.c = config
        # exact: rayo's arithmetic on half weights and caches, for checking tokens rather than
        # timing: every product in fp32 on the weights widened once, the cache stored in its
        # dtype (written rounded, as rayo writes it) and widened when read.
        self.exact = exact
        self.w = {n: t.float() for n, t in weights.items()} if exact else weights
        self.dim = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads", self.heads)
        self.head_dim = self.dim // self.heads
        self.layers = config["num_hidden_layers"]
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.capacity = capacity
        theta = float(config.get("rope_theta", 10000.0))
        half = self.head_dim // 2
        inv = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float64, device=device) * 2 / self.head_dim))
        angles = torch.arange(capacity, dtype=torch.float64, device=device)[:, None] * inv[None, :]
        self.cos = angles.cos().float()
        self.sin = angles.sin().float()
        head = "lm_head.weight"
        self.lm_head = self.w[head] if head in self.w else self.w["model.embed_tokens.weight"]
        shape = (self.layers, self.kv_heads, capacity, self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=kv_dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=kv_dtype, device=device)
        self.positions = torch.arange(capacity, device=device)

    def layer(self, i, name):
        return self.w["model.layers.%d.%s" % (i, name)]

    def linear(self, x, weight):
        """x·weightᵀ in fp32; a half weight is read as stored, its input rounded to its dtype."""
        if weight.dtype == self.torch.float32:
            return self.F.linear(x, weight)
        return self.F.linear(x.to(weight.dtype), weight).float()

    def cached(self, q, cache):
        """q in the cache's dtype, so that the attention's products read the cache as stored."""
        return q if self.exact else q.to(cache.dtype)

    def kv(self, rows):
        """Cached rows as the attention's products take them: widened in the exact model."""
        return rows.float() if self.exact else rows

    def norm(self, x, weight):
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rope(self, x, cos, sin):
        """x [T, heads, d] rotated at the positions of `cos`/`sin` [T, d/2]."""
        half = self.head_dim // 2
        a, b = x[..., :half], x[..., half:]
        cos, sin = cos[:, None, :], sin[:, None, :]
        return self.torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    def forward(self, ids, cos, sin, write, attend):
        """Logits of tokens `ids` [T]; see forward_hidden."""
        h = self.forward_hidden(ids, cos, sin, write, attend)
        return self.linear(self.norm(h, self.w["model.norm.weight"]), self.lm_head)

    def forward_hidden(self, ids, cos, sin, write, attend):
        """Hidden states of tokens `ids` [T]; `write(i, k, v)` stores their keys and values of
        layer i, `attend(i, q)` attends the queries q [T, heads, d] to the cache."""
        F = self.F
        linear = self.linear
        h = self.w["model.embed_tokens.weight"][ids].float()
        for i in range(self.layers):
            x = self.norm(h, self.layer(i, "input_layernorm.weight"))
            t = x.shape[0]
            q = linear(x, self.layer(i, "self_attn.q_proj.weight")).view(t, self.heads, self.head_dim)
            k = linear(x, self.layer(i, "self_attn.k_proj.weight")).view(t, self.kv_heads, self.head_dim)
            v = linear(x, self.layer(i, "self_attn.v_proj.weight")).view(t, self.kv_heads, self.head_dim)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            write(i, k, v)
            attn = attend(i, q).reshape(t, self.dim)
            h = h + linear(attn, self.layer(i, "self_attn.o_proj.weight"))
            x = self.norm(h, self.layer(i, "post_attention_layernorm.weight"))
            gate = linear(x, self.layer(i, "mlp.gate_proj.weight"))
            up = linear(x, self.layer(i, "mlp.up_proj.weight"))
            h = h + linear(F.silu(gate) * up, self.layer(i, "mlp.down_proj.weight"))
        return h

    def grouped(self, q):
        """[T, heads, d] → [kv_heads, T·group, d]: the query heads of one KV head together."""
        t = q.shape[0]
        group = self.heads // self.kv_heads
        return q.view(t, self.kv_heads, group, self.head_dim).permute(1, 0, 2, 3).reshape(
            self.kv_heads, t * group, self.head_dim
        )

    def ungrouped(self, out, t):
        group = self.heads // self.kv_heads
        return out.view(self.kv_heads, t, group, self.head_dim).permute(1, 0, 2, 3).reshape(
            t, self.heads, self.head_dim
        )

    def prefill(self, ids):
        """Causal attention over the prompt; fills the cache rows [0, T)."""
        torch = self.torch
        t = ids.shape[0]
        scale = 1.0 / math.sqrt(self.head_dim)
        mask = torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)
        group = self.heads // self.kv_heads

        def write(i, k, v):
            self.k_cache[i, :, :t] = k.transpose(0, 1)  # assignment rounds to the cache's dtype
            self.v_cache[i, :, :t] = v.transpose(0, 1)

        # The [kv, g, T, T] scores of a long prompt do not fit (137 GB in f32 at 32,768 tokens):
        # past PREFILL_SCORES_BYTES the prompt attends through SDPA, which never stores them.
        fused = self.heads * t * t * 4 > PREFILL_SCORES_BYTES

        def attend(i, q):
            k = self.kv(self.k_cache[i, :, :t])
            v = self.kv(self.v_cache[i, :, :t])
            qg = self.cached(q, k).view(t, self.kv_heads, group, self.head_dim).permute(1, 2, 0, 3)  # [kv, g, T, d]
            if fused:
                # Each kv head repeated for its group (query head h reads kv head h // group), made
                # contiguous so that SDPA takes its flash or memory-efficient kernel.
                heads = qg.reshape(1, self.heads, t, self.head_dim)
                kr = k.repeat_interleave(group, dim=0)[None].to(heads.dtype)
                vr = v.repeat_interleave(group, dim=0)[None].to(heads.dtype)
                out = self.F.scaled_dot_product_attention(heads, kr, vr, is_causal=True, scale=scale)
                return out.float()[0].view(self.kv_heads, group, t, self.head_dim).permute(2, 0, 1, 3).reshape(
                    t, self.heads, self.head_dim
                )
            scores = torch.matmul(qg, k[:, None].transpose(-1, -2)).float() * scale  # [kv, g, T, T]
            probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
            out = torch.matmul(self.cached(probs, v), v[:, None]).float()  # [kv, g, T, d]
            return out.permute(2, 0, 1, 3).reshape(t, self.heads, self.head_dim)

        return self.forward(ids, self.cos[:t], self.sin[:t], write, attend)

    def step_eager(self, token, pos):
        """One token at host position `pos`: attention over exactly pos + 1 cached rows."""
        torch = self.torch
        scale = 1.0 / math.sqrt(self.head_dim)
        ids = token.view(1)

        def write(i, k, v):
            self.k_cache[i, :, pos] = k[0]
            self.v_cache[i, :, pos] = v[0]

        def attend(i, q):
            k = self.kv(self.k_cache[i, :, : pos + 1])
            v = self.kv(self.v_cache[i, :, : pos + 1])
            qg = self.cached(self.grouped(q), k)
            scores = torch.empty((self.kv_heads, qg.shape[1], pos + 1), dtype=k.dtype, device=q.device)
            s = torch.baddbmm(scores, qg, k.transpose(1, 2), beta=0, alpha=scale).float()
            return self.ungrouped(torch.bmm(self.cached(s.softmax(-1), v), v).float(), 1)

        return self.forward(ids, self.cos[pos : pos + 1], self.sin[pos : pos + 1], write, attend)[0]

    def step_static(self, token, pos):
        """One token at device position `pos` ([1] long): shapes fixed, attention over the whole
        cache with the rows past `pos` masked, so that the step can be captured once."""
        torch = self.torch
        scale = 1.0 / math.sqrt(self.head_dim)
        ids = token.view(1)
        cos = self.cos.index_select(0, pos)
        sin = self.sin.index_select(0, pos)
        hidden = self.positions > pos  # [capacity]

        def write(i, k, v):
            self.k_cache[i].index_copy_(1, pos, self.cached(k, self.k_cache).transpose(0, 1))
            self.v_cache[i].index_copy_(1, pos, self.cached(v, self.v_cache).transpose(0, 1))

        def attend(i, q):
            k, v = self.k_cache[i], self.v_cache[i]
            s = torch.bmm(self.cached(self.grouped(q), k), k.transpose(1, 2)).float() * scale
            s = s.masked_fill(hidden, float("-inf"))
            return self.ungrouped(torch.bmm(self.cached(s.softmax(-1), v), v).float(), 1)

        return self.forward(ids, cos, sin, write, attend)[0]


def decode_eager(torch, model, first, start, count):
    token = first
    tokens, times = [], []
    for n in range(count):
        begin = time.perf_counter()
        logits = model.step_eager(token, start + n)
        token = logits.argmax()
        tokens.append(token.item())  # waits for the step, as rayo's generate reads each id
        times.append((time.perf_counter() - begin) * 1e3)
    return tokens, times


def decode_graph(torch, model, first, start, count):
    static_token = first.clone().view(1)
    static_pos = torch.tensor([start], dtype=torch.long, device=first.device)

    def step():
        logits = model.step_static(static_token, static_pos)
        token = logits.argmax().view(1)
        # Feed the token and the next position back on the device: a replay needs nothing from the host.
        static_token.copy_(token)
        static_pos.add_(1)
        return logits, token

    # Warm up on a side stream, then rewind what the warm-up advanced.
    warm_on_side_stream(torch, lambda _i: step())
    static_token.copy_(first.view(1))
    static_pos.fill_(start)
    graph, (static_logits, static_next) = capture_graph(torch, step)
    # The capture ran nothing: rewind again before the timed replays.
    static_token.copy_(first.view(1))
    static_pos.fill_(start)
    torch.cuda.synchronize()
    tokens, times = [], []
    for _ in range(count):
        begin = time.perf_counter()
        graph.replay()
        tokens.append(static_next.item())
        times.append((time.perf_counter() - begin) * 1e3)
    del static_logits
    return tokens, times


def summary(tokens, times, warmup):
    timed = sorted(times[warmup:])
    median = quantile(timed, 0.5)
    return {
        "msPerToken": median,
        "meanMsPerToken": sum(timed) / len(timed),
        "p10Ms": quantile(timed, 0.1),
        "p90Ms": quantile(timed, 0.9),
        "tokensPerSecond": 1000.0 / median,
        "tokensTimed": len(timed),
        "tokens": tokens,
    }


def checkpoint_request_parser(description):
    """The options of a baseline that times a checkpoint for a request of rayo's decode benchmark."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", required=True, help="folder with config.json and the safetensors weights")
    parser.add_argument("--request", required=True, help="the request file rayo's decode benchmark wrote")
    parser.add_argument("--out", required=True, help="where to write the results (JSON)")
    return parser


def open_checkpoint_request(parser, argv, schema_in, schema_out, label):
    """Adds --device last, parses `argv` and opens the baseline (see open_baseline).

    Returns (args, request, torch, device, config), config being the
    checkpoint's config.json, or the exit code to stop with.
    """
    add_device_option(parser)
    args = parser.parse_args(argv)
    opened = open_baseline(args.request, args.device, schema_in, schema_out, label, "request", args.out, {})
    if isinstance(opened, int):
        return opened
    request, torch, device = opened
    with open(os.path.join(args.model, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return args, request, torch, device, config


def main(argv=None):
    parser = checkpoint_request_parser("Times greedy decoding of a Llama checkpoint in PyTorch.")
    parser.add_argument("--logits", default="", help="where to write the first step's logits (float32)")
    opened = open_checkpoint_request(parser, argv, SCHEMA_IN, SCHEMA_OUT, "torch decode baseline")
    if isinstance(opened, int):
        return opened
    args, request, torch, device, config = opened

    dtypes = {}
    for key in ("dtype", "kvDtype"):
        name = request.get(key, "f32")
        if name not in TORCH_DTYPES:
            raise SystemExit("request %s must be one of %s, got %r" % (key, ", ".join(TORCH_DTYPES), name))
        dtypes[key] = getattr(torch, TORCH_DTYPES[name])
    weights = {}
    start = time.perf_counter()
    for path in safetensors_files(args.model):
        load_safetensors(torch, path, device, weights, dtypes["dtype"])
    load_ms = (time.perf_counter() - start) * 1e3
    prompt = [int(t) for t in request["prompt"]]
    new_tokens = int(request["newTokens"])
    warmup = int(request.get("warmupTokens", 0))
    capacity = len(prompt) + max(new_tokens, 4)
    model = Llama(torch, config, weights, capacity, device, dtypes["kvDtype"])
    weight_bytes = sum(t.numel() * t.element_size() for t in weights.values())
    half = dtypes["dtype"] != torch.float32 or dtypes["kvDtype"] != torch.float32
    methods = ("eager", "graph") if device.type == "cuda" else ("eager",)
    if half:
        # PyTorch's half products round their inputs to half, rayo's widen the weights and keep
        # activations fp32: greedy tokens part after some dozens. The reference runs rayo's
        # arithmetic (untimed, first), and its tokens and logits are what rayo is checked against.
        methods = ("reference",) + methods
    models = {"reference": Llama(torch, config, weights, capacity, device, dtypes["kvDtype"], exact=True)} if half else {}

    results = {}
    logits0 = None
    with torch.no_grad():
        ids = torch.tensor(prompt, dtype=torch.long, device=device)
        for method in methods:
            try:
                begin = time.perf_counter()
                logits = models.get(method, model).prefill(ids)[-1]
                first = logits.argmax()
                first_id = first.item()
                prefill_ms = (time.perf_counter() - begin) * 1e3
                run = decode_graph if method == "graph" else decode_eager
                tokens, times = run(torch, models.get(method, model), first, len(prompt), new_tokens - 1)
                results[method] = {"prefillMs": prefill_ms, **summary([first_id] + tokens, times, warmup)}
                if logits0 is None:
                    logits0 = logits.float().cpu()
            except Exception as error:  # noqa: BLE001 - one way failing must not hide the other
                results[method] = {"error": error_text(error)}
            sync(torch, device)
    models.clear()
    if args.logits and logits0 is not None:
        with open(args.logits, "wb") as f:
            f.write(struct.pack("<%df" % logits0.numel(), *logits0.tolist()))

    write_available(
        args.out,
        SCHEMA_OUT,
        torch,
        device,
        {
            "weightBytes": weight_bytes,
            "loadMs": load_ms,
            "promptTokens": len(prompt),
            "newTokens": new_tokens,
            "dtype": request.get("dtype", "f32"),
            "kvDtype": request.get("kvDtype", "f32"),
            "attention": "baddbmm+softmax+bmm over the cached rows (eager); bmm over the static cache, masked (graph)",
            "results": results,
        },
    )
    for method, r in results.items():
        if "error" in r:
            print("torch %s: %s" % (method, r["error"]), file=sys.stderr)
        else:
            print("torch %s: %.3f ms/token (%.1f tokens/s)" % (method, r["msPerToken"], r["tokensPerSecond"]),
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
