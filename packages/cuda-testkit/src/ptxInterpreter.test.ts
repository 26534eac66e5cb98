import {
  addr,
  type CmpOp,
  CommandRecorder,
  CudaDriver,
  type DeviceBuffer,
  type KernelBuilder,
  type MemType,
  PtxModule,
  type R32,
  type R64,
  type RegOf,
} from '@rayo/cuda-ptx';
import { afterAll, describe, expect, it } from 'vitest';
import { FakeLibCuda } from './fakeLibCuda.js';
import { PtxInterpreter } from './ptxInterpreter.js';

const fake = new FakeLibCuda();
const interpreter = new PtxInterpreter(fake).attach();
const driver = new CudaDriver(fake);
const stream = driver.createStream();
const buffers: DeviceBuffer[] = [];
afterAll(() => {
  for (const b of buffers) driver.free(b);
});

let modules = 0;

/** Builds a one-entry module `test(out, inp, n)` and launches it. */
function launch(
  body: (k: KernelBuilder, p: { out: R64; inp: R64; n: R32 }, m: PtxModule) => void,
  geometry: {
    grid?: number | [number, number, number];
    block: number | [number, number, number];
    sharedBytes?: number;
  },
  args: { out: DeviceBuffer; inp?: DeviceBuffer; n?: number },
  options: { target?: string; version?: string } = {},
): void {
  const key = `test/interpreter/${modules++}`;
  const module = () => {
    const m = new PtxModule(options);
    m.entry('test', { out: 'ptr', inp: 'ptr', n: 'u32' }, (k, p) => {
      body(k, { out: k.globalPointer(p.out), inp: k.globalPointer(p.inp), n: k.ldParam(p.n) }, m);
    });
    return m;
  };
  const recorder = new CommandRecorder(driver);
  recorder.launch({
    key,
    module,
    entry: 'test',
    grid: geometry.grid ?? 1,
    block: geometry.block,
    sharedBytes: geometry.sharedBytes,
    args: { out: args.out.ptr, inp: (args.inp ?? args.out).ptr, n: args.n ?? 0 },
  });
  driver.enqueue(recorder.commands, stream);
}

function device(data: Float32Array | Uint32Array | Int32Array | number): DeviceBuffer {
  const bytes = typeof data === 'number' ? data : data.byteLength;
  const b = driver.alloc(Math.max(bytes, 4));
  buffers.push(b);
  const init =
    typeof data === 'number' ? new Uint8Array(bytes) : new Uint8Array(data.buffer, data.byteOffset, bytes);
  fake.memory.write(b.ptr, init);
  return b;
}

const f32s = (b: DeviceBuffer, n: number) => fake.memory.f32(b.ptr, n);
const u32s = (b: DeviceBuffer, n: number) => fake.memory.u32(b.ptr, n);
const i32s = (b: DeviceBuffer, n: number) => new Int32Array(fake.memory.u32(b.ptr, n).buffer);

/** The linear thread index's element address in `base` for `bytes`-byte elements. */
function at(k: KernelBuilder, base: R64, bytes = 4): R64 {
  return k.elementAddress(base, k.globalThreadIndex(), bytes);
}

/** Runs `body` on one warp and returns the two words each lane's body gives, lane by lane. */
function warpWordPairs(body: (k: KernelBuilder) => readonly [R32, R32]): [number, number][] {
  const out = device(32 * 8);
  launch(
    (k, p) => {
      const [first, second] = body(k);
      const i = k.globalThreadIndex();
      k.stGlobal('u32', k.elementAddress(p.out, i, 8), first);
      k.stGlobal('u32', { base: k.elementAddress(p.out, i, 8), offset: 4 }, second);
    },
    { block: 32 },
    { out },
  );
  const words = u32s(out, 64);
  return Array.from({ length: 32 }, (_, lane) => [words[2 * lane]!, words[2 * lane + 1]!]);
}

type Word = number | bigint;

/**
 * Runs one thread per row of `rows` (each row `inWords` 32-bit words, 64-bit
 * values as two, low first) and returns each thread's `outWords` result
 * words. `body` gets loaders of the thread's input words and storers of its
 * results, by word index.
 */
function perThread(
  rows: readonly (readonly Word[])[],
  outWords: number,
  body: (
    k: KernelBuilder,
    load: <T extends MemType>(type: T, word: number) => RegOf<T>,
    store: <T extends MemType>(type: T, word: number, value: RegOf<T>) => void,
  ) => void,
  options: { target?: string; version?: string } = {},
): bigint[][] {
  const flat = rows.flatMap((row) => row.flatMap(toWords));
  const inWords = flat.length / rows.length;
  const inp = device(Uint32Array.from(flat));
  const out = device(rows.length * outWords * 4);
  launch(
    (k, p) => {
      const i = k.tid();
      const mine = k.elementAddress(p.inp, i, inWords * 4);
      const result = k.elementAddress(p.out, i, outWords * 4);
      const load = <T extends MemType>(type: T, word: number) =>
        k.ldGlobal(type, k.reg(type) as never, { base: mine, offset: word * 4 }) as RegOf<T>;
      const store = <T extends MemType>(type: T, word: number, value: RegOf<T>) =>
        k.stGlobal(type, { base: result, offset: word * 4 }, value as never);
      body(k, load, store);
    },
    { block: rows.length },
    { out, inp },
    options,
  );
  const words = u32s(out, rows.length * outWords);
  return rows.map((_, r) => Array.from(words.slice(r * outWords, (r + 1) * outWords), BigInt));
}

/** A value's 32-bit words: a number is one word (an integer, wrapped to 32 bits), a bigint two. */
function toWords(v: Word): number[] {
  if (typeof v === 'number') return [v >>> 0];
  const w = BigInt.asUintN(64, v);
  return [Number(w & 0xffffffffn), Number(w >> 32n)];
}

/** The bits of an f32, as an input word. */
function F(v: number): number {
  return new Uint32Array(Float32Array.of(v).buffer)[0]!;
}

function bitsF32(w: bigint): number {
  return new Float32Array(Uint32Array.of(Number(w)).buffer)[0]!;
}

/** Two result words as a 64-bit value. */
const pair = (row: bigint[], word: number, signed = false) => {
  const v = (row[word + 1]! << 32n) | row[word]!;
  return signed ? BigInt.asIntN(64, v) : v;
};

describe('warp-synchronous instructions', () => {
  it('reduces a warp with shfl.bfly: every lane gets its warp sum', () => {
    const out = device(64 * 4);
    launch(
      (k, p) => {
        const v = k.cvt('f32', 'u32', k.reg('f32'), k.add('u32', k.reg('u32'), k.tid(), 1), { rnd: 'rn' });
        for (const offset of [16, 8, 4, 2, 1]) {
          const other = k.shflSync('bfly', k.reg('f32'), v, offset);
          k.add('f32', v, v, other);
        }
        k.stGlobal('f32', at(k, p.out), v);
      },
      { block: 64 },
      { out },
    );
    const got = f32s(out, 64);
    for (let i = 0; i < 64; i++) expect(got[i]).toBe(i < 32 ? (32 * 33) / 2 : (64 * 65) / 2 - (32 * 33) / 2);
  });

  it('reduces with shfl.down into lane 0 and reports the source lane in range', () => {
    const out = device(32 * 4);
    launch(
      (k, p) => {
        const lane = k.laneid();
        const v = k.mulLo('u32', k.reg('u32'), lane, lane);
        const inRange = k.reg('u32');
        k.mov('u32', inRange, 0);
        for (const [bit, offset] of [16, 8, 4, 2, 1].entries()) {
          const ok = k.reg('pred');
          const other = k.shflSync('down', k.reg('u32'), v, offset, { pred: ok });
          k.add('u32', v, v, other);
          k.or(
            'b32',
            inRange,
            inRange,
            k.shl('b32', k.reg('u32'), k.selp('u32', k.reg('u32'), 1, 0, ok), bit),
          );
        }
        // lane 0 holds the sum; pack the in-range bits above it for every lane.
        k.stGlobal('u32', at(k, p.out), k.madLo('u32', k.reg('u32'), inRange, 1 << 20, v));
      },
      { block: 32 },
      { out },
    );
    const got = u32s(out, 32);
    let sum = 0;
    for (let i = 0; i < 32; i++) sum += i * i;
    expect(got[0]! & 0xfffff).toBe(sum);
    for (let lane = 0; lane < 32; lane++) {
      let bits = 0;
      for (const [bit, offset] of [16, 8, 4, 2, 1].entries()) if (lane + offset <= 31) bits |= 1 << bit;
      expect(got[lane]! >>> 20).toBe(bits);
    }
  });

  it('scans with shfl.up, using the predicate to skip lanes below the offset', () => {
    const out = device(32 * 4);
    launch(
      (k, p) => {
        const v = k.add('u32', k.reg('u32'), k.laneid(), 1);
        for (const offset of [1, 2, 4, 8, 16]) {
          const ok = k.reg('pred');
          const other = k.shflSync('up', k.reg('u32'), v, offset, { pred: ok });
          k.predicated(ok, () => k.add('u32', v, v, other));
        }
        k.stGlobal('u32', at(k, p.out), v);
      },
      { block: 32 },
      { out },
    );
    expect([...u32s(out, 32)]).toEqual(Array.from({ length: 32 }, (_, i) => ((i + 1) * (i + 2)) / 2));
  });

  it('broadcasts with shfl.idx, whole-warp and in 8-lane segments', () => {
    const got = warpWordPairs((k) => {
      const v = k.mulLo('u32', k.reg('u32'), k.laneid(), 10);
      const whole = k.shflSync('idx', k.reg('u32'), v, 3);
      // CUDA's width 8: c = ((32 - width) << 8) | 31.
      const segment = k.shflSync('idx', k.reg('u32'), v, 5, { c: (24 << 8) | 31 });
      return [whole, segment];
    });
    expect(got).toEqual(Array.from({ length: 32 }, (_, lane) => [30, ((lane & ~7) | 5) * 10]));
  });

  it('reads each lane before writing any destination when d is also the source', () => {
    const out = device(32 * 4);
    launch(
      (k, p) => {
        const v = k.laneid();
        k.shflSync('bfly', v, v, 1);
        k.stGlobal('u32', at(k, p.out), v);
      },
      { block: 32 },
      { out },
    );
    expect([...u32s(out, 32)]).toEqual(Array.from({ length: 32 }, (_, i) => i ^ 1));
  });

  it('lets the live lanes meet when others exited, and reads 0xffffffff from missing lanes', () => {
    // Block of 40: the second warp has 8 lanes, and lanes at or past n exit first.
    const out = device(40 * 4);
    launch(
      (k, p) => {
        const i = k.globalThreadIndex();
        const gone = k.setp('ge', 'u32', k.reg('pred'), i, p.n);
        k.predicated(gone, () => k.ret());
        const v = k.shflSync('bfly', k.reg('u32'), i, 2);
        k.stGlobal('u32', k.elementAddress(p.out, i, 4), v);
      },
      { block: 40 },
      { out, n: 38 },
    );
    const got = u32s(out, 40);
    for (let i = 0; i < 38; i++) {
      const source = i ^ 2;
      expect(got[i]).toBe(source < 38 ? source : 0xffffffff);
    }
  });

  it('takes ballots and votes, and passes bar.warp.sync', () => {
    const got = warpWordPairs((k) => {
      const lane = k.laneid();
      const odd = k.setp('ne', 'b32', k.reg('pred'), k.and('b32', k.reg('u32'), lane, 1), 0);
      const ballot = k.voteBallot(k.reg('u32'), odd);
      k.warpSync();
      const any = k.vote('any', k.reg('pred'), odd);
      const all = k.vote('all', k.reg('pred'), odd);
      const big = k.setp('lt', 'u32', k.reg('pred'), lane, 100);
      const allBig = k.vote('all', k.reg('pred'), big);
      const flags = k.reg('u32');
      k.selp('u32', flags, 1, 0, any);
      k.add('u32', flags, flags, k.selp('u32', k.reg('u32'), 2, 0, all));
      k.add('u32', flags, flags, k.selp('u32', k.reg('u32'), 4, 0, allBig));
      return [ballot, flags];
    });
    // Odd lanes' ballot; any of them, all of them small.
    expect(got).toEqual(Array.from({ length: 32 }, () => [0xaaaaaaaa, 1 | 4]));
  });

  it('reports a shfl whose membermask names a lane waiting at a barrier', () => {
    const out = device(32 * 4);
    expect(() =>
      launch(
        (k, p) => {
          const low = k.setp('lt', 'u32', k.reg('pred'), k.laneid(), 16);
          const v = k.laneid();
          k.ifThen(low, () => {
            k.shflSync('bfly', v, v, 1);
          });
          k.barSync();
          k.stGlobal('u32', at(k, p.out), v);
        },
        { block: 32 },
        { out },
      ),
    ).toThrow(/deadlock/);
  });

  it('meets in a half-warp membermask while the other half waits at a barrier', () => {
    const out = device(32 * 4);
    launch(
      (k, p) => {
        const low = k.setp('lt', 'u32', k.reg('pred'), k.laneid(), 16);
        const v = k.laneid();
        k.ifThen(low, () => {
          k.shflSync('bfly', v, v, 1, { membermask: 0xffff });
        });
        k.barSync();
        k.stGlobal('u32', at(k, p.out), v);
      },
      { block: 32 },
      { out },
    );
    expect([...u32s(out, 32)]).toEqual(Array.from({ length: 32 }, (_, i) => (i < 16 ? i ^ 1 : i)));
  });
});

/** A one-word shared array that thread 0 zeroes before the block goes on, and thread 0's predicate. */
function zeroedSharedWord(k: KernelBuilder, name: string, type: 'f32' | 'u32') {
  const word = k.sharedArray(name, type, 1);
  const first = k.setp('eq', 'u32', k.reg('pred'), k.tid(), 0);
  k.predicated(first, () => k.stShared(type, word, 0));
  k.barSync();
  return { word, first };
}

describe('atomics', () => {
  it('builds a histogram over a grid with red.global.add and counts with atom.add', () => {
    const n = 5000;
    const bins = 17;
    const values = Uint32Array.from({ length: n }, (_, i) => (i * 7919) % 1009);
    const inp = device(values);
    const out = device((bins + 1) * 4);
    launch(
      (k, p) => {
        k.gridStrideLoop(p.n, (i) => {
          const v = k.ldGlobal('u32', k.reg('u32'), k.elementAddress(p.inp, i, 4));
          const bin = k.rem('u32', k.reg('u32'), v, bins);
          k.red('global', 'add', 'u32', k.elementAddress(p.out, bin, 4), 1);
          // The last slot counts the elements; the old values returned are not needed here.
          k.atom('global', 'add', 'u32', k.reg('u32'), { base: p.out, offset: bins * 4 }, 1);
        });
      },
      { grid: 7, block: 96 },
      { out, inp, n },
    );
    const expected = new Array<number>(bins + 1).fill(0);
    for (const v of values) expected[v % bins]!++;
    expected[bins] = n;
    expect([...u32s(out, bins + 1)]).toEqual(expected);
  });

  it('hands out unique tickets: atom.add returns the old value', () => {
    const out = device(257 * 4);
    launch(
      (k, p) => {
        const ticket = k.atom('global', 'add', 'u32', k.reg('u32'), { base: p.out, offset: 256 * 4 }, 1);
        k.stGlobal('u32', k.elementAddress(p.out, ticket, 4), k.globalThreadIndex());
      },
      { grid: 4, block: 64 },
      { out },
    );
    const got = u32s(out, 257);
    expect(got[256]).toBe(256);
    expect([...got.slice(0, 256)].sort((a, b) => a - b)).toEqual(Array.from({ length: 256 }, (_, i) => i));
  });

  it('sums f32 in shared memory with red.shared.add.f32, then publishes with atom.global.add.f32', () => {
    const out = device(4);
    launch(
      (k, p) => {
        const { word: acc, first } = zeroedSharedWord(k, 'acc', 'f32');
        const x = k.cvt('f32', 'u32', k.reg('f32'), k.globalThreadIndex(), { rnd: 'rn' });
        k.red('shared', 'add', 'f32', acc, k.mul('f32', k.reg('f32'), x, 0.5));
        k.barSync();
        k.ifThen(first, () => {
          const total = k.ldShared('f32', k.reg('f32'), acc);
          k.atom('global', 'add', 'f32', k.reg('f32'), p.out, total);
        });
      },
      { grid: 3, block: 128 },
      { out },
    );
    expect(f32s(out, 1)[0]).toBe((383 * 384) / 4);
  });

  it('implements min, max, and, or, xor, exch, inc, dec and cas with their PTX meanings', () => {
    // One thread applies each operation in turn to its own word and records old values.
    const init = Int32Array.from([5, 5, 0b1100, 0b1100, 0b1100, 7, 3, 0, 2, 42, 42, -5, -5]);
    const out = device(init);
    const olds = device(init.length * 4);
    launch(
      (k, p) => {
        const word = (i: number) => ({ base: p.out, offset: i * 4 });
        const record = (i: number, r: R32) => k.stGlobal('u32', { base: p.inp, offset: i * 4 }, r);
        record(0, k.atom('global', 'min', 's32', k.reg('u32'), word(0), -3));
        record(1, k.atom('global', 'max', 'u32', k.reg('u32'), word(1), 9));
        record(2, k.atom('global', 'and', 'b32', k.reg('u32'), word(2), 0b1010));
        record(3, k.atom('global', 'or', 'b32', k.reg('u32'), word(3), 0b1010));
        record(4, k.atom('global', 'xor', 'b32', k.reg('u32'), word(4), 0b1010));
        record(5, k.atom('global', 'exch', 'b32', k.reg('u32'), word(5), 99));
        record(6, k.atom('global', 'inc', 'u32', k.reg('u32'), word(6), 3)); // 3 >= 3: wraps to 0
        record(7, k.atom('global', 'dec', 'u32', k.reg('u32'), word(7), 4)); // 0: becomes 4
        record(8, k.atom('global', 'dec', 'u32', k.reg('u32'), word(8), 4)); // 2: becomes 1
        record(9, k.atomCas('global', 'b32', k.reg('u32'), word(9), 42, 7)); // matches
        record(10, k.atomCas('global', 'b32', k.reg('u32'), word(10), 41, 7)); // does not
        record(11, k.atom('global', 'max', 's32', k.reg('u32'), word(11), -9));
        record(12, k.atom('global', 'min', 'u32', k.reg('u32'), word(12), 3));
      },
      { block: 1 },
      { out, inp: olds },
    );
    expect([...i32s(out, init.length)]).toEqual([-3, 9, 0b1000, 0b1110, 0b0110, 99, 0, 4, 1, 7, 42, -5, 3]);
    expect([...i32s(olds, init.length)]).toEqual([...init]);
  });

  it('updates 64-bit words: add with carry, signed max, cas', () => {
    const init = new BigUint64Array([0xffffffffn, 5n, 10n]);
    const out = device(new Uint32Array(init.buffer));
    launch(
      (k, p) => {
        k.red('global', 'add', 'u64', p.out, 1);
        k.red('global', 'max', 's64', { base: p.out, offset: 8 }, -1n);
        const old = k.atomCas('global', 'b64', k.reg('u64'), { base: p.out, offset: 16 }, 10n, 2n ** 40n);
        k.red('global', 'add', 'u64', { base: p.out, offset: 16 }, old);
      },
      { block: 1 },
      { out },
    );
    expect([...new BigUint64Array(u32s(out, 6).buffer)]).toEqual([2n ** 32n, 5n, 2n ** 40n + 10n]);
  });

  it('serialises atom.shared.cas spin locks across a block', () => {
    const out = device(4);
    launch(
      (k, p) => {
        const { word: counter, first } = zeroedSharedWord(k, 'counter', 'u32');
        // Increment with a compare-and-swap retry loop.
        const retry = k.label('retry');
        k.place(retry);
        const seen = k.ldShared('u32', k.reg('u32'), counter);
        const next = k.add('u32', k.reg('u32'), seen, 1);
        const old = k.atomCas('shared', 'b32', k.reg('u32'), counter, seen, next);
        k.braIf(k.setp('ne', 'b32', k.reg('pred'), old, seen), retry);
        k.barSync();
        k.predicated(first, () => k.stGlobal('u32', p.out, k.ldShared('u32', k.reg('u32'), counter)));
      },
      { block: 200 },
      { out },
    );
    expect(u32s(out, 1)[0]).toBe(200);
  });
});

describe('comparisons and selection', () => {
  const pairs: [number, number][] = [
    [1, 2],
    [2, 1],
    [1, 1],
    [Number.NaN, 1],
    [1, Number.NaN],
    [Number.NaN, Number.NaN],
    [-0, 0],
  ];
  // PTX's definitions: ordered comparisons are false with a NaN, the `u` forms true.
  const ordered: Record<string, (x: number, y: number) => boolean> = {
    eq: (x, y) => x === y,
    ne: (x, y) => x !== y,
    lt: (x, y) => x < y,
    le: (x, y) => x <= y,
    gt: (x, y) => x > y,
    ge: (x, y) => x >= y,
  };
  const unordered = (x: number, y: number) => Number.isNaN(x) || Number.isNaN(y);
  const reference: Record<string, (x: number, y: number) => boolean> = {
    ...Object.fromEntries(
      Object.entries(ordered).map(([c, f]) => [c, (x, y) => !unordered(x, y) && f(x, y)]),
    ),
    ...Object.fromEntries(
      Object.entries(ordered).map(([c, f]) => [`${c}u`, (x, y) => unordered(x, y) || f(x, y)]),
    ),
    num: (x, y) => !unordered(x, y),
    nan: unordered,
  };

  it('compares f32 with every setp comparison, NaN-aware ones included', () => {
    const cmps = Object.keys(reference) as CmpOp[];
    const got = perThread(
      pairs.map(([x, y]) => [F(x), F(y)]),
      cmps.length,
      (k, load, store) => {
        const x = load('f32', 0);
        const y = load('f32', 1);
        cmps.forEach((cmp, j) => {
          const p = k.setp(cmp, 'f32', k.reg('pred'), x, y);
          store('u32', j, k.selp('u32', k.reg('u32'), 1, 0, p));
        });
      },
    );
    pairs.forEach(([x, y], r) => {
      cmps.forEach((cmp, j) => {
        expect([cmp, x, y, got[r]![j] === 1n]).toEqual([cmp, x, y, reference[cmp]!(x, y)]);
      });
    });
  });

  it('compares integers as their type says: signed, unsigned, 64-bit', () => {
    const rows: Word[][] = [
      [-1, 1, -1n, 1n],
      [5, 5, 2n ** 40n, 2n ** 40n + 1n],
      [0x80000000, 0x7fffffff, -(2n ** 63n), 2n ** 63n - 1n],
    ];
    const got = perThread(rows, 8, (k, load, store) => {
      const a = load('u32', 0);
      const b = load('u32', 1);
      const c = load('u64', 2);
      const d = load('u64', 4);
      const flag = (word: number, p: ReturnType<KernelBuilder['reg']>) =>
        store('u32', word, k.selp('u32', k.reg('u32'), 1, 0, p as never));
      flag(0, k.setp('lt', 's32', k.reg('pred'), a as never, b as never));
      flag(1, k.setp('lo', 'u32', k.reg('pred'), a, b));
      flag(2, k.setp('hs', 'u32', k.reg('pred'), a, b));
      flag(3, k.setp('le', 's32', k.reg('pred'), a as never, b as never));
      flag(4, k.setp('lt', 's64', k.reg('pred'), c as never, d as never));
      flag(5, k.setp('lo', 'u64', k.reg('pred'), c, d));
      flag(6, k.setp('eq', 'b64', k.reg('pred'), c as never, d as never));
      flag(7, k.setp('ne', 'b32', k.reg('pred'), a as never, b as never));
    });
    const expected = rows.map(([a, b, c, d]) => {
      const [sa, sb] = [(a as number) | 0, (b as number) | 0];
      const [ua, ub] = [(a as number) >>> 0, (b as number) >>> 0];
      const [sc, sd] = [BigInt.asIntN(64, c as bigint), BigInt.asIntN(64, d as bigint)];
      const [uc, ud] = [BigInt.asUintN(64, c as bigint), BigInt.asUintN(64, d as bigint)];
      return [sa < sb, ua < ub, ua >= ub, sa <= sb, sc < sd, uc < ud, uc === ud, ua !== ub].map((v) =>
        BigInt(v),
      );
    });
    expect(got).toEqual(expected);
  });

  it('selects values of every width by a predicate', () => {
    // 64-bit values sit at even words: 8-byte accesses must be aligned.
    const row = (p: number): Word[] => [p, F(1.5), 2n ** 40n + 3n, 7n, F(-2.5), 0x12345678];
    const got = perThread([row(1), row(0)], 8, (k, load, store) => {
      const p = k.setp('ne', 'u32', k.reg('pred'), load('u32', 0), 0);
      store('f32', 0, k.selp('f32', k.reg('f32'), load('f32', 1), load('f32', 6), p));
      store('u64', 2, k.selp('u64', k.reg('u64'), load('u64', 2), load('u64', 4), p));
      store('u32', 4, k.selp('u32', k.reg('u32'), load('u32', 7), 99, p));
      const half = k.cvt('u16', 'u32', k.reg('u16'), load('u32', 7));
      const picked = k.selp('u16', k.reg('u16'), half, 0x4321, p);
      store('u32', 5, k.cvt('u32', 'u16', k.reg('u32'), picked));
    });
    expect(got[0]).toEqual([BigInt(F(1.5)), 0n, 3n, 2n ** 8n, 0x12345678n, 0x5678n, 0n, 0n]);
    expect(got[1]).toEqual([BigInt(F(-2.5)), 0n, 7n, 0n, 99n, 0x4321n, 0n, 0n]);
  });
});

describe('integer arithmetic', () => {
  it('does 64-bit add, sub, shifts, multiplies, division and remainder with carries and signs', () => {
    const rows: [bigint, bigint][] = [
      [0xffffffffn, 1n],
      [2n ** 32n, 1n],
      [-(2n ** 40n), 36n],
      [0x123456789abcdefn, 0xfedcba987654321n],
      [-7n, 2n],
      [2n ** 63n + 5n, 3n],
    ];
    const ops = 11;
    const got = perThread(rows, ops * 2, (k, load, store) => {
      const a = load('u64', 0);
      const b = load('u64', 2);
      const shift = k.cvt('u32', 'u64', k.reg('u32'), b);
      const results = [
        k.add('u64', k.reg('u64'), a, b),
        k.sub('u64', k.reg('u64'), b, a),
        k.shl('b64', k.reg('u64'), a, shift),
        k.shr('s64', k.reg('u64'), a, shift),
        k.shr('u64', k.reg('u64'), a, shift),
        k.mulLo('u64', k.reg('u64'), a, b),
        k.mulHi('u64', k.reg('u64'), a, b),
        k.div('s64', k.reg('u64'), a, b),
        k.rem('s64', k.reg('u64'), a, b),
        k.max('s64', k.reg('u64'), a, b),
        k.neg('s64', k.reg('u64'), a),
      ];
      results.forEach((r, j) => {
        store('u64', 2 * j, r);
      });
    });
    const u = (v: bigint) => BigInt.asUintN(64, v);
    const s = (v: bigint) => BigInt.asIntN(64, v);
    const count = (b: bigint) => (u(b) >= 64n ? 64n : u(b));
    rows.forEach(([a, b], r) => {
      const ua = u(a);
      const sb = s(b);
      const n = count(b);
      expect(Array.from({ length: ops }, (_, j) => pair(got[r]!, 2 * j))).toEqual([
        u(a + b),
        u(b - a),
        n >= 64n ? 0n : u(ua << n),
        u(s(a) >> n),
        n >= 64n ? 0n : ua >> n,
        u(ua * u(b)),
        (ua * u(b)) >> 64n,
        u(s(a) / sb),
        u(s(a) % sb),
        // biome-ignore lint/complexity/useMathMinMax: Math.max takes no bigints
        u(s(a) > sb ? s(a) : sb),
        u(-a),
      ]);
    });
  });

  it('multiplies 32-bit integers wide, high and low, and adds', () => {
    const rows: number[][] = [
      [0xffffffff, 0xffffffff, 0xfffffff0],
      [-3, 1 << 30, 7],
      [123456789, 987654321, 0xffffffff],
      [-65536, -65536, 1],
    ];
    const got = perThread(rows, 10, (k, load, store) => {
      const a = load('u32', 0);
      const b = load('u32', 1);
      const c = load('u32', 2);
      store('u64', 0, k.mulWide('u32', k.reg('u64'), a, b));
      store('u64', 2, k.mulWide('s32', k.reg('u64'), a as never, b as never));
      const wideC = k.cvt('u64', 'u32', k.reg('u64'), c);
      store('u64', 4, k.madWide('u32', k.reg('u64'), a, b, wideC));
      store('u32', 6, k.mulHi('u32', k.reg('u32'), a, b));
      store('u32', 7, k.mulHi('s32', k.reg('u32'), a as never, b as never));
      store('u32', 8, k.madLo('u32', k.reg('u32'), a, b, c));
      store('u32', 9, k.mulLo('s32', k.reg('u32'), a as never, b as never));
    });
    rows.forEach(([a, b, c], r) => {
      const [ua, ub, uc] = [a!, b!, c!].map((v) => BigInt(v >>> 0));
      const [sa, sb] = [a!, b!].map((v) => BigInt(v | 0));
      const row = got[r]!;
      expect(pair(row, 0)).toBe(ua! * ub!);
      expect(pair(row, 2, true)).toBe(sa! * sb!);
      expect(pair(row, 4)).toBe(ua! * ub! + uc!);
      expect(row[6]).toBe((ua! * ub!) >> 32n);
      expect(row[7]).toBe(BigInt.asUintN(32, (sa! * sb!) >> 32n));
      expect(row[8]).toBe(BigInt.asUintN(32, ua! * ub! + uc!));
      expect(row[9]).toBe(BigInt.asUintN(32, sa! * sb!));
    });
  });

  it('takes min and max of every integer type by its signedness, and wraps 16-bit arithmetic', () => {
    const got = perThread([[-2, 3, 0xfffe, 0x0003]], 8, (k, load, store) => {
      const a = load('u32', 0);
      const b = load('u32', 1);
      store('u32', 0, k.min('s32', k.reg('u32'), a as never, b as never));
      store('u32', 1, k.min('u32', k.reg('u32'), a, b));
      store('u32', 2, k.max('s32', k.reg('u32'), a as never, b as never));
      store('u32', 3, k.max('u32', k.reg('u32'), a, b));
      const ha = k.cvt('u16', 'u32', k.reg('u16'), load('u32', 2));
      const hb = k.cvt('u16', 'u32', k.reg('u16'), load('u32', 3));
      const widen = (r: RegOf<'u16'>) => k.cvt('u32', 'u16', k.reg('u32'), r);
      store('u32', 4, widen(k.min('s16', k.reg('u16') as never, ha as never, hb as never)));
      store('u32', 5, widen(k.min('u16', k.reg('u16'), ha, hb)));
      store('u32', 6, widen(k.add('u16', k.reg('u16'), ha, hb)));
      store('u32', 7, widen(k.mulLo('u16', k.reg('u16'), ha, hb)));
    });
    expect(got[0]).toEqual([-2 >>> 0, 3, 3, -2 >>> 0, 0xfffe, 3, 1, (0xfffe * 3) & 0xffff].map(BigInt));
  });

  it('divides 32-bit integers toward zero, and gives all ones for a zero divisor', () => {
    const rows = [
      [7, 2],
      [-7, 2],
      [0x80000000, -1],
      [5, 0],
    ];
    const got = perThread(rows, 4, (k, load, store) => {
      const a = load('u32', 0);
      const b = load('u32', 1);
      store('u32', 0, k.div('s32', k.reg('u32'), a as never, b as never));
      store('u32', 1, k.rem('s32', k.reg('u32'), a as never, b as never));
      store('u32', 2, k.div('u32', k.reg('u32'), a, b));
      store('u32', 3, k.rem('u32', k.reg('u32'), a, b));
    });
    expect(got).toEqual(
      [
        [3, 1, 3, 1],
        [-3, -1, Math.trunc((-7 >>> 0) / 2), (-7 >>> 0) % 2],
        [0x80000000, 0, 0, 0x80000000],
        [-1, 5, 0xffffffff, 5],
      ].map((row) => row.map((v) => BigInt(v >>> 0))),
    );
  });
});

describe('floating point', () => {
  it('rounds fma once: a tie after a double rounding is settled by the exact sum', () => {
    // (1 + 2^-12)² = 1 + 2^-11 + 2^-24 is halfway between two f32; a tiny addend decides.
    const a = 1 + 2 ** -12;
    const got = perThread(
      [
        [F(a), F(2 ** -80)],
        [F(a), F(-(2 ** -80))],
        [F(a), F(0)],
      ],
      1,
      (k, load, store) => {
        const x = load('f32', 0);
        store('f32', 0, k.fma('f32', k.reg('f32'), x, x, load('f32', 1)));
      },
    );
    expect(got.map((r) => bitsF32(r[0]!))).toEqual([1 + 2 ** -11 + 2 ** -23, 1 + 2 ** -11, 1 + 2 ** -11]);
  });

  it('rounds add, mul, div, sqrt and fma in every rounding mode', () => {
    const modes = ['rn', 'rz', 'rm', 'rp'] as const;
    const got = perThread(
      [
        [F(1), F(2 ** -30), F(3), F(1 + 2 ** -23)],
        [F(-1), F(-(2 ** -30)), F(-3), F(1 + 2 ** -23)],
      ],
      modes.length * 5,
      (k, load, store) => {
        const one = load('f32', 0);
        const tiny = load('f32', 1);
        const three = load('f32', 2);
        modes.forEach((rnd, j) => {
          store('f32', 5 * j, k.add('f32', k.reg('f32'), one, tiny, { rnd }));
          store('f32', 5 * j + 1, k.div('f32', k.reg('f32'), one, three, rnd));
          store('f32', 5 * j + 2, k.mul('f32', k.reg('f32'), three, load('f32', 3), { rnd }));
          const square = k.mul('f32', k.reg('f32'), three, three);
          store(
            'f32',
            5 * j + 3,
            k.sqrt(k.reg('f32'), k.abs('f32', k.reg('f32'), k.add('f32', k.reg('f32'), square, square)), rnd),
          );
          store('f32', 5 * j + 4, k.fma('f32', k.reg('f32'), three, tiny, one, { rnd }));
        });
      },
    );
    // Every exact result here is a double (1/3 and sqrt(18) are within 2^-52 of one, far from any f32 boundary).
    const exact = (sign: number) => [
      sign * (1 + 2 ** -30),
      1 / 3,
      sign * 3 * (1 + 2 ** -23),
      Math.sqrt(18),
      sign + 3 * 2 ** -30,
    ];
    const positive = modes.flatMap((mode) => exact(1).map((x) => roundTo(x, mode)));
    const negative = modes.flatMap((mode) => exact(-1).map((x) => roundTo(x, mode)));
    expect(got[0]!.map(bitsF32)).toEqual(positive);
    expect(got[1]!.map(bitsF32)).toEqual(negative);
  });

  it('gives -0 for an exact zero sum when rounding down, flushes subnormals with ftz', () => {
    const got = perThread([[F(3), F(-3), F(2 ** -130), F(1)]], 4, (k, load, store) => {
      store('f32', 0, k.add('f32', k.reg('f32'), load('f32', 0), load('f32', 1), { rnd: 'rm' }));
      store('f32', 1, k.add('f32', k.reg('f32'), load('f32', 0), load('f32', 1)));
      store('f32', 2, k.mul('f32', k.reg('f32'), load('f32', 2), load('f32', 3), { ftz: true }));
      store('f32', 3, k.mul('f32', k.reg('f32'), load('f32', 2), load('f32', 3)));
    });
    const [rm, rn, ftz, plain] = got[0]!.map(bitsF32);
    expect(Object.is(rm, -0)).toBe(true);
    expect(Object.is(rn, 0)).toBe(true);
    expect(ftz).toBe(0);
    expect(plain).toBe(2 ** -130);
  });

  it('takes min and max of f32 ignoring a NaN operand, or propagating it with .NaN', () => {
    const rows = [
      [F(1), F(2)],
      [F(Number.NaN), F(2)],
      [F(1), F(Number.NaN)],
      [F(-0), F(0)],
    ];
    const got = perThread(
      rows,
      4,
      (k, load, store) => {
        const a = load('f32', 0);
        const b = load('f32', 1);
        store('f32', 0, k.min('f32', k.reg('f32'), a, b));
        store('f32', 1, k.max('f32', k.reg('f32'), a, b));
        store('f32', 2, k.min('f32', k.reg('f32'), a, b, { nan: true }));
        store('f32', 3, k.max('f32', k.reg('f32'), a, b, { nan: true }));
      },
      { target: 'sm_80' },
    );
    expect(got.map((r) => r.map(bitsF32))).toEqual([
      [1, 2, 1, 2],
      [2, 2, Number.NaN, Number.NaN],
      [1, 1, Number.NaN, Number.NaN],
      [-0, 0, -0, 0],
    ]);
  });

  it('evaluates the approximate functions close to their exact values', () => {
    const xs = [0.5, 1.75, -3.25, 10];
    const got = perThread(
      xs.map((x) => [F(x)]),
      7,
      (k, load, store) => {
        const x = load('f32', 0);
        const positive = k.abs('f32', k.reg('f32'), x);
        store('f32', 0, k.sin(k.reg('f32'), x));
        store('f32', 1, k.cos(k.reg('f32'), x));
        store('f32', 2, k.ex2(k.reg('f32'), x));
        store('f32', 3, k.lg2(k.reg('f32'), positive));
        store('f32', 4, k.rsqrt(k.reg('f32'), positive));
        store('f32', 5, k.rcp(k.reg('f32'), x, 'approx'));
        store('f32', 6, k.tanh(k.reg('f32'), x));
      },
    );
    xs.forEach((x, r) => {
      const a = Math.abs(x);
      const want = [Math.sin(x), Math.cos(x), 2 ** x, Math.log2(a), 1 / Math.sqrt(a), 1 / x, Math.tanh(x)];
      got[r]!.forEach((w, j) => {
        expect(bitsF32(w)).toBeCloseTo(want[j]!, 6);
      });
    });
  });
});

/** The f32 rounding of `x` (a double) under a PTX rounding mode. */
function roundTo(x: number, mode: 'rn' | 'rz' | 'rm' | 'rp'): number {
  const near = Math.fround(x);
  if (mode === 'rn' || near === x) return near;
  const [lo, hi] = near < x ? [near, nextF32(near, 1)] : [nextF32(near, -1), near];
  return mode === 'rm' ? lo : mode === 'rp' ? hi : x > 0 ? lo : hi;
}

/** The f32 next to `x` in direction `dir` (+1 up, -1 down). */
function nextF32(x: number, dir: 1 | -1): number {
  const bits = new Uint32Array(Float32Array.of(x).buffer);
  bits[0] = x > 0 === dir > 0 ? bits[0]! + 1 : bits[0]! - 1;
  return new Float32Array(bits.buffer)[0]!;
}

describe('conversions', () => {
  const intRoundings = ['rni', 'rzi', 'rmi', 'rpi'] as const;

  it('converts f32 to s32 and u32 in every integer rounding, saturating, NaN to 0', () => {
    const xs = [2.5, -2.5, 3.5, -0.5, 0.49999997, 1e10, -1e10, Number.NaN, 4294967296];
    const got = perThread(
      xs.map((x) => [F(x)]),
      8,
      (k, load, store) => {
        const x = load('f32', 0);
        intRoundings.forEach((rnd, j) => {
          store('u32', j, k.cvt('s32', 'f32', k.reg('u32') as never, x, { rnd }) as never);
          store('u32', 4 + j, k.cvt('u32', 'f32', k.reg('u32'), x, { rnd }));
        });
      },
    );
    const round = {
      rni: (x: number) => (x - Math.floor(x) === 0.5 ? 2 * Math.round(x / 2) : Math.round(x)),
      rzi: Math.trunc,
      rmi: Math.floor,
      rpi: Math.ceil,
    };
    const clamp = (v: number, lo: number, hi: number) =>
      Number.isNaN(v) ? 0 : Math.min(Math.max(v, lo), hi);
    xs.forEach((x, r) => {
      const want = [
        ...intRoundings.map((m) => clamp(round[m](Math.fround(x)), -(2 ** 31), 2 ** 31 - 1) >>> 0),
        ...intRoundings.map((m) => clamp(round[m](Math.fround(x)), 0, 2 ** 32 - 1)),
      ];
      expect([x, ...got[r]!]).toEqual([x, ...want.map(BigInt)]);
    });
  });

  it('converts integers to f32 in every float rounding, 64-bit ones rounded once', () => {
    const modes = ['rn', 'rz', 'rm', 'rp'] as const;
    // 2^54 + 2^30 + 1 is just above the midpoint between two f32: rounding through a double would tie.
    const big = 2n ** 54n + 2n ** 30n + 1n;
    const got = perThread([[16777217, -16777217, big]], 12, (k, load, store) => {
      const u = load('u32', 0);
      const s = load('u32', 1);
      const w = load('u64', 2);
      modes.forEach((rnd, j) => {
        store('f32', j, k.cvt('f32', 'u32', k.reg('f32'), u, { rnd }));
        store('f32', 4 + j, k.cvt('f32', 's32', k.reg('f32'), s as never, { rnd }));
        store('f32', 8 + j, k.cvt('f32', 'u64', k.reg('f32'), w, { rnd }));
      });
    });
    const [below, above] = [2 ** 54, 2 ** 54 + 2 ** 31]; // neighbouring f32
    expect(got[0]!.map(bitsF32)).toEqual([
      16777216,
      16777216,
      16777216,
      16777218,
      -16777216,
      -16777216,
      -16777218,
      -16777216,
      above,
      below,
      below,
      above,
    ]);
  });

  it('converts between f32, f16 and bf16 with rounding, overflow and subnormals', () => {
    const xs = [
      1 + 2 ** -11,
      1 + 2 ** -11 + 2 ** -20,
      65520,
      1e-8,
      5.97e-8,
      -2.5,
      1 + 2 ** -8,
      1 + 2 ** -8 + 2 ** -20,
    ];
    const got = perThread(
      xs.map((x) => [F(x)]),
      5,
      (k, load, store) => {
        const x = load('f32', 0);
        const widen = (r: RegOf<'f16'>) => k.cvt('u32', 'u16', k.reg('u32'), r as never);
        const half = k.cvt('f16', 'f32', k.reg('f16'), x, { rnd: 'rn' });
        store('u32', 0, widen(half));
        store('u32', 1, widen(k.cvt('f16', 'f32', k.reg('f16'), x, { rnd: 'rz' })));
        store('f32', 2, k.cvt('f32', 'f16', k.reg('f32'), half));
        const brain = k.cvt('bf16', 'f32', k.reg('bf16'), x, { rnd: 'rn' });
        store('u32', 3, widen(brain));
        store('f32', 4, k.cvt('f32', 'bf16', k.reg('f32'), brain));
      },
      { target: 'sm_80', version: '7.1' },
    );
    expect(
      got.map((r) => [Number(r[0]), Number(r[1]), bitsF32(r[2]!), Number(r[3]), bitsF32(r[4]!)]),
    ).toEqual([
      [0x3c00, 0x3c00, 1, 0x3f80, 1],
      [0x3c01, 0x3c00, 1 + 2 ** -10, 0x3f80, 1],
      [0x7c00, 0x7bff, Number.POSITIVE_INFINITY, 0x4780, 65536],
      // 1e-8 is below half the smallest f16; its f32 bits 0x322bcc77 round up to bf16 0x322c.
      [0, 0, 0, 0x322c, bitsF32(0x322c0000n)],
      // 5.97e-8 is just above the smallest f16 subnormal, 2^-24.
      [1, 1, 2 ** -24, 0x3380, 2 ** -24],
      [0xc100, 0xc100, -2.5, 0xc020, -2.5],
      // 1 + 2^-8 is an f16, and halfway between two bf16.
      [0x3c04, 0x3c04, 1 + 2 ** -8, 0x3f80, 1],
      [0x3c04, 0x3c04, 1 + 2 ** -8, 0x3f81, 1 + 2 ** -7],
    ]);
  });

  it('extends, truncates and saturates between integer widths', () => {
    const got = perThread([[-5, -70000, 2n ** 40n + 9n]], 8, (k, load, store) => {
      const a = load('u32', 0);
      const b = load('u32', 1);
      const w = load('u64', 2);
      store('u64', 0, k.cvt('s64', 's32', k.reg('u64'), a as never));
      store('u64', 2, k.cvt('u64', 'u32', k.reg('u64'), a));
      store('u32', 4, k.cvt('u32', 'u64', k.reg('u32'), w));
      store('u32', 5, k.cvt('u32', 's32', k.reg('u32'), a as never, { sat: true }));
      const short = k.cvt('s16', 's32', k.reg('s16'), b as never);
      store('u32', 6, k.cvt('s32', 's16', k.reg('s32'), short) as never);
      store(
        'u32',
        7,
        k.cvt(
          's32',
          's16',
          k.reg('s32'),
          k.cvt('s16', 's32', k.reg('s16'), b as never, { sat: true }),
        ) as never,
      );
    });
    const row = got[0]!;
    expect(pair(row, 0, true)).toBe(-5n);
    expect(pair(row, 2)).toBe(0xfffffffbn);
    expect(row.slice(4)).toEqual([9n, 0n, BigInt(-4464 >>> 0), BigInt(-32768 >>> 0)]);
  });

  it('rounds f32 to integral values and saturates to [0, 1]', () => {
    const xs = [2.5, -2.7, 1.5, Number.NaN];
    const got = perThread(
      xs.map((x) => [F(x)]),
      3,
      (k, load, store) => {
        const x = load('f32', 0);
        store('f32', 0, k.cvt('f32', 'f32', k.reg('f32'), x, { rnd: 'rni' }));
        store('f32', 1, k.cvt('f32', 'f32', k.reg('f32'), x, { rnd: 'rzi' }));
        store('f32', 2, k.cvt('f32', 'f32', k.reg('f32'), x, { sat: true }));
      },
    );
    expect(got.map((r) => r.map(bitsF32))).toEqual([
      [2, 2, 1],
      [-3, -2, 0],
      [2, 1, 1],
      [Number.NaN, Number.NaN, 0],
    ]);
  });
});

describe('memory', () => {
  it('moves .v2 and .v4 vectors through global and shared memory, and reads through ld.global.nc with an L2 prefetch size', () => {
    const inp = device(Uint32Array.from({ length: 64 * 4 }, (_, i) => i * 3 + 1));
    const out = device(2 * 64 * 4 * 4);
    launch(
      (k, p) => {
        const tile = k.sharedArray('tile', 'u32', 64 * 4, 16);
        const i = k.tid();
        const v = k.ldGlobal('u32', k.regs('u32', 4), k.elementAddress(p.inp, i, 16), {
          nc: true,
          prefetch: 128,
        });
        const slot = k.madLo('u32', k.reg('u32'), i, 16, k.sharedAddress(tile));
        k.stShared('u32', addr(slot), v);
        k.barSync();
        // Thread i reads thread (63 - i)'s vector back as two .v2 halves and as one .b64 pair.
        const mirror = k.sub('u32', k.reg('u32'), 63, i);
        const from = k.madLo('u32', k.reg('u32'), mirror, 16, k.sharedAddress(tile));
        const lo = k.ldShared('u32', k.regs('u32', 2), addr(from));
        const hi = k.ldShared('u64', k.reg('u64'), addr(from, 8));
        const dst = k.elementAddress(p.out, i, 16);
        k.stGlobal('u32', dst, lo);
        k.stGlobal('u64', addr(dst, 8), hi);
        // A second copy with .v4 stores of f32 registers holding the same bits.
        const bits = k.ldShared('f32', k.regs('f32', 4), addr(from));
        k.stGlobal('f32', addr(k.elementAddress(p.out, i, 16), 64 * 16), bits);
      },
      { block: 64 },
      { out, inp },
    );
    const src = u32s(inp, 256);
    const mirrored = Array.from({ length: 256 }, (_, j) => src[(63 - (j >> 2)) * 4 + (j & 3)]!);
    expect([...u32s(out, 512)]).toEqual([...mirrored, ...mirrored]);
  });

  it('moves 16-bit values and vectors of them', () => {
    const inp = device(
      Uint32Array.from({ length: 32 }, (_, i) => (0x1000 + 2 * i) | ((0x1001 + 2 * i) << 16)),
    );
    const out = device(32 * 4);
    launch(
      (k, p) => {
        const i = k.tid();
        const pairOf = k.ldGlobal('u16', k.regs('u16', 2), k.elementAddress(p.inp, i, 4));
        // Swap the halves on the way out, and store the first one again as a scalar at the end.
        k.stGlobal('u16', k.elementAddress(p.out, i, 4), [pairOf[1], pairOf[0]] as const);
        const last = k.setp('eq', 'u32', k.reg('pred'), i, 31);
        k.predicated(last, () => k.stGlobal('u16', addr(p.out, 126), pairOf[0]));
      },
      { block: 32 },
      { out, inp },
    );
    const got = new Uint16Array(u32s(out, 32).buffer);
    const want = Array.from({ length: 64 }, (_, j) => 0x1000 + (j ^ 1));
    want[63] = 0x1000 + 62;
    expect([...got]).toEqual(want);
  });

  it('gives dynamic shared memory its launch size, after the static variables', () => {
    const n = 96;
    const out = device(n * 4);
    launch(
      (k, p, m) => {
        const flag = k.sharedArray('flag', 'u32', 3);
        const dynamic = m.dynamicShared('scratch');
        const i = k.tid();
        k.stShared('u32', addr(k.madLo('u32', k.reg('u32'), i, 4, k.sharedAddress(dynamic))), i);
        k.predicated(k.setp('eq', 'u32', k.reg('pred'), i, 0), () => k.stShared('u32', flag, 1000));
        k.barSync();
        const mirror = k.sub('u32', k.reg('u32'), n - 1, i);
        const v = k.ldShared(
          'u32',
          k.reg('u32'),
          addr(k.madLo('u32', k.reg('u32'), mirror, 4, k.sharedAddress(dynamic))),
        );
        k.stGlobal('u32', at(k, p.out), k.add('u32', k.reg('u32'), v, k.ldShared('u32', k.reg('u32'), flag)));
      },
      { block: n, sharedBytes: n * 4 },
      { out },
    );
    expect([...u32s(out, n)]).toEqual(Array.from({ length: n }, (_, i) => n - 1 - i + 1000));
  });

  it('takes an L2 prefetch as a hint that changes nothing, but only inside an allocation', () => {
    const buf = device(Uint32Array.of(5, 6, 7, 8));
    launch(
      (k, p) => {
        k.prefetchL2(addr(p.out, 15));
        k.stGlobal('u32', p.out, 9);
      },
      { block: 1 },
      { out: buf },
    );
    expect([...u32s(buf, 4)]).toEqual([9, 6, 7, 8]);
    expect(() => launch((k, p) => k.prefetchL2(addr(p.out, 1 << 28)), { block: 1 }, { out: buf })).toThrow(
      /outside every allocation/,
    );
  });

  it('rejects a vector access that is not aligned to its size', () => {
    const buf = device(64);
    expect(() =>
      launch((k, p) => void k.ldGlobal('f32', k.regs('f32', 4), addr(p.out, 4)), { block: 1 }, { out: buf }),
    ).toThrow(/not aligned to 16 bytes/);
  });

  it('rejects accesses past an allocation or past shared memory', () => {
    const buf = device(64);
    expect(() =>
      launch((k, p) => k.stGlobal('u32', addr(p.out, 1 << 28), 1), { block: 1 }, { out: buf }),
    ).toThrow(/outside every allocation/);
    expect(() =>
      launch(
        (k) => {
          const tile = k.sharedArray('tile', 'u32', 4);
          k.stShared('u32', addr(tile, 16), 1);
        },
        { block: 1 },
        { out: buf },
      ),
    ).toThrow(/outside the block's 16 bytes/);
  });
});

describe('scheduling and special registers', () => {
  it('reports 3-D thread, block, lane and warp indices and lane masks', () => {
    const block: [number, number, number] = [8, 5, 2];
    const grid: [number, number, number] = [2, 1, 3];
    const perBlock = 80;
    const out = device(6 * perBlock * 8 * 4);
    launch(
      (k, p) => {
        const linear = k.madLo(
          'u32',
          k.reg('u32'),
          k.madLo('u32', k.reg('u32'), k.tid('z'), k.ntid('y'), k.tid('y')),
          k.ntid('x'),
          k.tid('x'),
        );
        const blockIndex = k.madLo('u32', k.reg('u32'), k.ctaid('z'), k.nctaid('x'), k.ctaid('x'));
        const row = k.elementAddress(p.out, k.madLo('u32', k.reg('u32'), blockIndex, perBlock, linear), 32);
        const values = [
          linear,
          k.laneid(),
          k.special('%warpid'),
          k.special('%lanemask_lt'),
          k.special('%lanemask_ge'),
          k.ctaid('z'),
          k.nctaid('z'),
          k.special('%nwarpid'),
        ];
        values.forEach((v, j) => {
          k.stGlobal('u32', addr(row, 4 * j), v);
        });
      },
      { block, grid },
      { out },
    );
    const got = u32s(out, 6 * perBlock * 8);
    for (let b = 0; b < 6; b++) {
      for (let i = 0; i < perBlock; i++) {
        const lane = i % 32;
        const row = [...got.slice((b * perBlock + i) * 8, (b * perBlock + i + 1) * 8)];
        expect(row).toEqual([
          i,
          lane,
          i >> 5,
          ((1 << lane) - 1) >>> 0,
          ~((1 << lane) - 1) >>> 0,
          Math.floor(b / 2),
          3,
          3,
        ]);
      }
    }
  });

  it('releases a named barrier with a thread count when that many threads arrive', () => {
    // Warps 0-1 hand values through barrier 1, warps 2-3 through barrier 2, each of 64 threads.
    const out = device(128 * 4);
    launch(
      (k, p) => {
        const tile = k.sharedArray('tile', 'u32', 128);
        const i = k.tid();
        k.stShared(
          'u32',
          addr(k.madLo('u32', k.reg('u32'), i, 4, k.sharedAddress(tile))),
          k.mulLo('u32', k.reg('u32'), i, 7),
        );
        const low = k.setp('lt', 'u32', k.reg('pred'), i, 64);
        k.ifElse(
          low,
          () => k.barSync(1, 64),
          () => k.barSync(2, 64),
        );
        const partner = k.xor('b32', k.reg('u32'), i, 63);
        const v = k.ldShared(
          'u32',
          k.reg('u32'),
          addr(k.madLo('u32', k.reg('u32'), partner, 4, k.sharedAddress(tile))),
        );
        k.stGlobal('u32', at(k, p.out), v);
      },
      { block: 128 },
      { out },
    );
    expect([...u32s(out, 128)]).toEqual(Array.from({ length: 128 }, (_, i) => (i ^ 63) * 7));
  });

  it('reports threads that exited while others wait at a block-wide barrier', () => {
    const out = device(4);
    expect(() =>
      launch(
        (k) => {
          k.predicated(k.setp('ge', 'u32', k.reg('pred'), k.tid(), 16), () => k.ret());
          k.barSync();
        },
        { block: 64 },
        { out },
      ),
    ).toThrow(/48 threads exited while others wait at a barrier/);
  });

  it('counts the instructions it executes', () => {
    const out = device(4);
    const before = interpreter.executed;
    launch((k) => k.forRange(k.reg('u32'), 0, 10, 1, () => {}), { block: 32, grid: 2 }, { out });
    // Per thread: 5 to load the parameters, mov, then 10 × (add, setp, bra), then ret.
    expect(interpreter.executed - before).toBe(64 * (5 + 1 + 30 + 1));
  });
});

describe('instructions the builder does not emit yet', () => {
  /** Runs PTX text whose entry `bits` writes 32-bit results to `out`; returns them. */
  function runText(body: string, results: number): number[] {
    const out = device(results * 4);
    const image = [
      '.version 8.0',
      '.target sm_75',
      '.address_size 64',
      '.visible .entry bits(',
      '  .param .u64 bits_param_out',
      ')',
      '{',
      '  .reg .pred %p<2>;',
      '  .reg .b32 %r<16>;',
      '  .reg .b64 %rd<4>;',
      '  ld.param.u64 %rd0, [bits_param_out];',
      '  cvta.to.global.u64 %rd1, %rd0;',
      ...body.trim().split('\n'),
      '  ret;',
      '}',
    ].join('\n');
    interpreter.run(image, {
      entry: 'bits',
      grid: [1, 1, 1],
      block: [1, 1, 1],
      sharedBytes: 0,
      stream: 0n,
      kernelParams: 0n,
      pointers: [],
      slots: [],
      args: { out: out.ptr },
    });
    return [...u32s(out, results)];
  }

  it('counts, reverses, extracts and inserts bits', () => {
    const got = runText(
      `
      mov.b32 %r0, 0xf0f00001;
      popc.b32 %r1, %r0;
      clz.b32 %r2, %r0;
      brev.b32 %r3, %r0;
      bfe.u32 %r4, %r0, 28, 8;
      bfe.s32 %r5, %r0, 28, 4;
      bfi.b32 %r6, 0x5, %r0, 4, 3;
      mov.b64 %rd2, 0x00000001ffffffff;
      popc.b64 %r7, %rd2;
      clz.b64 %r8, %rd2;
      st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
      st.global.v4.u32 [%rd1+16], {%r5, %r6, %r7, %r8};`,
      8,
    );
    expect(got).toEqual([9, 0, 0x80000f0f, 0xf, 0xffffffff, 0xf0f00051, 33, 31]);
  });

  it('permutes bytes and takes 4-byte dot products, signed or not', () => {
    const got = runText(
      `
      mov.b32 %r0, 0x80ff7f01;
      mov.b32 %r1, 0x04030201;
      prmt.b32 %r2, %r0, %r1, 0x5140;
      prmt.b32 %r3, %r0, %r1, 0x0b0a;
      dp4a.u32.u32 %r4, %r0, %r1, 7;
      dp4a.s32.s32 %r5, %r0, %r1, -3;
      dp4a.u32.s32 %r6, %r1, %r0, 0;
      dp4a.s32.u32 %r7, %r0, %r0, 0;
      st.global.v4.u32 [%rd1], {%r2, %r3, %r4, %r5};
      st.global.v2.u32 [%rd1+16], {%r6, %r7};`,
      6,
    );
    // Bytes of {r1, r0} by selector nibble; 8 spreads the chosen byte's sign.
    expect(got[0]).toBe(0x027f0101);
    expect(got[1]).toBe(0x01ff01ff);
    expect(got.slice(2)).toEqual([
      7 + 1 * 1 + 127 * 2 + 255 * 3 + 128 * 4,
      (-3 + 1 * 1 + 127 * 2 - 1 * 3 - 128 * 4) >>> 0,
      (1 * 1 + 2 * 127 + 3 * -1 + 4 * -128) >>> 0,
      (1 * 1 + 127 * 127 - 1 * 255 - 128 * 128) >>> 0,
    ]);
  });

  it('rejects instructions it does not know, naming them', () => {
    expect(() => runText('bmsk.clamp.b32 %r0, %r1, %r2;', 1)).toThrow(/unsupported instruction: bmsk/);
  });
});
