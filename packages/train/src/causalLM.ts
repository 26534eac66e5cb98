import type { Backend, Tensor } from '@rayo/core';
import { reshape } from './autograd/ops/shape.js';
import type { Tape, Variable } from './autograd/tape.js';
import { type BlockCheckpointing, checkBlockCheckpointing, isCheckpointed } from './nn/checkpointing.js';
import { Embedding } from './nn/embedding.js';
import { Linear } from './nn/linear.js';
import { type InitOptions, Module, rngOf } from './nn/module.js';
import { RMSNorm } from './nn/norm.js';
import { TransformerBlock } from './nn/transformer.js';
import type { TrainPrecision } from './precision.js';

export interface CausalLMOptions extends InitOptions {
  readonly vocab: number;
  readonly dim: number;
  readonly heads: number;
  /** Width of each block's SwiGLU MLP (default: the block's). */
  readonly hidden?: number;
  readonly blocks: number;
  /** Standard deviation of the embedding's initialisation (default 0.5). */
  readonly embedStd?: number;
  /** The matrix products' precision policy (default 'f32'; see `Module.setPrecision`). */
  readonly precision?: TrainPrecision;
  /** Which blocks recompute their forward in backward instead of keeping its activations (default 'none'). */
  readonly checkpoint?: BlockCheckpointing;
}

/**
 * A small causal language model: an embedding, pre-norm transformer blocks
 * (RoPE, SwiGLU), a final RMSNorm and a head without bias. Blocks may be
 * checkpointed (`checkpoint`): backward then runs their forward again.
 */
export class CausalLM extends Module {
  readonly embed: Embedding;
  readonly blocks: readonly TransformerBlock[];
  readonly norm: RMSNorm;
  readonly head: Linear;
  #checkpoint: BlockCheckpointing = 'none';

  constructor(backend: Backend, options: CausalLMOptions) {
    super(backend);
    const { vocab, dim, heads, hidden } = options;
    const rng = rngOf(options);
    this.embed = this.addModule(
      'embed',
      new Embedding(backend, vocab, dim, { rng, std: options.embedStd ?? 0.5 }),
    );
    this.blocks = Array.from({ length: options.blocks }, (_, i) =>
      this.addModule(`block${i}`, new TransformerBlock(backend, { dim, heads, hidden, rope: true, rng })),
    );
    this.norm = this.addModule('norm', new RMSNorm(backend, dim));
    this.head = this.addModule('head', new Linear(backend, dim, vocab, { rng, bias: false }));
    this.setPrecision(options.precision ?? 'f32');
    this.setCheckpointing(options.checkpoint ?? 'none');
  }

  /** Which blocks are checkpointed (see `BlockCheckpointing`). */
  get checkpointing(): BlockCheckpointing {
    return this.#checkpoint;
  }

  /** Sets which blocks are checkpointed from the next forward on (a replayed step records it once). */
  setCheckpointing(policy: BlockCheckpointing): this {
    this.#checkpoint = checkBlockCheckpointing(policy, 'CausalLM.setCheckpointing');
    return this;
  }

  /** `ids` [T, B] (i32) → logits [T·B, vocab]. */
  forward(tape: Tape, ids: Tensor): Variable {
    const [t, b] = ids.shape as [number, number];
    let h = this.embed.forward(tape, ids);
    this.blocks.forEach((block, i) => {
      const input = h;
      h = isCheckpointed(this.#checkpoint, i)
        ? tape.checkpoint(() => block.forward(tape, input))
        : block.forward(tape, input);
    });
    return this.head.forward(tape, reshape(tape, this.norm.forward(tape, h), [t * b, this.embed.dim]));
  }
}
