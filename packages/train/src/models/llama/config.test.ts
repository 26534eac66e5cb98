import { InvalidArgumentError } from '@rayo/core';
import {
  FAMILY_CONFIGS,
  llama2Config,
  llama31Transformers5Config,
  llama32Config,
  mistral01Config,
  mistral03Config,
  qwen3Config,
  qwen25Config,
  smolLM2Config,
  tinyLlamaConfig,
} from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { checkSlidingWindow, parseLlamaConfig } from './config.js';

/** The InvalidArgumentError `call` throws; its argument must be `field` and its message match. */
function refusal(call: () => unknown, field: string, message: RegExp): void {
  let error: unknown;
  try {
    call();
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(InvalidArgumentError);
  expect((error as InvalidArgumentError).argument).toBe(field);
  expect((error as Error).message).toMatch(message);
}

describe('parseLlamaConfig', () => {
  it('reads the Hugging Face fields and derives the head dimension', () => {
    expect(parseLlamaConfig(tinyLlamaConfig())).toEqual({
      hiddenSize: 64,
      intermediateSize: 91,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      numHiddenLayers: 2,
      vocabSize: 97,
      headDim: 16,
      ropeTheta: 1000,
      rmsNormEps: 1e-5,
      tieWordEmbeddings: false,
      maxPositionEmbeddings: 32,
      family: 'llama',
      qkvBias: false,
      outputBias: false,
      qkNorm: false,
    });
  });

  it('applies the transformers defaults for optional fields', () => {
    const c = tinyLlamaConfig();
    for (const field of ['num_key_value_heads', 'rope_theta', 'rms_norm_eps', 'tie_word_embeddings'])
      delete c[field];
    expect(parseLlamaConfig(c)).toMatchObject({
      numKeyValueHeads: 4,
      ropeTheta: 10000,
      rmsNormEps: 1e-6,
      tieWordEmbeddings: false,
    });
  });

  it('takes a config without architectures or model_type as a Llama', () => {
    const c = tinyLlamaConfig();
    delete c.architectures;
    delete c.model_type;
    expect(parseLlamaConfig(c).family).toBe('llama');
  });

  it.each([
    ['hidden_size', { hidden_size: undefined }, /'hidden_size'.*expected a positive integer, got absent/],
    ['intermediate_size', { intermediate_size: 12.5 }, /expected a positive integer, got 12.5/],
    ['num_key_value_heads', { num_key_value_heads: 3 }, /a divisor of num_attention_heads \(4\)/],
    [
      'num_attention_heads',
      { num_attention_heads: 5, num_key_value_heads: 5 },
      /a divisor of hidden_size \(64\)/,
    ],
    ['head_dim', { head_dim: 15 }, /an even head dimension/],
    ['rope_theta', { rope_theta: -1 }, /a finite number >= 1/],
    ['rope_theta', { rope_theta: 0.5 }, /expected a finite number >= 1, got 0.5/],
    ['tie_word_embeddings', { tie_word_embeddings: 'yes' }, /a boolean/],
    ['hidden_act', { hidden_act: 'gelu' }, /"silu"/],
    ['mlp_bias', { mlp_bias: true }, /no MLP biases/],
    ['attention_bias', { attention_bias: 'yes' }, /a boolean/],
    ['rope_interleaved', { rope_interleaved: true }, /rotate-half/],
  ])('rejects a bad %s, naming it', (field, overrides, message) => {
    refusal(() => parseLlamaConfig(tinyLlamaConfig(overrides)), field, message);
  });

  it('rejects something that is not an object', () => {
    expect(() => parseLlamaConfig([1, 2])).toThrow(/config field 'config'/);
  });
});

describe('model families', () => {
  it.each(FAMILY_CONFIGS)('parses the keys of %s', (_label, config) => {
    expect(() => parseLlamaConfig(config())).not.toThrow();
  });

  // [family, qkvBias, outputBias, qkNorm, tieWordEmbeddings, slidingWindow]
  it.each([
    ['Llama 3.2', llama32Config(), ['llama', false, false, false, true, undefined]],
    [
      'Llama 2 with attention_bias',
      llama2Config({ attention_bias: true }),
      ['llama', true, true, false, false, undefined],
    ],
    ['SmolLM2', smolLM2Config(), ['llama', false, false, false, true, undefined]],
    // Qwen2 biases q, k and v whatever its config says; its window is off (use_sliding_window false).
    ['Qwen2.5', qwen25Config(), ['qwen2', true, false, false, true, undefined]],
    ['Qwen3', qwen3Config(), ['qwen3', false, false, true, true, undefined]],
    [
      'Qwen3 with attention_bias',
      qwen3Config({ attention_bias: true }),
      ['qwen3', true, true, true, true, undefined],
    ],
    ['Mistral v0.3', mistral03Config(), ['mistral', false, false, false, false, undefined]],
    ['Mistral v0.1', mistral01Config(), ['mistral', false, false, false, false, 48]],
  ] as const)('switches %s on from its architecture and keys', (_label, json, switches) => {
    const c = parseLlamaConfig(json);
    expect([c.family, c.qkvBias, c.outputBias, c.qkNorm, c.tieWordEmbeddings, c.slidingWindow]).toEqual(
      switches,
    );
  });

  it("takes Mistral's default window where the key is absent", () => {
    const noKey = mistral03Config();
    delete noKey.sliding_window;
    expect(parseLlamaConfig(noKey).slidingWindow).toBe(4096);
  });

  it("honours Qwen's use_sliding_window, max_window_layers and layer_types", () => {
    // Every layer below max_window_layers attends fully: no window binds.
    expect(
      parseLlamaConfig(qwen25Config({ use_sliding_window: true, max_window_layers: 2 })).slidingWindow,
    ).toBe(undefined);
    expect(
      parseLlamaConfig(qwen25Config({ use_sliding_window: true, max_window_layers: 1 })).slidingWindow,
    ).toBe(32);
    expect(
      parseLlamaConfig(qwen25Config({ layer_types: ['full_attention', 'sliding_attention'] })).slidingWindow,
    ).toBe(32);
    expect(
      parseLlamaConfig(
        qwen25Config({ layer_types: ['full_attention', 'full_attention'], use_sliding_window: true }),
      ).slidingWindow,
    ).toBe(undefined);
    refusal(
      () => parseLlamaConfig(qwen25Config({ layer_types: ['full_attention'] })),
      'layer_types',
      /2 entries/,
    );
  });

  it('refuses a context the sliding window would bind, naming sliding_window', () => {
    const config = parseLlamaConfig(mistral01Config());
    expect(() => checkSlidingWindow(config, 48)).not.toThrow();
    refusal(
      () => checkSlidingWindow(config, 49),
      'sliding_window',
      /maxSequence <= sliding_window \(48\).*maxSequence 49/,
    );
  });

  it.each([
    [
      'architectures',
      { architectures: ['GemmaForCausalLM'], model_type: undefined },
      /one of \["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"\], got \["GemmaForCausalLM"\]/,
    ],
    ['architectures', { architectures: 'LlamaForCausalLM' }, /one of/],
    ['model_type', { architectures: undefined, model_type: 'phi3' }, /"llama", "mistral", "qwen2", "qwen3"/],
    ['model_type', { model_type: 'qwen2' }, /"llama" \(architectures says LlamaForCausalLM\)/],
  ])('refuses an unsupported family, naming %s and the supported values', (field, overrides, message) => {
    refusal(() => parseLlamaConfig(tinyLlamaConfig(overrides)), field, message);
  });

  it('refuses attention biases where the family has none or always has them', () => {
    refusal(
      () => parseLlamaConfig(mistral03Config({ attention_bias: true })),
      'attention_bias',
      /MistralForCausalLM has no attention biases/,
    );
    refusal(
      () => parseLlamaConfig(qwen25Config({ attention_bias: false })),
      'attention_bias',
      /Qwen2ForCausalLM always biases q, k and v/,
    );
    refusal(() => parseLlamaConfig(qwen25Config({ use_mrope: true })), 'use_mrope', /multimodal RoPE/);
  });
});

describe('RoPE scaling in a config', () => {
  const llama3 = {
    type: 'llama3',
    factor: 32,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: 64,
  };

  it("reads rope_scaling under 'rope_type' or 'type'", () => {
    expect(parseLlamaConfig(llama32Config())).toMatchObject({ ropeTheta: 500000, ropeScaling: llama3 });
    const legacy = llama32Config();
    const { rope_type: _, ...rest } = legacy.rope_scaling as Record<string, unknown>;
    legacy.rope_scaling = { ...rest, type: 'llama3' };
    expect(parseLlamaConfig(legacy).ropeScaling).toEqual(llama3);
    expect(
      parseLlamaConfig(llama2Config({ rope_scaling: { type: 'linear', factor: 4 } })).ropeScaling,
    ).toEqual({
      type: 'linear',
      factor: 4,
    });
    expect(parseLlamaConfig(llama2Config({ rope_scaling: { rope_type: 'default' } })).ropeScaling).toBe(
      undefined,
    );
  });

  it("reads transformers 5's rope_parameters, base included", () => {
    expect(parseLlamaConfig(llama31Transformers5Config())).toMatchObject({
      ropeTheta: 500000,
      ropeScaling: { ...llama3, factor: 8 },
    });
    const plain = parseLlamaConfig(
      llama2Config({ rope_parameters: { rope_type: 'default', rope_theta: 20000 } }),
    );
    expect(plain.ropeTheta).toBe(20000);
    expect(plain.ropeScaling).toBe(undefined);
    // A rope_theta or rope_scaling beside it that says the same is fine.
    const both = llama31Transformers5Config({
      rope_theta: 500000,
      rope_scaling: {
        rope_type: 'llama3',
        factor: 8,
        low_freq_factor: 1,
        high_freq_factor: 4,
        original_max_position_embeddings: 64,
      },
    });
    expect(parseLlamaConfig(both).ropeScaling).toEqual({ ...llama3, factor: 8 });
  });

  it.each([
    [
      'rope_scaling.rope_type',
      llama2Config({ rope_scaling: { rope_type: 'dynamic', factor: 2 } }),
      /dynamic NTK, YaRN/,
    ],
    [
      'rope_scaling.type',
      llama2Config({ rope_scaling: { type: 'yarn', factor: 4 } }),
      /'default', 'linear' or 'llama3'/,
    ],
    [
      'rope_parameters.rope_type',
      llama2Config({ rope_parameters: { rope_type: 'longrope', rope_theta: 10000 } }),
      /not implemented/,
    ],
    ['rope_scaling.factor', llama2Config({ rope_scaling: { type: 'linear', factor: 0.5 } }), /a number >= 1/],
    ['rope_scaling.factor', llama2Config({ rope_scaling: { type: 'linear' } }), /got absent/],
    [
      'rope_scaling.high_freq_factor',
      llama32Config({
        rope_scaling: {
          rope_type: 'llama3',
          factor: 8,
          low_freq_factor: 4,
          high_freq_factor: 2,
          original_max_position_embeddings: 64,
        },
      }),
      /> low_freq_factor \(4\)/,
    ],
    [
      'rope_scaling.original_max_position_embeddings',
      llama32Config({
        rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4 },
      }),
      /a number > 0, got absent/,
    ],
    [
      'rope_scaling.type',
      llama2Config({ rope_scaling: { type: 'linear', rope_type: 'llama3', factor: 2 } }),
      /rope_type \("llama3"\)/,
    ],
    [
      'rope_theta',
      llama31Transformers5Config({ rope_theta: 10000 }),
      /rope_parameters.rope_theta \(500000\)/,
    ],
    [
      'rope_scaling',
      llama31Transformers5Config({ rope_scaling: { type: 'linear', factor: 8 } }),
      /the scaling of rope_parameters/,
    ],
    [
      'rope_parameters',
      llama2Config({
        rope_parameters: { full_attention: { rope_theta: 1e6 }, sliding_attention: { rope_theta: 1e4 } },
      }),
      /per layer type is not implemented/,
    ],
    [
      'rope_parameters.partial_rotary_factor',
      llama2Config({
        rope_parameters: { rope_type: 'default', rope_theta: 1e4, partial_rotary_factor: 0.5 },
      }),
      /partial RoPE/,
    ],
    ['partial_rotary_factor', llama2Config({ partial_rotary_factor: 0.25 }), /partial RoPE/],
    ['rope_scaling', llama2Config({ rope_scaling: 'llama3' }), /an object or null/],
    ['rope_theta', llama32Config({ rope_theta: 0.5 }), /a finite number >= 1/],
  ])('refuses a bad %s, naming it', (field, config, message) => {
    refusal(() => parseLlamaConfig(config), field, message);
  });
});
