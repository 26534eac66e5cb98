import { type KernelEncoder, PtxModule, type R32, type R64, type Vec4 } from '@rayo/cuda-ptx';

// A kernel that reads weights the way the small-M quantized GEMVs do and
// does nothing else of note: a block of 8 warps, each warp C rows of W, lane
// l reading 16-byte chunks l, l + 32, … of each row, D steps of loads in
// flight (a ring of D register sets: a set's words are used, then its next
// step is loaded into it). Each word then takes `work` dependent
// multiply-adds, standing in for a GEMV's arithmetic, and is folded into one
// xor per warp (stored, so nothing is dropped). What it measures: the
// bandwidth a given number of columns, steps in flight and warps an SM
// reach, with and without arithmetic, against a device copy. With `via:
// 'shared'` the D steps in flight are copies into a ring of shared memory
// (cp.async, one group a step, each lane reading back only what it copied)
// instead of registers.

export const STREAM_ENTRY = 'weight_stream';
export const STREAM_WARPS = 8;

export interface StreamConfig {
  /** Rows of W per warp. */
  readonly cols: number;
  /** Steps of loads in flight (register sets). */
  readonly depth: number;
  /** Multiply-adds per loaded word. */
  readonly work: number;
  /** Where the steps in flight land: registers (the default) or a ring in shared memory. */
  readonly via?: 'registers' | 'shared';
}

/** Bytes of the shared ring a block of `c` needs (none through registers). */
export function streamRingBytes(c: StreamConfig): number {
  return c.via === 'shared' ? STREAM_WARPS * c.depth * c.cols * 512 : 0;
}

export function streamKey(c: StreamConfig): string {
  return `tools/weight-stream/c${c.cols}d${c.depth}w${c.work}${c.via === 'shared' ? '/shared' : ''}`;
}

/** The multiplier and increment of the stand-in arithmetic (Numerical Recipes' LCG). */
export const STREAM_LCG = { a: 1664525, c: 1013904223 } as const;

/**
 * The module: `w` holds N rows of `rowChunks` 16-byte chunks, `out` one u32
 * per warp (the xor of what it read, after the arithmetic). Chunks past a
 * row's end read its last chunk; rows past N read row N − 1.
 */
export function streamModule(c: StreamConfig): PtxModule {
  const m = new PtxModule({ target: 'sm_80' });
  // The shared ring, where asked; the sweep also sizes it to hold a number of blocks an SM.
  const dynamic = m.dynamicShared('ring', 16);
  m.entry(STREAM_ENTRY, { w: 'ptr', out: 'ptr', n: 'u32', rowChunks: 'u32' }, (k, p) => {
    const w = k.globalPointer(p.w);
    const out = k.globalPointer(p.out);
    const n = k.ldParam(p.n);
    const rowChunks = k.ldParam(p.rowChunks);
    const tid = k.tid();
    const lane = k.and('b32', k.reg('u32'), tid, 31);
    const globalWarp = k.madLo(
      'u32',
      k.reg('u32'),
      k.ctaid(),
      STREAM_WARPS,
      k.shr('u32', k.reg('u32'), tid, 5),
    );
    const lastRow = k.sub('u32', k.reg('u32'), n, 1);
    const lastChunk = k.sub('u32', k.reg('u32'), rowChunks, 1);
    const rows: R64[] = Array.from({ length: c.cols }, (_, col) => {
      const row = k.min('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), globalWarp, c.cols, col), lastRow);
      return k.elementAddress(w, k.mulLo('u32', k.reg('u32'), row, rowChunks), 16);
    });
    const chunkOf = (step: R32 | number) =>
      k.min(
        'u32',
        k.reg('u32'),
        typeof step === 'number'
          ? k.add('u32', k.reg('u32'), lane, 32 * step)
          : k.madLo('u32', k.reg('u32'), step, 32, lane),
        lastChunk,
      );
    /** Loads step `step`'s chunk of every row into `set` (fresh registers where absent). */
    const load = (step: R32 | number, set?: R32[][]): R32[][] => {
      const chunk = chunkOf(step);
      return rows.map((row, col) => {
        const words = set?.[col] ?? k.regs('u32', 4);
        k.ldGlobal('b32', words as unknown as Vec4<R32>, k.elementAddress(row, chunk, 16), { nc: true });
        return words;
      });
    };
    // Shared: this lane's 16 bytes of row `col` in stage s lie at ring + ((warp · D + s) · C + col) · 512 + 16 · lane.
    const warpInBlock = k.shr('u32', k.reg('u32'), tid, 5);
    const laneRing = k.madLo(
      'u32',
      k.reg('u32'),
      warpInBlock,
      c.depth * c.cols * 512,
      k.madLo('u32', k.reg('u32'), lane, 16, k.sharedAddress(dynamic)),
    );
    const stageAt = (stage: number, col: number) =>
      k.add('u32', k.reg('u32'), laneRing, (stage * c.cols + col) * 512);
    /** Copies step `step`'s chunks into stage `stage` of the ring, one commit group. */
    const copy = (step: R32 | number, stage: number): void => {
      const chunk = chunkOf(step);
      rows.forEach((row, col) => {
        k.cpAsync('cg', stageAt(stage, col), k.elementAddress(row, chunk, 16), 16);
      });
      k.cpAsyncCommitGroup();
    };
    /** Waits for the oldest group in flight (stage `stage`) and reads this lane's words back. */
    const readStage = (stage: number): R32[][] => {
      k.cpAsyncWaitGroup(c.depth - 1);
      return rows.map((_, col) => {
        const words = k.regs('u32', 4);
        k.ldShared('b32', words as unknown as Vec4<R32>, stageAt(stage, col));
        return words;
      });
    };
    const acc = k.mov('b32', k.reg('u32'), 0);
    const use = (set: R32[][]) => {
      for (const words of set)
        for (const word of words) {
          let v: R32 = word;
          for (let i = 0; i < c.work; i++) v = k.madLo('u32', k.reg('u32'), v, STREAM_LCG.a, STREAM_LCG.c);
          k.xor('b32', acc, acc, v);
        }
    };
    const steps = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), rowChunks, 31), 32);
    const step = k.reg('u32');
    if (c.via === 'shared') {
      for (let s = 0; s < c.depth; s++) copy(s, s);
      k.forRange(step, 0, steps, c.depth, () => {
        for (let s = 0; s < c.depth; s++) {
          use(readStage(s));
          copy(k.add('u32', k.reg('u32'), step, s + c.depth), s);
        }
      });
      k.cpAsyncWaitAll();
    } else {
      const sets = Array.from({ length: c.depth }, (_, s) => load(s));
      k.forRange(step, 0, steps, c.depth, () => {
        sets.forEach((set, s) => {
          use(set);
          load(k.add('u32', k.reg('u32'), step, s + c.depth), set);
        });
      });
    }
    for (let offset = 16; offset >= 1; offset /= 2)
      k.xor('b32', acc, acc, k.shflSync('bfly', k.reg('u32'), acc, offset));
    const first = k.setp('eq', 'u32', k.reg('pred'), lane, 0);
    k.predicated(first, () => k.stGlobal('b32', k.elementAddress(out, globalWarp, 4), acc));
  });
  return m;
}

/** What the kernel stores for one warp, on the host: its rows' chunks (steps rounded up to `depth`) through the arithmetic, xored. */
export function streamReference(
  words: Uint32Array,
  c: StreamConfig,
  n: number,
  rowChunks: number,
  warp: number,
): number {
  const steps = Math.ceil(rowChunks / 32);
  const turns = Math.ceil(steps / c.depth) * c.depth;
  let acc = 0;
  for (let col = 0; col < c.cols; col++) {
    const row = Math.min(warp * c.cols + col, n - 1);
    for (let step = 0; step < turns; step++)
      for (let lane = 0; lane < 32; lane++) {
        const chunk = Math.min(step * 32 + lane, rowChunks - 1);
        for (let i = 0; i < 4; i++) {
          let v = words[(row * rowChunks + chunk) * 4 + i]!;
          for (let j = 0; j < c.work; j++) v = (Math.imul(v, STREAM_LCG.a) + STREAM_LCG.c) >>> 0;
          acc = (acc ^ v) >>> 0;
        }
      }
  }
  return acc;
}

/** The launch's grid (blocks of 8 warps, C rows a warp) for N rows. */
export function streamBlocks(n: number, cols: number): number {
  return Math.ceil(n / (cols * STREAM_WARPS));
}

/** Launches the kernel over N rows of `rowChunks` chunks at `w`, one xor a warp into `out` (streamBlocks · 8 words). */
export function launchStream(
  encoder: KernelEncoder,
  c: StreamConfig,
  a: { readonly w: bigint; readonly out: bigint; readonly n: number; readonly rowChunks: number },
  sharedBytes = streamRingBytes(c),
): void {
  encoder.launch({
    key: streamKey(c),
    module: () => streamModule(c),
    entry: STREAM_ENTRY,
    grid: streamBlocks(a.n, c.cols),
    block: STREAM_WARPS * 32,
    sharedBytes,
    args: { ...a },
  });
}
