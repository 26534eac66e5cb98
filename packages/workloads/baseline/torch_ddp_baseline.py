#!/usr/bin/env python3
"""PyTorch DDP baseline of rayo's dp-bench.

Trains the causal LM of a request file written by dp-bench (``request.json``
in its output folder) with DistributedDataParallel over NCCL on ``--gpus``
GPUs of this host, one process per GPU (started here with
torch.multiprocessing, as torchrun would), at the request's global batch
split evenly across the ranks (sequences are the second axis), with the same
AdamW hyperparameters, clipping and step count, and writes the training
throughput as JSON to ``--out``:

    python3 torch_ddp_baseline.py --request OUT/request.json --gpus 2 --out torch-2.json [--compile]

With ``--compile`` the DDP-wrapped model runs under ``torch.compile`` (its
DDP optimizer splits the graph at the gradient buckets); compilation falls in
the warm-up steps. Eager DDP launches every op from Python, which at this
model's size leaves the GPU waiting on the host; the compiled run is the
stronger baseline. DDP's defaults otherwise (25 MB buckets, gradients all-reduced as backward
produces them). With the request's ``zero`` (dp-bench --zero on) and more
than one rank, AdamW is wrapped in ``ZeroRedundancyOptimizer`` (each rank
updates its share of the parameters and broadcasts it). The reported loss of
a step is the mean over the ranks (``all_reduce(AVG)``), as rayo reports it.
fp32 with TF32 off; a request of ``precision`` bf16 runs the forward and the
loss under ``torch.autocast(dtype=torch.bfloat16)`` (f32 master weights and
AdamW, as rayo's 'bf16' policy). Each step is timed on the host from its
start to the loss readback; the output also gives every rank's peak of
allocated memory (``torch.cuda.max_memory_allocated``). When torch, CUDA or
enough GPUs are missing the output says so (``available: false``) and the
script still exits 0.
"""

import argparse
import socket
import sys
import time

from rayo_torch import device_info, fp32_settings, import_torch, open_baseline, spread, unavailable_output, write_json
from torch_train_baseline import autocast_for, build_models, clip_grads, make_adamw, workload

SCHEMA_IN = "rayo-dp-request/1"
SCHEMA_OUT = "rayo-dp-torch/1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, world, request, port, out, compiled):
    torch, _ = import_torch("cuda")  # per process: the fp32 switches are process-wide
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    try:
        spec = request["spec"]
        seed = int(request.get("seed", 0))
        torch.manual_seed(seed)
        model, (ids, targets), _, _ = workload(torch, device, spec, build_models(torch), torch.Generator().manual_seed(seed))
        share = spec["batch"] // world
        columns = slice(rank * share, (rank + 1) * share)
        ids = ids[:, columns].contiguous()
        targets = targets.view(spec["seq"], spec["batch"])[:, columns].reshape(-1).contiguous()
        ddp = DistributedDataParallel(model, device_ids=[rank], broadcast_buffers=False)
        params = list(ddp.parameters())
        forward = torch.compile(ddp) if compiled else ddp
        zero = bool(request.get("zero")) and world > 1
        if zero:
            optimizer, impl = make_zero_adamw(torch, params, request["adamw"])
        else:
            optimizer, impl = make_adamw(torch, params, request["adamw"], device)
        clip = float(request.get("clipNorm", 1))
        warmup, steps = int(request["warmup"]), int(request["steps"])
        cross_entropy = torch.nn.functional.cross_entropy
        times, losses = [], []
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        for i in range(warmup + steps):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with autocast_for(torch, device, spec):
                loss = cross_entropy(forward(ids), targets)
            loss.backward()
            clip_grads(torch, params, clip, device)
            optimizer.step()
            reported = loss.detach().clone()
            dist.all_reduce(reported, op=dist.ReduceOp.AVG)
            losses.append(reported.item())
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
        peak = torch.tensor([float(torch.cuda.max_memory_allocated(device))], dtype=torch.float64, device=device)
        peaks = [torch.zeros_like(peak) for _ in range(world)]
        dist.all_gather(peaks, peak)
        if rank == 0:
            percentiles = spread(times)
            write_json(out, {
                "schema": SCHEMA_OUT,
                "available": True,
                **device_info(torch, device),
                "settings": {
                    **fp32_settings(torch),
                    "adamw": impl,
                    "ddp": "bucket_cap_mb=25 (default)",
                    "precision": spec.get("precision", "f32"),
                    "autocast": "bf16 around forward and loss" if spec.get("precision") == "bf16" else "none",
                    "zero": zero,
                    "compile": compiled,
                },
                "world": world,
                "peakBytes": [int(p.item()) for p in peaks],
                "tokensPerSecond": 1000 * spec["seq"] * spec["batch"] / percentiles["medianMs"],
                **percentiles,
                "losses": losses,
            })
    finally:
        dist.destroy_process_group()


def make_zero_adamw(torch, params, hp):
    """rayo's AdamW sharded by ZeroRedundancyOptimizer; fused where this torch has it, else foreach, else the loop."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    kwargs = dict(lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"], weight_decay=hp["weightDecay"])
    for extra in ({"fused": True}, {"foreach": True}, {}):
        try:
            optimizer = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, **kwargs, **extra)
            return optimizer, "ZeroRedundancyOptimizer(AdamW%s)" % ("" if not extra else ", " + ", ".join(extra))
        except (TypeError, RuntimeError, ValueError):
            continue
    raise RuntimeError("ZeroRedundancyOptimizer(torch.optim.AdamW) could not be created")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Times rayo's data-parallel workload with PyTorch DDP.")
    parser.add_argument("--request", required=True, help="the request file dp-bench wrote")
    parser.add_argument("--gpus", type=int, default=2, help="ranks, one per GPU (default 2)")
    parser.add_argument("--out", required=True, help="where to write the result (JSON)")
    parser.add_argument("--compile", action="store_true", help="run the DDP model under torch.compile")
    args = parser.parse_args(argv)

    opened = open_baseline(args.request, "cuda", SCHEMA_IN, SCHEMA_OUT, "torch ddp baseline", "request", args.out, [])
    if isinstance(opened, int):
        return opened
    request, torch, _ = opened
    if torch.cuda.device_count() < args.gpus:
        reason = "%d GPUs asked for, %d visible" % (args.gpus, torch.cuda.device_count())
        print("torch ddp baseline: " + reason, file=sys.stderr)
        write_json(args.out, unavailable_output(SCHEMA_OUT, reason, []))
        return 0
    torch.multiprocessing.spawn(
        run_rank, args=(args.gpus, request, free_port(), args.out, args.compile), nprocs=args.gpus, join=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
