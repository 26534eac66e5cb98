#!/usr/bin/env python3
"""PyTorch DDP baseline of rayo's dp-bench.

Trains the causal LM of a request file written by dp-bench (``request.json``
in its output folder) with DistributedDataParallel over NCCL on ``--gpus``
GPUs of this host, one process per GPU (started here with
torch.multiprocessing, as torchrun would), at the request's global batch
split evenly across the ranks (sequences are the second axis), with the same
AdamW hyperparameters, clipping and step count, and writes the training
throughput as JSON to ``--out``:

    python3 torch_ddp_baseline.py --request OUT/request.json --gpus 2 --out torch-2.json

DDP's defaults otherwise (25 MB buckets, gradients all-reduced as backward
produces them). The reported loss of a step is the mean over the ranks
(``all_reduce(AVG)``), as rayo reports it. fp32 with TF32 off. Each step is
timed on the host from its start to the loss readback. When torch, CUDA or
enough GPUs are missing the output says so (``available: false``) and the
script still exits 0.
"""

import argparse
import socket
import sys
import time

from rayo_torch import device_info, fp32_settings, import_torch, open_baseline, spread, unavailable_output, write_json
from torch_train_baseline import build_models, clip_grads, make_adamw, workload

SCHEMA_IN = "rayo-dp-request/1"
SCHEMA_OUT = "rayo-dp-torch/1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, world, request, port, out):
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
        optimizer, impl = make_adamw(torch, params, request["adamw"], device)
        clip = float(request.get("clipNorm", 1))
        warmup, steps = int(request["warmup"]), int(request["steps"])
        cross_entropy = torch.nn.functional.cross_entropy
        times, losses = [], []
        torch.cuda.synchronize()
        for i in range(warmup + steps):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = cross_entropy(ddp(ids), targets)
            loss.backward()
            clip_grads(torch, params, clip, device)
            optimizer.step()
            reported = loss.detach().clone()
            dist.all_reduce(reported, op=dist.ReduceOp.AVG)
            losses.append(reported.item())
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
        if rank == 0:
            percentiles = spread(times)
            write_json(out, {
                "schema": SCHEMA_OUT,
                "available": True,
                **device_info(torch, device),
                "settings": {**fp32_settings(torch), "adamw": impl, "ddp": "bucket_cap_mb=25 (default)"},
                "world": world,
                "tokensPerSecond": 1000 * spec["seq"] * spec["batch"] / percentiles["medianMs"],
                **percentiles,
                "losses": losses,
            })
    finally:
        dist.destroy_process_group()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Times rayo's data-parallel workload with PyTorch DDP.")
    parser.add_argument("--request", required=True, help="the request file dp-bench wrote")
    parser.add_argument("--gpus", type=int, default=2, help="ranks, one per GPU (default 2)")
    parser.add_argument("--out", required=True, help="where to write the result (JSON)")
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
    torch.multiprocessing.spawn(run_rank, args=(args.gpus, request, free_port(), args.out), nprocs=args.gpus, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
