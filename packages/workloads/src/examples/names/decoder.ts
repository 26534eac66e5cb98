import { InvalidArgumentError, type Tensor } from '@rayo/core';
import type { CausalLM, LlamaLayerWeights } from '@rayo/train';
import { LlamaModel, parseLlamaConfig } from '@rayo/train';

/**
 * The KV-cache decoder of a trained CausalLM: the same network (RMSNorm,
 * rotate-half RoPE with theta 10000, full multi-head attention, SwiGLU, an
 * untied head) as a LlamaModel over copies of its weights, so that sampling
 * runs one decode step per character instead of the whole sequence again.
 * Disposing the decoder leaves the trained model alone.
 */
export function causalLMDecoder(model: CausalLM, maxSequence: number): LlamaModel {
  const backend = model.backend;
  const first = model.blocks[0]!;
  const rope = first.attn.rope;
  if (!rope || rope.layout === 'interleaved' || !first.gate) {
    throw new InvalidArgumentError('only a CausalLM with rotate-half RoPE and SwiGLU is a Llama', {
      operation: 'causalLMDecoder',
      argument: 'model',
      expected: "blocks with rope (layout 'half') and mlp 'swiglu'",
      actual: `rope ${rope ? (rope.layout ?? 'half') : 'none'}, mlp ${first.mlp}`,
    });
  }
  const config = parseLlamaConfig({
    hidden_size: model.embed.dim,
    intermediate_size: first.up.outFeatures,
    num_attention_heads: first.attn.heads,
    num_key_value_heads: first.attn.heads,
    num_hidden_layers: model.blocks.length,
    vocab_size: model.head.outFeatures,
    rms_norm_eps: first.norm1.eps,
    rope_theta: rope.theta ?? 10000,
    tie_word_embeddings: false,
    max_position_embeddings: maxSequence,
  });
  const copies: Tensor[] = [];
  const copy = (t: { value: Tensor }) => {
    const c = backend.copy(t.value);
    copies.push(c);
    return c;
  };
  try {
    const layers: LlamaLayerWeights[] = model.blocks.map((b) => ({
      inputNorm: copy(b.norm1.weight),
      q: copy(b.attn.q.weight),
      k: copy(b.attn.k.weight),
      v: copy(b.attn.v.weight),
      o: copy(b.attn.o.weight),
      postAttentionNorm: copy(b.norm2.weight),
      gate: copy(b.gate!.weight),
      up: copy(b.up.weight),
      down: copy(b.down.weight),
    }));
    return new LlamaModel(
      backend,
      config,
      {
        embedding: copy(model.embed.weight),
        layers,
        norm: copy(model.norm.weight),
        head: copy(model.head.weight),
      },
      { maxSequence },
    );
  } catch (error) {
    for (const c of copies) c.dispose();
    throw error;
  }
}
