#!/usr/bin/env python3
"""Reference side of rayo's model-family parity harness (``family-parity``).

For each family of the request (a config.json's keys at the real model's
sizes, its layers cut down) it builds the model with ``transformers`` itself
(``AutoConfig.for_model`` and ``AutoModelForCausalLM.from_config``, random
weights from the request's seed), writes it with ``save_pretrained`` twice,
in f32 and in bf16, and runs ``generate(do_sample=False)`` for ``newTokens``
tokens after a prompt of ``promptTokens`` random ids:

- ``f32``: the f32 model as written;
- ``bf16``: the model in f32 on the weights rounded to bf16 (what the bf16
  checkpoint holds, widened), since rayo keeps activations in f32 under bf16
  weights: the tokens rayo must give from the bf16 checkpoint; and
  ``promptRounded``, the same with the prompt's matrix products on
  bf16-rounded inputs, what rayo's tensor-core prefill computes (matmul
  precision 'half'); ``cacheRounded`` and ``promptCacheRounded``, both again
  with every key (after RoPE) and value rounded to bf16 as the cache stores
  them, what rayo's bf16 KV cache (the default under bf16 weights) holds.

RoPE's frequencies are the model's own (the rounded weights are loaded into a
fresh model, so its non-persistent ``inv_freq`` is never rounded). Matrix
products are fp32 with TF32 off. With transformers 5 the RoPE keys are
passed as ``rope_parameters`` (what its configs hold), with 4.x as
``rope_theta`` and ``rope_scaling``. Writes JSON (``--out``): per family the
checkpoint folders, the prompt, and per dtype the tokens and each step's
margin between the two largest logits (a step whose margin is tiny is a
near-tie, where f32 rounding may pick either). Without torch, transformers
or the device the output says so (``available: false``) and the script
exits 0.

    python3 torch_family_parity.py --request request.json --out reference.json
"""

import argparse
import importlib
import os
import sys

from rayo_torch import add_device_option, import_transformers, open_baseline, run_cases, write_available

SCHEMA_IN = "rayo-family-parity-request/1"
SCHEMA_OUT = "rayo-family-parity/1"


def major_version(version):
    return int(version.split(".")[0])


def config_kwargs(config, layers, transformers_major):
    """The family's config keys for its transformers config class: layers cut, RoPE in the version's form."""
    kwargs = dict(config)
    kwargs["num_hidden_layers"] = layers
    if "max_window_layers" in kwargs:
        kwargs["max_window_layers"] = min(kwargs["max_window_layers"], layers)
    kwargs.pop("architectures", None)
    model_type = kwargs.pop("model_type")
    if transformers_major >= 5:
        parameters = {"rope_type": "default", "rope_theta": kwargs.pop("rope_theta", 10000.0)}
        scaling = kwargs.pop("rope_scaling", None)
        if scaling:
            parameters.update(scaling)
            parameters["rope_type"] = scaling.get("rope_type", scaling.get("type", "default"))
            parameters.pop("type", None)
        kwargs["rope_parameters"] = parameters
    return model_type, kwargs


def round_prompt_input(_module, inputs):
    """A Linear's input rounded to bf16 (and widened back) when it holds more than 16 token
    rows: cuda's tensor-core products (shorter ones take the exact GEMV and small-M kernels)."""
    x = inputs[0]
    if x.dim() < 2 or x.shape[-2] <= 16:
        return None
    import torch

    return (x.to(torch.bfloat16).to(x.dtype),) + tuple(inputs[1:])


class RoundedCache:
    """While entered, every key and value a ``DynamicCache`` stores is rounded to bf16 and
    widened back, as rayo's bf16 cache stores rope(k) and v; counts the stores, so that a
    model whose generate takes another cache fails instead of passing unrounded."""

    def __init__(self, torch, transformers):
        self.torch = torch
        self.cls = importlib.import_module(transformers.__name__ + ".cache_utils").DynamicCache
        self.stores = 0

    def __enter__(self):
        torch, cls = self.torch, self.cls
        self.own = "update" in cls.__dict__
        original = cls.update
        rounded = self

        def update(cache, key_states, value_states, *args, **kwargs):
            rounded.stores += 1
            key = key_states.to(torch.bfloat16).to(key_states.dtype)
            value = value_states.to(torch.bfloat16).to(value_states.dtype)
            return original(cache, key, value, *args, **kwargs)

        self.original = original
        cls.update = update
        return self

    def __exit__(self, *exc):
        if self.own:
            self.cls.update = self.original
        else:
            del self.cls.update
        if exc[0] is None and self.stores == 0:
            raise RuntimeError("generate stored nothing through DynamicCache.update: the cache was not rounded")
        return False


def margins_of(step_logits):
    """Per generated step, the largest logit minus the second largest."""
    out = []
    for logits in step_logits:
        top = logits[0].float().topk(2).values
        out.append(float(top[0] - top[1]))
    return out


def greedy(torch, transformers, model, prompt, new_tokens, device):
    """The tokens `generate(do_sample=False)` picks after `prompt`, and each step's logit margin."""
    generation = transformers.GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=new_tokens,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
    )
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_config=generation,
            output_logits=True,
            output_scores=True,
            return_dict_in_generate=True,
        )
    tokens = out.sequences[0, len(prompt) :].tolist()
    step_logits = getattr(out, "logits", None) or out.scores
    return tokens, margins_of(step_logits)


def run_family(torch, transformers, family, index, request, device):
    layers = request["layers"]
    seed = request["seed"] + 1000 * index
    model_type, kwargs = config_kwargs(family["config"], layers, major_version(transformers.__version__))
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).to(device=device, dtype=torch.float32).eval()
    root = request["checkpoints"]
    folders = {dtype: os.path.join(root, "%s-%s" % (family["name"], dtype)) for dtype in request["dtypes"]}
    generator = torch.Generator().manual_seed(seed)
    vocab = family["config"]["vocab_size"]
    prompt = torch.randint(0, vocab, (request["promptTokens"],), generator=generator).tolist()
    runs = {}
    if "f32" in folders:
        model.save_pretrained(folders["f32"])
        tokens, margins = greedy(torch, transformers, model, prompt, request["newTokens"], device)
        runs["f32"] = {"checkpoint": folders["f32"], "tokens": tokens, "margins": margins}
    if "bf16" in folders:
        rounded = {name: t.to(torch.bfloat16).to(torch.float32) for name, t in model.state_dict().items()}
        del model
        # A fresh model takes the rounded weights: its RoPE buffers are computed, never rounded.
        torch.manual_seed(seed)
        reference = transformers.AutoModelForCausalLM.from_config(config).to(device=device, dtype=torch.float32)
        reference.load_state_dict(rounded)
        reference.eval()
        half = transformers.AutoModelForCausalLM.from_config(config).to(dtype=torch.bfloat16)
        half.load_state_dict({name: t.to(torch.bfloat16) for name, t in rounded.items()})
        half.save_pretrained(folders["bf16"])
        del half
        tokens, margins = greedy(torch, transformers, reference, prompt, request["newTokens"], device)
        runs["bf16"] = {"checkpoint": folders["bf16"], "tokens": tokens, "margins": margins}
        # rayo's prompt products on tensor cores take bf16-rounded inputs (matmul precision
        # 'half'): the same model with every Linear's input of more than 16 rows rounded.
        with RoundedCache(torch, transformers):
            cache_tokens, cache_margins = greedy(torch, transformers, reference, prompt, request["newTokens"], device)
        runs["bf16"]["cacheRounded"] = {"tokens": cache_tokens, "margins": cache_margins}
        hooks = [m.register_forward_pre_hook(round_prompt_input) for m in reference.modules() if isinstance(m, torch.nn.Linear)]
        rounded_tokens, rounded_margins = greedy(torch, transformers, reference, prompt, request["newTokens"], device)
        with RoundedCache(torch, transformers):
            both_tokens, both_margins = greedy(torch, transformers, reference, prompt, request["newTokens"], device)
        for hook in hooks:
            hook.remove()
        runs["bf16"]["promptRounded"] = {"tokens": rounded_tokens, "margins": rounded_margins}
        runs["bf16"]["promptCacheRounded"] = {"tokens": both_tokens, "margins": both_margins}
    return {"source": family.get("source"), "prompt": prompt, "runs": runs}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--request", required=True, help="rayo's request (JSON)")
    parser.add_argument("--out", required=True, help="the reference tokens (JSON)")
    add_device_option(parser)
    args = parser.parse_args()

    opened = open_baseline(
        args.request, args.device, SCHEMA_IN, SCHEMA_OUT, "family-parity", "request", args.out, {}
    )
    if isinstance(opened, int):
        return opened
    request, torch, device = opened
    transformers = import_transformers("family-parity", args.out, SCHEMA_OUT, {"families": {}})
    if transformers is None:
        return 0

    os.makedirs(request["checkpoints"], exist_ok=True)
    names = [family["name"] for family in request["families"]]

    def run(name):
        index = names.index(name)
        print("family-parity: %s" % name, file=sys.stderr)
        return run_family(torch, transformers, request["families"][index], index, request, device)

    families = run_cases(torch, device, names, run)
    write_available(
        args.out,
        SCHEMA_OUT,
        torch,
        device,
        {
            "transformers": transformers.__version__,
            "promptTokens": request["promptTokens"],
            "newTokens": request["newTokens"],
            "families": families,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
