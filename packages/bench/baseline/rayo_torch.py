"""Helpers shared by rayo's PyTorch baselines (kernels, training steps, decoding).

Each baseline script imports this module: it sits beside them in a device
bundle, beside ``torch_baseline.py`` in ``@rayo/bench``'s ``baseline/``
folder, and rayo's launcher puts its folder on ``PYTHONPATH`` for scripts
kept elsewhere. It imports nothing outside the standard library, so that a
machine without torch still gets ``available: false`` instead of an
ImportError.
"""

import json
import math
import sys


class Unavailable(Exception):
    """Why no baseline can run here (no torch, no CUDA): the script reports it and exits 0."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def write_json(path, payload):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")


def read_request(path, schema, label, noun):
    """The JSON file rayo wrote for the script, or None (with a message) when it is not a `schema` file."""
    with open(path, encoding="utf-8") as f:
        request = json.load(f)
    if request.get("schema") != schema:
        print("%s: %s is not a %s %s" % (label, path, schema, noun), file=sys.stderr)
        return None
    return request


def unavailable_output(schema, reason, results):
    return {"schema": schema, "available": False, "reason": reason, "results": results}


def quantile(sorted_values, q):
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def spread(samples):
    """The median, 10th and 90th percentiles of millisecond `samples` (in any order), as rayo reports them."""
    ordered = sorted(samples)
    return {
        "medianMs": quantile(ordered, 0.5),
        "p10Ms": quantile(ordered, 0.1),
        "p90Ms": quantile(ordered, 0.9),
    }


def error_text(error):
    """One line naming the exception, for a result that failed."""
    return ("%s: %s" % (type(error).__name__, error)).split("\n")[0]


def import_torch(device_name):
    """torch and the device to time on, in strict fp32; raises Unavailable when neither can run."""
    try:
        import torch
    except Exception as error:  # noqa: BLE001 - any import failure means no baseline
        raise Unavailable("PyTorch is not installed (import torch: %s)" % error) from error

    device = torch.device(device_name)
    if device.type == "cuda" and not torch.cuda.is_available():
        built = getattr(torch.version, "cuda", None)
        raise Unavailable(
            "CUDA is not available to PyTorch %s (%s)"
            % (torch.__version__, "built with CUDA " + built if built else "a CPU-only build")
        )

    # fp32 means fp32: no TF32 tensor-core shortcuts, so that the numbers compare with rayo's fp32 kernels.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    return torch, device


def add_device_option(parser):
    parser.add_argument("--device", default="cuda", help="torch device (default cuda; cpu only checks the script)")


def open_baseline(request_path, device_name, schema_in, schema_out, label, noun, out_path, empty_results, write=write_json):
    """What every baseline does first: read rayo's request and import torch.

    Returns (request, torch, device), or the exit code to stop with: 2 for a
    request that is not a `schema_in` file, 0 after writing the "unavailable"
    result to `out_path` with `write` when torch or the device cannot run.
    """
    request = read_request(request_path, schema_in, label, noun)
    if request is None:
        return 2
    try:
        torch, device = import_torch(device_name)
    except Unavailable as why:
        print("%s: %s" % (label, why.reason), file=sys.stderr)
        write(out_path, unavailable_output(schema_out, why.reason, empty_results))
        return 0
    return request, torch, device


def import_transformers(label, out_path, schema_out, empty_results):
    """transformers, or None after writing the "unavailable" output (under `empty_results`' key) when it is missing."""
    try:
        import transformers
    except Exception as error:  # noqa: BLE001 - any import failure means no baseline
        reason = "transformers is not installed (import transformers: %s)" % error
        print("%s: %s" % (label, reason), file=sys.stderr)
        write_json(out_path, {"schema": schema_out, "available": False, "reason": reason, **empty_results})
        return None
    return transformers


def run_cases(torch, device, names, run):
    """`run(name)` for each name, in order: a case that fails (out of memory, say) is reported as its
    error while the rest still run; the device's cache is emptied after each."""
    results = {}
    for name in names:
        try:
            results[name] = run(name)
        except Exception as error:  # noqa: BLE001 - one case's failure is reported, the others still run
            results[name] = {"error": error_text(error)}
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def device_info(torch, device):
    """The torch and CUDA versions and the device's name, as every output records them."""
    return {
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
    }


def write_available(path, schema_out, torch, device, fields):
    """Writes the output of a run that happened: available, the device as device_info records it, then `fields`."""
    write_json(path, {"schema": schema_out, "available": True, **device_info(torch, device), **fields})


def fp32_settings(torch):
    """The matmul precision switches in force (all off: fp32 is fp32)."""
    return {
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision()
        if hasattr(torch, "get_float32_matmul_precision")
        else None,
    }


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def warm_on_side_stream(torch, once, count=3):
    """Runs `once(i)` `count` times on a side stream, as CUDA graph capture needs first (library handles,
    workspaces, optimizer state), then waits for it."""
    cuda = torch.cuda
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        for i in range(count):
            once(i)
    cuda.current_stream().wait_stream(side)
    cuda.synchronize()


def capture_graph(torch, record):
    """A CUDA graph of what `record()` launches, and what it returned (the graph's static outputs)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = record()
    return graph, outputs
