import type { Backend } from '@rayo/core';
import { swiglu } from '../autograd/ops/activation.js';
import { add } from '../autograd/ops/elementwise.js';
import type { RopeOptions } from '../autograd/ops/rope.js';
import type { Tape, Variable } from '../autograd/tape.js';
import { CausalSelfAttention } from './attention.js';
import { Linear } from './linear.js';
import { type InitOptions, Module, rngOf } from './module.js';
import { RMSNorm } from './norm.js';

export interface TransformerBlockOptions extends InitOptions {
  readonly dim: number;
  readonly heads: number;
  /** Width of the MLP (default 4·dim for gelu, 8/3·dim rounded up to a multiple of 8 for swiglu). */
  readonly hidden?: number;
  /** 'swiglu' (default): down(silu(gate(x)) · up(x)); 'gelu': down(gelu(up(x))). */
  readonly mlp?: 'swiglu' | 'gelu';
  readonly rope?: boolean | Pick<RopeOptions, 'theta' | 'layout'>;
  readonly eps?: number;
}

/**
 * A pre-norm causal transformer block: `h = x + attn(norm(x))`,
 * `y = h + mlp(norm(h))`, with RMSNorm. Input is sequence-first, [T, D] or
 * [T, B, D].
 */
export class TransformerBlock extends Module {
  readonly norm1: RMSNorm;
  readonly attn: CausalSelfAttention;
  readonly norm2: RMSNorm;
  readonly mlp: 'swiglu' | 'gelu';
  readonly gate: Linear | undefined;
  readonly up: Linear;
  readonly down: Linear;

  constructor(backend: Backend, options: TransformerBlockOptions) {
    super(backend);
    const { dim, heads } = options;
    const rng = rngOf(options);
    this.mlp = options.mlp ?? 'swiglu';
    const hidden = options.hidden ?? (this.mlp === 'swiglu' ? Math.ceil((8 * dim) / 3 / 8) * 8 : 4 * dim);
    this.norm1 = this.addModule('norm1', new RMSNorm(backend, dim, { eps: options.eps }));
    this.attn = this.addModule(
      'attn',
      new CausalSelfAttention(backend, { dim, heads, rope: options.rope, rng }),
    );
    this.norm2 = this.addModule('norm2', new RMSNorm(backend, dim, { eps: options.eps }));
    const bias = this.mlp === 'gelu';
    this.gate =
      this.mlp === 'swiglu'
        ? this.addModule('gate', new Linear(backend, dim, hidden, { rng, bias }))
        : undefined;
    this.up = this.addModule('up', new Linear(backend, dim, hidden, { rng, bias }));
    this.down = this.addModule('down', new Linear(backend, hidden, dim, { rng, bias }));
  }

  /** One scope of the tape: what the block makes inside is freed once nothing reads it. */
  forward(tape: Tape, x: Variable): Variable {
    return tape.scope(() => {
      const h = add(tape, x, this.attn.forward(tape, this.norm1.forward(tape, x)));
      const n = this.norm2.forward(tape, h);
      const inner = this.gate
        ? swiglu(tape, this.gate.forward(tape, n), this.up.forward(tape, n))
        : this.up.forward(tape, n, 'gelu');
      return add(tape, h, this.down.forward(tape, inner));
    });
  }
}
