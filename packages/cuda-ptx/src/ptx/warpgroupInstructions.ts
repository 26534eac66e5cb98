import { describeValue } from './errors.js';
import type { Vec4 } from './instructionTypes.js';
import { MatrixInstructions } from './matrixInstructions.js';
import type { F32, Operand, Pred, R32, R64 } from './operands.js';
import { isWgmmaN, type WgmmaDescriptorFields, type WgmmaN, wgmmaDescriptorFlags } from './wgmmaLayout.js';

/** The wgmma instructions exist on sm_90a only: arch-specific, not carried forward to later GPUs. */
const WGMMA_TARGET = 'sm_90a';

/**
 * Input types of `wgmma.mma_async` with f32 accumulators that the builder
 * emits: 16-bit types take 16 of K an instruction (m64nNk16), tf32 (f32 bits,
 * of which the tensor cores use the top 19) takes 8 (m64nNk8), K-major only.
 */
export type WgmmaInputType = 'bf16' | 'f16' | 'tf32';

export interface WgmmaOptions {
  /**
   * `scale-d`: accumulate into D (true, the default) or overwrite it (false,
   * the first k step of a tile); a predicate decides at run time.
   */
  readonly accumulate?: boolean | Pred;
  /** Negate A or B (`imm-scale-a` / `imm-scale-b` of −1). */
  readonly negateA?: boolean;
  readonly negateB?: boolean;
  /**
   * `imm-trans-a` / `imm-trans-b`: the tile in shared memory is M- (N-)
   * major rather than K-major. A from registers cannot be transposed.
   */
  readonly transposeA?: boolean;
  readonly transposeB?: boolean;
}

/**
 * The sm_90a warpgroup MMA: `wgmma.mma_async` over shared-memory tiles
 * named by matrix descriptors (wgmmaLayout.ts), its fence, commit and wait,
 * and the proxy fence that makes ordinary shared-memory stores visible to it.
 * Every thread of the warpgroup (4 consecutive warps, 128 threads) executes
 * each of them.
 */
export abstract class WarpgroupInstructions extends MatrixInstructions {
  /**
   * `wgmma.mma_async.sync.aligned.m64nNkK.f32.type.type d, a, b-desc, scale-d, ±1, ±1{, trans-a}, trans-b`
   * (K = 16, or 8 and no transposes for tf32):
   * D (64×N, N/2 f32 registers a thread) = A·B + D. A is a descriptor
   * (`.b64` register) or, from registers, 4 `.b32` a thread; B a descriptor.
   * Asynchronous: read D only after `wgmmaCommitGroup` and `wgmmaWaitGroup`.
   */
  wgmmaMmaAsync<D extends readonly F32[]>(
    n: WgmmaN,
    type: WgmmaInputType,
    d: D,
    a: R64 | Vec4<R32>,
    b: R64,
    opts: WgmmaOptions = {},
  ): D {
    const call = 'wgmmaMmaAsync';
    this.#requireSm90a(call);
    if (!isWgmmaN(n)) {
      throw this.check.error(call, 'unsupported wgmma shape', {
        argument: 'n',
        expected: 'a multiple of 8 in 8 .. 256',
        actual: describeValue(n),
      });
    }
    this.check.oneOf(call, 'type', type, ['bf16', 'f16', 'tf32']);
    const tf32 = type === 'tf32';
    if (tf32 && (opts.transposeA || opts.transposeB)) {
      throw this.check.error(call, 'tf32 operands are K-major only', {
        argument: opts.transposeA ? 'opts.transposeA' : 'opts.transposeB',
        expected: 'false for tf32',
        actual: 'true',
      });
    }
    if (!Array.isArray(d) || d.length !== n / 2) {
      throw this.check.error(call, 'wrong fragment register count', {
        argument: 'd',
        expected: `${n / 2} registers (m64n${n}k16, f32)`,
        actual: Array.isArray(d) ? `${d.length} registers` : describeValue(d),
      });
    }
    const dText = `{${d.map((r, i) => this.check.reg(call, `d[${i}]`, r, 'f32')).join(', ')}}`;
    const fromRegisters = Array.isArray(a);
    let aText: string;
    if (fromRegisters) {
      if (a.length !== 4) {
        throw this.check.error(call, 'wrong fragment register count', {
          argument: 'a',
          expected: '4 registers, or a descriptor',
          actual: `${a.length} registers`,
        });
      }
      if (opts.transposeA) {
        throw this.check.error(call, 'A from registers cannot be transposed', {
          argument: 'opts.transposeA',
          expected: 'false with A in registers',
          actual: 'true',
        });
      }
      aText = `{${a.map((r, i) => this.check.reg(call, `a[${i}]`, r, 'u32')).join(', ')}}`;
    } else aText = this.check.reg(call, 'a', a, 'u64');
    const bText = this.check.reg(call, 'b', b, 'u64');
    const accumulate = opts.accumulate ?? true;
    const scaleD =
      typeof accumulate === 'boolean'
        ? accumulate
          ? '1'
          : '0'
        : this.check.reg(call, 'opts.accumulate', accumulate, 'pred');
    const imm = (flag: boolean | undefined) => (flag ? '1' : '0');
    const scales = `${opts.negateA ? '-1' : '1'}, ${opts.negateB ? '-1' : '1'}`;
    // tf32 has no transpose immediates.
    const trans = tf32
      ? ''
      : fromRegisters
        ? `, ${imm(opts.transposeB)}`
        : `, ${imm(opts.transposeA)}, ${imm(opts.transposeB)}`;
    this.emit(
      `wgmma.mma_async.sync.aligned.m64n${n}k${tf32 ? 8 : 16}.f32.${type}.${type} ${dText}, ${aText}, ${bText}, ${scaleD}, ${scales}${trans}`,
    );
    return d;
  }

  /** `wgmma.fence.sync.aligned`: orders register writes to A and D before the next wgmma.mma_async. */
  wgmmaFence(): void {
    this.#requireSm90a('wgmmaFence');
    this.emit('wgmma.fence.sync.aligned');
  }

  /** `wgmma.commit_group.sync.aligned`: the wgmma.mma_async operations so far form one group. */
  wgmmaCommitGroup(): void {
    this.#requireSm90a('wgmmaCommitGroup');
    this.emit('wgmma.commit_group.sync.aligned');
  }

  /** `wgmma.wait_group.sync.aligned n`: waits until at most the `n` most recent groups are pending. */
  wgmmaWaitGroup(n: number): void {
    const call = 'wgmmaWaitGroup';
    this.#requireSm90a(call);
    this.check.count(call, 'n', n, 0, 7);
    this.emit(`wgmma.wait_group.sync.aligned ${n}`);
  }

  /**
   * `fence.proxy.async.shared::cta`: makes this thread's ordinary
   * shared-memory stores visible to the async proxy that wgmma (and TMA)
   * read through; then a barrier before the wgmma.
   */
  fenceProxyAsyncShared(): void {
    this.check.require('fenceProxyAsyncShared', 'fence.proxy.async', { sm: 90, ptx: '8.0' });
    this.emit('fence.proxy.async.shared::cta');
  }

  /**
   * A matrix descriptor in `d` for the tile at shared-window address
   * `address` (a register, e.g. from `sharedAddress`): the address field
   * (bits 0–13, address / 16) ORed with the constant fields of `fields`.
   * Step it along K by adding bytes / 16 to it.
   */
  wgmmaDescriptor(d: R64, address: Operand<'u32'>, fields: Omit<WgmmaDescriptorFields, 'address'>): R64 {
    const call = 'wgmmaDescriptor';
    this.check.reg(call, 'd', d, 'u64');
    const flags = wgmmaDescriptorFlags(fields);
    const field = this.reg('u32');
    this.emit(`and.b32 ${field}, ${this.check.src(call, 'address', address, 'u32')}, 262143`);
    this.emit(`shr.u32 ${field}, ${field}, 4`);
    this.emit(`cvt.u64.u32 ${d}, ${field}`);
    this.emit(`or.b64 ${d}, ${d}, ${this.check.src(call, 'fields', flags, 'b64')}`);
    return d;
  }

  #requireSm90a(call: string): void {
    this.live(call);
    if (this.target !== WGMMA_TARGET) {
      throw this.check.error(call, 'wgmma needs the sm_90a target', {
        expected: `.target ${WGMMA_TARGET}`,
        actual: `.target ${this.target}`,
      });
    }
  }
}
