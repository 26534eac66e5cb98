import { InvalidArgumentError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { parseLlamaConfig } from './config.js';
import { tinyLlamaConfig } from './tinyLlama.testkit.js';

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
    ['rope_theta', { rope_theta: -1 }, /a positive number/],
    ['tie_word_embeddings', { tie_word_embeddings: 'yes' }, /a boolean/],
    ['rope_scaling', { rope_scaling: { type: 'linear', factor: 2 } }, /scaled RoPE is not implemented/],
    ['hidden_act', { hidden_act: 'gelu' }, /"silu"/],
    ['attention_bias', { attention_bias: true }, /no biases/],
  ])('rejects a bad %s, naming it', (field, overrides, message) => {
    const call = () => parseLlamaConfig(tinyLlamaConfig(overrides));
    expect(call).toThrow(InvalidArgumentError);
    expect(call).toThrow(message);
    try {
      call();
    } catch (error) {
      expect((error as InvalidArgumentError).argument).toBe(field);
    }
  });

  it('rejects something that is not an object', () => {
    expect(() => parseLlamaConfig([1, 2])).toThrow(/config field 'config'/);
  });
});
