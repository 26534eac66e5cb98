import { PtxModule } from '@rayo/cuda-ptx';

/** Bytes of one K-major row of the tiles: 64 bf16, the span of the 128-byte swizzle. */
const ROW_BYTES = 128;

/**
 * One warpgroup (128 threads): D (64×n, f32) = A·Bᵀ for bf16 A (64×64,
 * row-major) and B (n×64, row-major, i.e. K-major), both copied into
 * 128B-swizzled shared tiles, then four `wgmma.mma_async.m64nNk16` steps
 * through matrix descriptors, the descriptors advanced 32 bytes a step.
 * Thread t stores its accumulator register i at d[t · n/2 + i]; where that
 * element lies in D is `wgmmaAccumulatorElement(n, t, i)`.
 */
export function wgmmaBf16Tile(n: number): PtxModule {
  const m = new PtxModule({ target: 'sm_90a' });
  m.entry('wgmma_tile', { a: 'ptr', b: 'ptr', d: 'ptr' }, (k, p) => {
    const a = k.globalPointer(p.a);
    const b = k.globalPointer(p.b);
    const d = k.globalPointer(p.d);
    const tileA = k.shared('tileA', 64 * ROW_BYTES, 1024);
    const tileB = k.shared('tileB', n * ROW_BYTES, 1024);
    const tid = k.tid();
    // Each 16-byte chunk c of a tile goes to swizzleOffset('128B', 16c).
    for (const [tile, src, rows] of [
      [tileA, a, 64],
      [tileB, b, n],
    ] as const) {
      for (let j = 0; j < (rows * ROW_BYTES) / 16 / 128; j++) {
        const chunk = k.add('u32', k.reg('u32'), tid, 128 * j);
        const v = k.ldGlobal('b32', k.regs('u32', 4), k.elementAddress(src, chunk, 16));
        const logical = k.shl('b32', k.reg('u32'), chunk, 4);
        const place = k.add(
          'u32',
          k.reg('u32'),
          k.sharedAddress(tile),
          k.swizzle('128B', k.reg('u32'), logical),
        );
        k.stShared('b32', place, v);
      }
    }
    k.fenceProxyAsyncShared();
    k.barSync();
    // Swizzled K-major tiles: 8-row groups 1024 bytes apart; the leading offset is unused.
    const fields = { leadingByteOffset: 16, strideByteOffset: 8 * ROW_BYTES, swizzle: '128B' } as const;
    const descA = k.wgmmaDescriptor(k.reg('u64'), k.sharedAddress(tileA), fields);
    const descB = k.wgmmaDescriptor(k.reg('u64'), k.sharedAddress(tileB), fields);
    const acc = k.regs('f32', n / 2);
    k.wgmmaFence();
    for (let step = 0; step < 4; step++) {
      k.wgmmaMmaAsync(n, 'bf16', acc, descA, descB, { accumulate: step > 0 });
      // The next 16 elements of K are 32 bytes on: 2 in the address field.
      k.add('u64', descA, descA, 2);
      k.add('u64', descB, descB, 2);
    }
    k.wgmmaCommitGroup();
    k.wgmmaWaitGroup(0);
    const first = k.mulLo('u32', k.reg('u32'), tid, n / 2);
    acc.forEach((r, i) => {
      k.stGlobal('f32', k.elementAddress(d, k.add('u32', k.reg('u32'), first, i), 4), r);
    });
  });
  return m;
}
