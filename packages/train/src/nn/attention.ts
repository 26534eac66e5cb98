import { type Backend, formatShape, InvalidArgumentError, ShapeError, type Tensor } from '@rayo/core';
import { flashAttention } from '../autograd/ops/attention.js';
import { add } from '../autograd/ops/elementwise.js';
import { batchedMatmul, transpose } from '../autograd/ops/linalg.js';
import { type RopeOptions, rope } from '../autograd/ops/rope.js';
import { reshape } from '../autograd/ops/shape.js';
import { softmax } from '../autograd/ops/softmax.js';
import type { Tape, Variable } from '../autograd/tape.js';
import { attentionPrecisionOf, flashPrecisionOf } from '../precision.js';
import { Linear } from './linear.js';
import { type InitOptions, Module, rngOf } from './module.js';

export interface AttentionOptions extends InitOptions {
  readonly dim: number;
  readonly heads: number;
  /** Rotary position embedding of queries and keys (default off). */
  readonly rope?: boolean | Pick<RopeOptions, 'theta' | 'layout'>;
  /** Biases on the projections (default false). */
  readonly bias?: boolean;
  /**
   * Attend through the flash kernels (default: where the backend has them);
   * false composes attention from batched products and softmax.
   */
  readonly flash?: boolean;
}

/** Added to the scores of future positions: large enough that softmax gives them 0, finite for WGSL. */
const MASKED = -1e9;

/**
 * Multi-head causal self-attention. Input is sequence-first, [T, D] or
 * [T, B, D] (so that RoPE sees [T, B·heads, headDim] with the position on the
 * first axis). Where the backend has the flash kernels, the projections are
 * viewed as [T, B, heads, headDim] and attend through `flashAttention`
 * forward and backward: no transpose and no [T, T] scores. Elsewhere heads
 * are laid out [B·H, headDim, T] by one transpose per projection; scores are
 * one batched product with the transA flag, a causal mask is added before
 * softmax, and the output comes back with one batched product and one
 * transpose; its two products take the module's precision (the mask, softmax
 * and its gradient stay f32). Under 'bf16' the flash kernels take precision
 * 'half' (bf16 products summed in f32, the softmax and lse in f32); under
 * 'f32' and 'tf32' they compute in f32, and under 'f16' both paths compute
 * in f32 (their 'half' is bf16, less precise than f16 asks).
 */
export class CausalSelfAttention extends Module {
  readonly dim: number;
  readonly heads: number;
  readonly headDim: number;
  readonly q: Linear;
  readonly k: Linear;
  readonly v: Linear;
  readonly o: Linear;
  readonly rope: Pick<RopeOptions, 'theta' | 'layout'> | undefined;
  readonly #masks = new Map<number, Tensor>();
  /** Whether attention runs through the flash kernels (decided once, from the backend). */
  readonly flash: boolean;

  constructor(backend: Backend, options: AttentionOptions) {
    super(backend);
    const { dim, heads } = options;
    if (!Number.isInteger(heads) || heads < 1 || dim % heads !== 0) {
      throw new InvalidArgumentError('heads must divide the model dimension', {
        operation: 'CausalSelfAttention',
        argument: 'heads',
        expected: `a divisor of dim ${dim}`,
        actual: String(heads),
      });
    }
    this.dim = dim;
    this.heads = heads;
    this.headDim = dim / heads;
    if (options.rope && this.headDim % 2 !== 0) {
      throw new InvalidArgumentError('rope needs an even head dimension', {
        operation: 'CausalSelfAttention',
        argument: 'rope',
        expected: 'dim / heads even',
        actual: String(this.headDim),
      });
    }
    const rng = rngOf(options);
    const bias = options.bias ?? false;
    this.q = this.addModule('q', new Linear(backend, dim, dim, { rng, bias }));
    this.k = this.addModule('k', new Linear(backend, dim, dim, { rng, bias }));
    this.v = this.addModule('v', new Linear(backend, dim, dim, { rng, bias }));
    this.o = this.addModule('o', new Linear(backend, dim, dim, { rng, bias }));
    this.rope = options.rope === true ? {} : options.rope || undefined;
    const hasFlash = backend.supports('flashAttention') && backend.supports('flashAttentionBackward');
    if (options.flash && !hasFlash) {
      throw new InvalidArgumentError('the backend lacks the flash attention kernels', {
        operation: 'CausalSelfAttention',
        argument: 'flash',
        expected: `a backend with flashAttention and flashAttentionBackward, or flash false`,
        actual: backend.name,
      });
    }
    this.flash = options.flash ?? hasFlash;
  }

  /** `[T, T]`: 0 on and below the diagonal, a large negative number above. */
  #mask(t: number): Tensor {
    let mask = this.#masks.get(t);
    if (!mask) {
      const data = new Float32Array(t * t);
      for (let i = 0; i < t; i++) data.fill(MASKED, i * t + i + 1, (i + 1) * t);
      mask = this.addBuffer(this.backend.upload(data, [t, t]));
      this.#masks.set(t, mask);
    }
    return mask;
  }

  forward(tape: Tape, x: Variable): Variable {
    const shape = x.shape;
    if ((shape.length !== 2 && shape.length !== 3) || shape[shape.length - 1] !== this.dim) {
      throw new ShapeError('attention input must be sequence-first', {
        operation: 'CausalSelfAttention',
        argument: 'x',
        expected: `[T, ${this.dim}] or [T, B, ${this.dim}]`,
        actual: formatShape(shape),
      });
    }
    const t = shape[0]!;
    const b = shape.length === 3 ? shape[1]! : 1;
    const { dim, heads, headDim } = this;
    const rows = reshape(tape, x, [t * b, dim]);
    const project = (layer: Linear, rotate: boolean): Variable => {
      let z = layer.forward(tape, rows);
      if (rotate && this.rope) {
        z = reshape(tape, rope(tape, reshape(tape, z, [t, b * heads, headDim]), this.rope), [t * b, dim]);
      }
      return z;
    };
    const q = project(this.q, true);
    const k = project(this.k, true);
    const v = project(this.v, false);
    const o = this.flash ? this.#flash(tape, [q, k, v], t, b) : this.#composed(tape, [q, k, v], t, b);
    return reshape(tape, this.o.forward(tape, o), shape);
  }

  /** [T·B, D] rows of q, k and v viewed as [T, B, heads, headDim]: the flash kernels' layout. */
  #flash(tape: Tape, [q, k, v]: readonly [Variable, Variable, Variable], t: number, b: number): Variable {
    const heads = [t, b, this.heads, this.headDim];
    const [qh, kh, vh] = [q, k, v].map((z) => reshape(tape, z, heads)) as [Variable, Variable, Variable];
    // Under 'bf16' the kernels' products take bf16 operands (tensor cores); softmax and lse stay f32.
    const precision = flashPrecisionOf(this.precision);
    return reshape(tape, flashAttention(tape, qh, kh, vh, { precision }), [t * b, this.dim]);
  }

  /** Attention from batched products, softmax and a mask, for backends without the flash kernels. */
  #composed(tape: Tape, qkv: readonly [Variable, Variable, Variable], t: number, b: number): Variable {
    const { dim, heads, headDim } = this;
    // [T·B, D] = [T, B·D] → [B·D, T] = [B·H, headDim, T].
    const [qT, kT, vT] = qkv.map((z) =>
      reshape(tape, transpose(tape, reshape(tape, z, [t, b * dim])), [b * heads, headDim, t]),
    ) as [Variable, Variable, Variable];
    const precision = attentionPrecisionOf(this.precision);
    const scores = batchedMatmul(tape, qT, kT, { transA: true, alpha: 1 / Math.sqrt(headDim), precision });
    const p = softmax(tape, add(tape, scores, tape.constant(this.#mask(t))));
    // Per head: Vᵀ · Pᵀ = (P · V)ᵀ, [headDim, T].
    const oT = batchedMatmul(tape, vT, p, { transB: true, precision });
    return reshape(tape, transpose(tape, reshape(tape, oT, [b * dim, t])), [t * b, dim]);
  }
}
