#!/usr/bin/env python3
"""PyTorch baseline of rayo's prefill benchmark (decode-bench --prefill).

Loads the checkpoint as torch_decode_baseline.py does (its ``Llama``: fp32
activations, each product taking its input rounded to the half weights' dtype,
cuBLAS accumulating in fp32) and times the prompt of each requested length
until its first token is on the host (time to first token), attention by
``scaled_dot_product_attention`` (causal, grouped-query) restricted to the
flash backend on q, k and v in the weights' half dtype (the math backend for
f32 weights):

- ``eager``: op by op from Python;
- ``compile``: the same prefill under ``torch.compile`` (where it compiles).

The head runs on the last position only (what the first token needs).
Each length runs untimed once and then for half a second more (the GPU's
clocks ramp up under load), then ``repeats`` times; the median is
reported. Also measures the bf16 tensor-core peak: ``torch.matmul`` of two
8192 × 8192 bf16 matrices, median of 10, in TFLOP/s. Writes JSON (``--out``);
without torch or CUDA the output says so (``available: false``).

    python3 torch_prefill_baseline.py --model DIR --request request.json --out torch-prefill.json
"""

import sys
import time

from rayo_torch import error_text, sync, write_available
from torch_decode_baseline import (
    TORCH_DTYPES,
    Llama,
    checkpoint_request_parser,
    load_safetensors,
    open_checkpoint_request,
    safetensors_files,
)

SCHEMA_IN = "rayo-prefill-request/1"
SCHEMA_OUT = "rayo-prefill-torch/1"


WARM_SECONDS = 0.5


def bf16_peak_tflops(torch, device, n=8192, repeats=10):
    """Median TFLOP/s of torch.matmul on two n × n bf16 matrices (cuBLAS, the tensor cores' bf16 rate)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return 2 * n**3 / (times[len(times) // 2] * 1e-3) / 1e12


def sdpa_prefill(torch, model, flash):
    """The prompt's first token id: the model's layers with SDPA attention, the head on the last row."""
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [SDPBackend.FLASH_ATTENTION] if flash else [SDPBackend.MATH]
    # enable_gqa came with torch 2.5.
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    gqa = (major, minor) >= (2, 5)
    half = model.lm_head.dtype

    def run(ids):
        t = ids.shape[0]
        kv = {}

        def write(i, k, v):
            kv[i] = (k, v)

        def attend(i, q):
            k, v = kv.pop(i)
            # [T, heads, d] → [1, heads, T, d]
            qh, kh, vh = (x.transpose(0, 1)[None].to(half) for x in (q, k, v))
            with sdpa_kernel(backends):
                if gqa:
                    out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True)
                else:  # torch before 2.5: the kv heads repeated for their query heads
                    group = model.heads // model.kv_heads
                    kh, vh = (x.repeat_interleave(group, dim=1) for x in (kh, vh))
                    out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
            return out[0].transpose(0, 1).float()

        h = model.forward_hidden(ids, model.cos[:t], model.sin[:t], write, attend)
        last = model.norm(h[-1:], model.w["model.norm.weight"])
        return model.linear(last, model.lm_head).argmax(-1)

    return run


def main(argv=None):
    parser = checkpoint_request_parser("Times a Llama checkpoint's prefill in PyTorch.")
    opened = open_checkpoint_request(parser, argv, SCHEMA_IN, SCHEMA_OUT, "torch prefill baseline")
    if isinstance(opened, int):
        return opened
    args, request, torch, device, config = opened
    dtype = getattr(torch, TORCH_DTYPES[request.get("dtype", "f32")])
    weights = {}
    for path in safetensors_files(args.model):
        load_safetensors(torch, path, device, weights, dtype)
    lengths = [int(n) for n in request["lengths"]]
    repeats = int(request.get("repeats", 3))
    vocab = config["vocab_size"]
    model = Llama(torch, config, weights, max(lengths), device, dtype)
    # No KV cache is written here: the prefill attends over its own keys and values.
    model.k_cache = model.v_cache = None
    flash = dtype != torch.float32 and device.type == "cuda"
    peak = None
    results = {}
    with torch.no_grad():
        if device.type == "cuda":
            try:
                peak = bf16_peak_tflops(torch, device)
            except Exception as error:  # noqa: BLE001
                print("bf16 peak: %s" % error_text(error), file=sys.stderr)
        eager = sdpa_prefill(torch, model, flash)
        methods = {"eager": eager}
        if device.type == "cuda":
            try:
                methods["compile"] = torch.compile(eager, dynamic=False)
            except Exception as error:  # noqa: BLE001
                results["compile"] = {"error": error_text(error)}
        generator = torch.Generator(device="cpu").manual_seed(int(request.get("seed", 0)))
        prompts = {n: torch.randint(0, vocab, (n,), generator=generator).to(device) for n in lengths}
        for method, run in methods.items():
            rows = []
            for n in lengths:
                try:
                    if device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(device)  # this length's peak, as rayo's
                    run(prompts[n]).item()  # untimed: warm-up (and compilation)
                    # More untimed runs for half a second: the GPU's clocks ramp up under load.
                    warm_until = time.perf_counter() + WARM_SECONDS
                    while time.perf_counter() < warm_until:
                        run(prompts[n]).item()
                    times = []
                    for _ in range(repeats):
                        sync(torch, device)
                        start = time.perf_counter()
                        run(prompts[n]).item()
                        times.append((time.perf_counter() - start) * 1e3)
                    times.sort()
                    ms = times[len(times) // 2]
                    peak_memory = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
                    rows.append({"tokens": n, "ttftMs": ms, "tokensPerSecond": n / (ms * 1e-3), "peakBytes": peak_memory})
                except Exception as error:  # noqa: BLE001 - one length failing must not hide the others
                    rows.append({"tokens": n, "error": error_text(error)})
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                print("torch %s prefill %d: %s" % (method, n, rows[-1].get("ttftMs", rows[-1].get("error"))), file=sys.stderr)
            results[method] = {"lengths": rows}
    write_available(
        args.out,
        SCHEMA_OUT,
        torch,
        device,
        {
            "dtype": request.get("dtype", "f32"),
            "attention": "scaled_dot_product_attention, causal, enable_gqa, %s backend" % ("flash" if flash else "math"),
            "bf16PeakTflops": peak,
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
