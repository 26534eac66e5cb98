import { InvalidArgumentError } from '@rayo/core';
import { builderError, expectAssemblesCleanly, wgmmaBf16Tile } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { KernelBuilder } from './kernel.js';
import { PtxModule } from './module.js';
import type { F32, R32 } from './operands.js';
import { ptxasTestGate } from './ptxas.js';
import { wgmmaAccumulatorElement, wgmmaDescriptor } from './wgmmaLayout.js';

/** One warpgroup: D (64×n) = A·B over two k steps of 128B-swizzled bf16 tiles, then D to global memory. */
function wgmmaTile(n: number, target = 'sm_90a'): PtxModule {
  const m = new PtxModule({ target });
  m.entry('wgmma_tile', { out: 'ptr' }, (k, p) => {
    const out = k.globalPointer(p.out);
    // K-major tiles of 64 bf16 (128 bytes) a row: A 64 rows, B n rows.
    const tileA = k.shared('tileA', 64 * 128, 1024);
    const tileB = k.shared('tileB', n * 128, 1024);
    const fields = { leadingByteOffset: 16, strideByteOffset: 1024, swizzle: '128B' } as const;
    const descA = k.wgmmaDescriptor(k.reg('u64'), k.sharedAddress(tileA), fields);
    const descB = k.wgmmaDescriptor(k.reg('u64'), k.sharedAddress(tileB), fields);
    const d = k.regs('f32', n / 2);
    k.fenceProxyAsyncShared();
    k.barSync();
    k.wgmmaFence();
    k.wgmmaMmaAsync(n, 'bf16', d, descA, descB, { accumulate: false });
    // The next 16 elements of K are 32 bytes on: 2 in the address field.
    k.add('u64', descA, descA, 2);
    k.add('u64', descB, descB, 2);
    k.wgmmaMmaAsync(n, 'bf16', d, descA, descB);
    k.wgmmaCommitGroup();
    k.wgmmaWaitGroup(0);
    const row = k.mulLo('u32', k.reg('u32'), k.tid(), n / 2);
    d.forEach((r, i) => {
      k.stGlobal('f32', k.elementAddress(out, k.add('u32', k.reg('u32'), row, i), 4), r);
    });
  });
  return m;
}

/** A from registers, B transposed, D kept when a predicate says so. */
function wgmmaRegisters(k: KernelBuilder): void {
  const d = k.regs('f32', 8);
  for (const r of d) k.mov('f32', r, 0);
  const a = k.regs('u32', 4);
  for (const r of a) k.mov('u32', r, 0);
  const tileB = k.shared('tileB', 16 * 32, 256);
  const descB = k.wgmmaDescriptor(k.reg('u64'), k.sharedAddress(tileB), {
    leadingByteOffset: 128,
    strideByteOffset: 256,
    swizzle: 'none',
  });
  const keep = k.setp('ne', 'u32', k.reg('pred'), k.tid(), 0);
  k.wgmmaFence();
  k.wgmmaMmaAsync(16, 'f16', d, [a[0]!, a[1]!, a[2]!, a[3]!], descB, {
    accumulate: keep,
    negateA: true,
    transposeB: true,
  });
  k.wgmmaCommitGroup();
  k.wgmmaWaitGroup(0);
}

describe('wgmma matrix descriptors', () => {
  it('packs the address, offsets, base offset and swizzle into their bit fields', () => {
    const desc = wgmmaDescriptor({
      address: 0x1_2340,
      leadingByteOffset: 16,
      strideByteOffset: 1024,
      swizzle: '128B',
      baseOffset: 3,
    });
    expect(desc & 0x3fffn).toBe(0x1234n);
    expect((desc >> 16n) & 0x3fffn).toBe(1n);
    expect((desc >> 32n) & 0x3fffn).toBe(64n);
    expect((desc >> 49n) & 7n).toBe(3n);
    expect(desc >> 62n).toBe(1n);
    expect(wgmmaDescriptor({ address: 0, leadingByteOffset: 0, strideByteOffset: 0, swizzle: '64B' })).toBe(
      2n << 62n,
    );
    expect(wgmmaDescriptor({ address: 0, leadingByteOffset: 0, strideByteOffset: 0, swizzle: '32B' })).toBe(
      3n << 62n,
    );
    expect(
      wgmmaDescriptor({ address: 0x3fff0, leadingByteOffset: 0, strideByteOffset: 0, swizzle: 'none' }),
    ).toBe(0x3fffn);
  });

  it('rejects fields that do not fit', () => {
    const base = { address: 0, leadingByteOffset: 16, strideByteOffset: 1024, swizzle: '128B' } as const;
    expect(() => wgmmaDescriptor({ ...base, address: 8 })).toThrow(InvalidArgumentError);
    expect(() => wgmmaDescriptor({ ...base, strideByteOffset: 2 ** 18 })).toThrow(
      "wgmmaDescriptor: argument 'strideByteOffset': descriptor fields are 16-byte multiples below 256 KiB (expected a multiple of 16 in 0 .. 262128, got number 262144)",
    );
    expect(() => wgmmaDescriptor({ ...base, baseOffset: 8 })).toThrow(InvalidArgumentError);
    expect(() => wgmmaDescriptor({ ...base, swizzle: '256B' as 'none' })).toThrow(InvalidArgumentError);
  });
});

describe('wgmma accumulator layout', () => {
  for (const n of [8, 64, 256]) {
    it(`m64n${n}: the warpgroup's registers cover the 64×${n} tile exactly once`, () => {
      const seen = new Set<number>();
      for (let thread = 0; thread < 128; thread++) {
        for (let i = 0; i < n / 2; i++) {
          const { row, col } = wgmmaAccumulatorElement(n, thread, i);
          expect(row).toBeLessThan(64);
          expect(col).toBeLessThan(n);
          seen.add(row * n + col);
        }
      }
      expect(seen.size).toBe(64 * n);
    });
  }

  it('is the mma.sync accumulator layout per warp and 8-column block', () => {
    // Thread 37: warp 1, lane 5 (groupID 1, threadInGroup 1); register 6: block 1, element 2.
    expect(wgmmaAccumulatorElement(64, 37, 6)).toEqual({ row: 16 + 1 + 8, col: 8 + 2 });
    expect(() => wgmmaAccumulatorElement(64, 0, 32)).toThrow(InvalidArgumentError);
    expect(() => wgmmaAccumulatorElement(12, 0, 0)).toThrow(InvalidArgumentError);
  });
});

const misuse = (body: (k: KernelBuilder) => void, target = 'sm_90a', version = '8.0') =>
  builderError(body, { target, version });

describe('wgmma in the builder', () => {
  it('emits the warpgroup instructions and the descriptor arithmetic', () => {
    const lines = wgmmaTile(16)
      .emit()
      .split('\n')
      .map((l) => l.trim());
    for (const expected of [
      'and.b32 %r1, %r0, 262143;',
      'shr.u32 %r1, %r1, 4;',
      'cvt.u64.u32 %rd2, %r1;',
      `or.b64 %rd2, %rd2, ${(1n << 62n) | (64n << 32n) | (1n << 16n)};`,
      'fence.proxy.async.shared::cta;',
      'wgmma.fence.sync.aligned;',
      'wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, %rd2, %rd3, 0, 1, 1, 0, 0;',
      'wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, %rd2, %rd3, 1, 1, 1, 0, 0;',
      'wgmma.commit_group.sync.aligned;',
      'wgmma.wait_group.sync.aligned 0;',
    ]) {
      expect(lines).toContain(expected);
    }
    const m = new PtxModule({ target: 'sm_90a' });
    m.entry('regs', {}, wgmmaRegisters);
    expect(m.emit()).toContain(
      'wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, {%r0, %r1, %r2, %r3}, %rd0, %p0, -1, 1, 1;',
    );
  });

  it('needs the sm_90a target, not sm_90 or a later one', () => {
    for (const [target, version] of [
      ['sm_90', '8.0'],
      ['sm_100a', '8.6'],
    ]) {
      const e = misuse((k) => k.wgmmaFence(), target, version);
      expect([e.operation, e.expected, e.actual]).toEqual([
        'KernelBuilder.wgmmaFence',
        '.target sm_90a',
        `.target ${target}`,
      ]);
    }
    expect(misuse((k) => k.fenceProxyAsyncShared(), 'sm_80').operation).toBe(
      'KernelBuilder.fenceProxyAsyncShared',
    );
  });

  it('rejects shapes, fragment counts and a transposed register A', () => {
    const desc = (k: KernelBuilder) => k.reg('u64');
    expect(misuse((k) => k.wgmmaMmaAsync(20, 'bf16', k.regs('f32', 10), desc(k), desc(k))).argument).toBe(
      'n',
    );
    const count = misuse((k) => k.wgmmaMmaAsync(64, 'bf16', k.regs('f32', 16), desc(k), desc(k)));
    expect([count.argument, count.expected, count.actual]).toEqual([
      'd',
      '32 registers (m64n64k16, f32)',
      '16 registers',
    ]);
    const trans = misuse((k) =>
      k.wgmmaMmaAsync(8, 'bf16', k.regs('f32', 4), k.regs('u32', 4) as [R32, R32, R32, R32], desc(k), {
        transposeA: true,
      }),
    );
    expect(trans.argument).toBe('opts.transposeA');
    const type = misuse((k) => k.wgmmaMmaAsync(8, 'f32' as 'bf16', k.regs('f32', 4), desc(k), desc(k)));
    expect(type.argument).toBe('type');
    const tf32 = misuse((k) =>
      k.wgmmaMmaAsync(8, 'tf32', k.regs('f32', 4), desc(k), desc(k), { transposeB: true }),
    );
    expect([tf32.argument, tf32.expected]).toEqual(['opts.transposeB', 'false for tf32']);
    const wrongReg = misuse((k) =>
      k.wgmmaMmaAsync(8, 'bf16', k.regs('u32', 4) as unknown as F32[], desc(k), desc(k)),
    );
    expect(wrongReg.argument).toBe('d[0]');
    expect(misuse((k) => k.wgmmaWaitGroup(8)).argument).toBe('n');
  });

  it('aligns shared tiles up to the 1024 bytes a 128-byte swizzle repeats over, no further', () => {
    const m = new PtxModule({ target: 'sm_90a' });
    m.entry('aligned', {}, (k) => {
      k.shared('tile', 1024, 1024);
    });
    expect(m.emit()).toContain('.shared .align 1024 .b8 tile[1024];');
    const e = misuse((k) => k.shared('tile', 16, 2048));
    expect([e.argument, e.expected]).toEqual(['align', 'a power of two from 1 to 1024']);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`wgmma assembles with ptxas -arch=sm_90a (${gate.reason})`, () => {
  for (const n of [16, 128]) {
    it(`m64n${n}k16 bf16 from descriptors`, () => {
      expectAssemblesCleanly(wgmmaTile(n).emit(), 'sm_90a');
    });
  }
  for (const n of [64, 256]) {
    it(`the m64n${n} bf16 tile kernel of the GPU tests (swizzled stores, four k steps)`, () => {
      expectAssemblesCleanly(wgmmaBf16Tile(n).emit(), 'sm_90a');
    });
  }
  it('A from registers', () => {
    const m = new PtxModule({ target: 'sm_90a' });
    m.entry('regs', {}, wgmmaRegisters);
    expectAssemblesCleanly(m.emit(), 'sm_90a');
  });
});
