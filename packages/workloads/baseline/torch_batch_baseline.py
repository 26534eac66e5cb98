#!/usr/bin/env python3
"""transformers baseline of rayo's batched decode benchmark.

Loads the benchmark's Llama checkpoint (``config.json`` and
``model.safetensors``, seeded weights) with transformers'
``AutoModelForCausalLM`` in the request's ``dtype`` and, for each batch size
of the request, decodes the request's prompts as one static batch through
``generate`` (left padding, greedy, ``newTokens`` tokens each, no early stop):
the way a Python program serves B streams at once without a serving engine.
Each step is timed on the host by a logits processor that synchronises the
device and reads the clock (``generate`` calls it once per step, after the
forward pass): the first interval is the prompt's, the rest are decode steps.
Reports, per batch size, the aggregate decode tokens per second
(B · decode steps / their time) and the median and 90th percentile of the
time per output token (one step gives every stream one token). An untimed
``generate`` of the same length runs first at each size: the first one at a
shape is many times slower throughout (about 45 against 3 ms per step for
two Llama-3.2-1B layers on an H200), its kernels chosen as each attended
length first comes. Without torch,
transformers or CUDA the output says so (``available: false``) and the script
exits 0.

    python3 torch_batch_baseline.py --model DIR --request request.json --out torch-batch.json
"""

import argparse
import json
import os
import sys
import time

from rayo_torch import (
    add_device_option,
    import_transformers,
    open_baseline,
    quantile,
    run_cases,
    write_available,
)

SCHEMA_IN = "rayo-batch-request/1"
SCHEMA_OUT = "rayo-batch-torch/1"
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def step_clock(torch, device):
    """A logits processor that records the time of every step (after the device is done)."""

    class StepClock:
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            if device.type == "cuda":
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())
            return scores

    return StepClock()


def run_batch(torch, transformers, model, prompts, new_tokens, device, pad_id):
    """Greedy generate of `prompts` (lists of ids) as one left-padded batch; the step times in ms."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    ids = ids.to(device)
    mask = mask.to(device)

    def generate(count, clock=None):
        processors = transformers.LogitsProcessorList([clock] if clock else [])
        with torch.inference_mode():
            return model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=count,
                min_new_tokens=count,
                do_sample=False,
                pad_token_id=pad_id,
                logits_processor=processors,
            )

    generate(new_tokens)
    clock = step_clock(torch, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = generate(new_tokens, clock)
    times = [start] + clock.times
    steps = [(b - a) * 1000 for a, b in zip(times, times[1:])]
    prefill_ms, decode = steps[0], steps[1:]
    decode_ms = sum(decode)
    ordered = sorted(decode)
    tokens = out[:, width:].tolist()
    return {
        "batch": len(prompts),
        "prefillMs": prefill_ms,
        "decodeSteps": len(decode),
        "decodeMs": decode_ms,
        "tokensPerSecond": len(prompts) * len(decode) / (decode_ms / 1000) if decode_ms > 0 else None,
        "p50MsPerToken": quantile(ordered, 0.5) if ordered else None,
        "p90MsPerToken": quantile(ordered, 0.9) if ordered else None,
        "tokens": tokens,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the checkpoint folder")
    parser.add_argument("--request", required=True, help="rayo's request (JSON)")
    parser.add_argument("--out", required=True, help="the results (JSON)")
    add_device_option(parser)
    args = parser.parse_args()

    opened = open_baseline(args.request, args.device, SCHEMA_IN, SCHEMA_OUT, "batch-bench", "request", args.out, {})
    if isinstance(opened, int):
        return opened
    request, torch, device = opened
    transformers = import_transformers("batch-bench", args.out, SCHEMA_OUT, {"results": {}})
    if transformers is None:
        return 0

    dtype = getattr(torch, TORCH_DTYPES[request["dtype"]])
    # The class the checkpoint names (seeded configs name it but carry no model_type for the Auto classes).
    with open(os.path.join(args.model, "config.json")) as f:
        architecture = json.load(f).get("architectures", ["AutoModelForCausalLM"])[0]
    model = getattr(transformers, architecture).from_pretrained(args.model, dtype=dtype).to(device)
    model.eval()
    # Seeded weights have no tokenizer: any id pads, the mask hides it.
    pad_id = 0

    def run(name):
        batch = int(name)
        print("batch-bench: transformers generate, batch %d" % batch, file=sys.stderr)
        return run_batch(torch, transformers, model, request["prompts"][:batch], request["newTokens"], device, pad_id)

    results = run_cases(torch, device, [str(b) for b in request["batches"]], run)
    write_available(
        args.out,
        SCHEMA_OUT,
        torch,
        device,
        {
            "transformers": transformers.__version__,
            "dtype": request["dtype"],
            "newTokens": request["newTokens"],
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
