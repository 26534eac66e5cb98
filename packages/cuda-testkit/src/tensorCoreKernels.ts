import {
  type F32,
  type FragmentCoordinate,
  type KernelBuilder,
  MMA_SHAPES,
  type MmaLaneCoordinates,
  type MmaShape,
  PtxModule,
  type R32,
  type R64,
} from '@rayo/cuda-ptx';

/**
 * One-warp tensor-core kernels and their inputs and reference, shared by the
 * interpreter's tests and by checks of the same kernels on a GPU.
 */

export type Buffers = { a: R64; b: R64; c: R64; d: R64 };
export type KernelBody = (k: KernelBuilder, p: Buffers) => void;

/** A one-entry sm_80 module `tile(a, b, c, d)`. */
export function tileModule(body: KernelBody, target = 'sm_80'): PtxModule {
  const m = new PtxModule({ target });
  m.entry('tile', { a: 'ptr', b: 'ptr', c: 'ptr', d: 'ptr' }, (k, p) => {
    body(k, {
      a: k.globalPointer(p.a),
      b: k.globalPointer(p.b),
      c: k.globalPointer(p.c),
      d: k.globalPointer(p.d),
    });
  });
  return m;
}

export const f32Bits = (v: number) => new Uint32Array(Float32Array.of(v).buffer)[0]!;
export const bitsF32 = (w: number) => new Float32Array(Uint32Array.of(w).buffer)[0]!;

/** A deterministic stream of numbers in [0, 1). */
export function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** f16 bits of a random normal number in ±[2^-4, 2^2), with a full mantissa. */
export function randomF16(next: () => number): number {
  const sign = next() < 0.5 ? 0x8000 : 0;
  return sign | ((11 + Math.floor(next() * 6)) << 10) | Math.floor(next() * 1024);
}

function f16Value(bits: number): number {
  const exp = (bits >>> 10) & 31;
  const magnitude = (1 + (bits & 1023) / 1024) * 2 ** (exp - 15);
  return bits & 0x8000 ? -magnitude : magnitude;
}

/** bf16 bits of a random number in ±[2^-4, 2^2). */
export function randomBf16(next: () => number): number {
  return f32Bits((next() < 0.5 ? -1 : 1) * 2 ** (-4 + next() * 6)) >>> 16;
}

/** x rounded to 11 significant bits, ties away from zero (what cvt.rna.tf32.f32 does). */
export function tf32Reference(x: number): number {
  if (x === 0) return x;
  const e = Math.floor(Math.log2(Math.abs(x)));
  const quantum = 2 ** (e - 10);
  return Math.sign(x) * Math.floor(Math.abs(x) / quantum + 0.5) * quantum;
}

/** Halves packed two to a word, the first in the low half. */
export function packHalves(halves: readonly number[]): Uint32Array {
  return Uint32Array.from(
    { length: halves.length / 2 },
    (_, i) => (halves[2 * i]! | (halves[2 * i + 1]! << 16)) >>> 0,
  );
}

/** D = A·B + C in doubles, and each entry's sum of |terms| (the scale of its rounding error). */
export function reference(m: number, n: number, k: number, A: number[], B: number[], C: number[]) {
  const d: number[] = [];
  const scale: number[] = [];
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let sum = C[i * n + j]!;
      let magnitude = Math.abs(sum);
      for (let x = 0; x < k; x++) {
        sum += A[i * k + x]! * B[x * n + j]!;
        magnitude += Math.abs(A[i * k + x]! * B[x * n + j]!);
      }
      d.push(sum);
      scale.push(magnitude);
    }
  }
  return { d, scale };
}

/** `base + offset` for a 32-bit byte offset. */
function at(k: KernelBuilder, base: R64, offset: R32): R64 {
  return k.add('u64', k.reg('u64'), base, k.cvt('u64', 'u32', k.reg('u64'), offset));
}

/** Stores the lane's D fragment of a 16×8 tile into row-major f32 `d`, loading C the same way from `c`. */
function accumulatorIo(k: KernelBuilder, lane: MmaLaneCoordinates, shape: MmaShape, p: Buffers) {
  const places = MMA_SHAPES[shape].c.map((e) => k.mmaElementOffset(lane, e, 32, 4));
  const c = places.map((o) => k.ldGlobal('f32', k.reg('f32'), at(k, p.c, o)));
  return {
    c: [c[0]!, c[1]!, c[2]!, c[3]!] as const,
    store: (d: readonly F32[]) => {
      places.forEach((o, i) => {
        k.stGlobal('f32', at(k, p.d, o), d[i]!);
      });
    },
  };
}

/**
 * One warp: A (16×16 halves, row-major) loaded straight into fragment
 * registers by the layout table, B (16×8 halves, row-major) element by
 * element and packed, D = A·B + C.
 */
export function directLoads(type: 'f16' | 'bf16'): KernelBody {
  return (k, p) => {
    const lane = k.mmaLaneCoordinates();
    const { a: aLayout, b: bLayout } = MMA_SHAPES.m16n8k16;
    // Elements 2i and 2i+1 of A are neighbours in a row: one 32-bit load per register.
    const a = [0, 1, 2, 3].map((i) =>
      k.ldGlobal('b32', k.reg('u32'), at(k, p.a, k.mmaElementOffset(lane, aLayout[2 * i]!, 32, 2))),
    );
    // Those of B are neighbours in a column: two 16-bit loads, packed.
    const b = [0, 1].map((i) => {
      const [lo, hi] = [2 * i, 2 * i + 1].map((e) =>
        k.ldGlobal('b16', k.reg('b16'), at(k, p.b, k.mmaElementOffset(lane, bLayout[e]!, 16, 2))),
      );
      return k.packHalves(k.reg('u32'), lo!, hi!);
    });
    const io = accumulatorIo(k, lane, 'm16n8k16', p);
    const d = k.regs('f32', 4);
    k.mmaSync('m16n8k16', type, d, [a[0]!, a[1]!, a[2]!, a[3]!], [b[0]!, b[1]!], io.c);
    io.store(d);
  };
}

/**
 * One warp: A (16×16) and B (16×8, row-major) copied into shared memory with
 * cp.async (A in 32-byte swizzled rows), then fragments by ldmatrix (B
 * transposed): the path a GEMM takes, checked against the mma layout.
 */
export function sharedLoads(type: 'f16' | 'bf16'): KernelBody {
  return (k, p) => {
    const tileA = k.shared('tileA', 512, 128);
    const tileB = k.shared('tileB', 256, 128);
    const tid = k.tid();
    // Lane l copies chunk l of A (row l >> 1, half l & 1) to its swizzled place, lanes 0-15 row l of B.
    const chunkA = k.shl('b32', k.reg('u32'), tid, 4);
    const placeA = k.add('u32', k.reg('u32'), k.sharedAddress(tileA), k.swizzle('32B', k.reg('u32'), chunkA));
    k.cpAsync('cg', placeA, k.elementAddress(p.a, tid, 16), 16);
    const firstHalf = k.setp('lt', 'u32', k.reg('pred'), tid, 16);
    k.predicated(firstHalf, () => {
      const placeB = k.madLo('u32', k.reg('u32'), tid, 16, k.sharedAddress(tileB));
      k.cpAsync('ca', placeB, k.elementAddress(p.b, tid, 16), 16);
    });
    k.cpAsyncCommitGroup();
    k.cpAsyncWaitGroup(0);
    k.barSync();
    // ldmatrix.x4 rows: lanes 0-15 give rows 0-15 at k 0, lanes 16-31 the same rows at k 8.
    const row = k.and('b32', k.reg('u32'), tid, 15);
    const half = k.shr('u32', k.reg('u32'), tid, 4);
    const logical = k.madLo('u32', k.reg('u32'), row, 32, k.shl('b32', k.reg('u32'), half, 4));
    const rowA = k.add('u32', k.reg('u32'), k.sharedAddress(tileA), k.swizzle('32B', k.reg('u32'), logical));
    const a = k.ldmatrix(4, k.regs('u32', 4), rowA);
    // ldmatrix.x2.trans rows: lanes 0-15 give rows k = 0-15 of B (lanes 16-31 are ignored).
    const rowB = k.madLo('u32', k.reg('u32'), row, 16, k.sharedAddress(tileB));
    const b = k.ldmatrix(2, k.regs('u32', 2), rowB, { trans: true });
    const io = accumulatorIo(k, k.mmaLaneCoordinates(), 'm16n8k16', p);
    const d = k.regs('f32', 4);
    k.mmaSync('m16n8k16', type, d, a, b, io.c);
    io.store(d);
  };
}

/** One warp: f32 A (16×8) and B (8×8) rounded to tf32 in registers, D = A·B + C with m16n8k8. */
export function tf32Tile(): KernelBody {
  return (k, p) => {
    const lane = k.mmaLaneCoordinates();
    const { a: aLayout, b: bLayout } = MMA_SHAPES.m16n8k8;
    const load = (base: R64, e: FragmentCoordinate, ld: number) =>
      k.cvtTf32(
        k.reg('u32'),
        k.ldGlobal('f32', k.reg('f32'), at(k, base, k.mmaElementOffset(lane, e, ld * 4, 4))),
      );
    const a = aLayout.map((e) => load(p.a, e, 8));
    const b = bLayout.map((e) => load(p.b, e, 8));
    const io = accumulatorIo(k, lane, 'm16n8k8', p);
    const d = k.regs('f32', 4);
    k.mmaSync('m16n8k8', 'tf32', d, [a[0]!, a[1]!, a[2]!, a[3]!], [b[0]!, b[1]!], io.c);
    io.store(d);
  };
}

/** Random 16×16 A, 16×8 B (halves of `type`) and 16×8 f32 C, as device words and as numbers. */
export function halfInputs(type: 'f16' | 'bf16', seed: number) {
  const next = random(seed);
  const draw = type === 'f16' ? randomF16 : randomBf16;
  const value = type === 'f16' ? f16Value : (h: number) => bitsF32(h << 16);
  const aBits = Array.from({ length: 256 }, () => draw(next));
  const bBits = Array.from({ length: 128 }, () => draw(next));
  const C = Array.from({ length: 128 }, () => Math.fround(next() * 8 - 4));
  return {
    words: { a: packHalves(aBits), b: packHalves(bBits), c: Float32Array.from(C).buffer },
    A: aBits.map(value),
    B: bBits.map(value),
    C,
  };
}
