import {
  bindingType,
  loadScalar,
  narrowFunctions,
  quadType,
  type Storage,
  unpackQuad,
  unpackVector,
  vectorElements,
} from '../wgsl/half.js';
import { ShaderModule, type WgslType } from '../wgsl/module.js';
import {
  declareBindings,
  decodeWorkgroup,
  emitFunctions,
  type OperandReads,
  type Output,
  outputKey,
  storageKey,
} from './matmulWgsl.js';

// The streaming matrix products, memory-bound by design: GEMV (M = 1) and
// small M, each workgroup streaming a block of b with coalesced vec4 loads.
// A half b (weight-only half: `b` in f16 or bf16, a and y in f32) is read as
// u32 words: along K (transB) one vec4<u32> load brings 8 halves, the 16
// bytes a vec4<f32> load brings, so a K step covers 8 elements; along N two
// words bring the 4 columns of a lane. Halves are widened in registers and
// every sum stays f32.

// Streaming shapes, as measured fastest on an H100 (Dawn/Vulkan).
export const SMALL_M_DOT: StreamShape = { group: 32, cols: 4, unroll: 2 };
export const AXPY_LANES = 16;
/** Rows of a per small-M streaming workgroup. */
export const STREAM_ROWS = 4;

// ---- streaming kernels: small M -------------------------------------------------

const STREAM_THREADS = 256;

/** Shape of a streaming workgroup (see dotBody and axpyBody). */
export interface StreamShape {
  /** transB: threads sharing one row of b along K; otherwise vec4 (or scalar) column lanes. */
  readonly group: number;
  /** transB: columns (rows of b) per thread, each loaded a vector serving all of them. */
  readonly cols: number;
  /** Loop bodies per iteration: independent loads in flight. */
  readonly unroll: number;
}

export interface StreamVariant extends OperandReads {
  /** Rows of a per workgroup. */
  readonly rows: number;
  readonly shape: StreamShape;
}

/** Elements of K per vector step of b stored [N, K]: 4, or 8 halves per vec4<u32>. */
export function dotStep(b: Storage): number {
  return vectorElements(b);
}

/** WGSL binding type of b: along K (transB) vec4 loads; along N quads (vec4<f32> or vec2<u32>). */
function bBinding(transB: boolean, vecB: boolean, b: Storage): WgslType {
  if (!vecB) return bindingType(b, false);
  return transB ? bindingType(b, true) : quadType(b);
}

/**
 * WGSL: the vec4<f32> pieces of row `row` of op(a) at vector step `k` of
 * `per` elements (per / 4 pieces), from vec4 loads or from scalars.
 */
function aPieces(per: number, vecA: boolean, scalarAt: (k: string) => string, vecBase: string, k: string) {
  return Array.from({ length: per / 4 }, (_, j) => {
    if (vecA) return `a[${vecBase} + (${k}) * ${per / 4}u + ${j}u]`;
    return `vec4<f32>(${[0, 1, 2, 3].map((i) => scalarAt(`(${k}) * ${per}u + ${4 * j + i}u`)).join(', ')})`;
  });
}

/** WGSL: Σ dot(a piece, b piece) over the pieces of one vector step. */
function dotPieces(a: readonly string[], b: readonly string[]): string {
  return a.map((x, j) => `dot(${x}, ${b[j]})`).join(' + ');
}

/** Output columns one streaming workgroup produces. */
export function streamColumns(v: { transB: boolean; vecB: boolean; shape: StreamShape }): number {
  if (v.transB) return (STREAM_THREADS / v.shape.group) * v.shape.cols;
  return v.shape.group * (v.vecB ? 4 : 1);
}

/** WGSL of op(a)(row, k) from a scalar binding. */
function aScalar(v: StreamVariant, row: string, k: string): string {
  return v.transA ? `a[aBase + (${k}) * params.m + ${row}]` : `a[aBase + ${row} * params.k + ${k}]`;
}

/**
 * WGSL: a loop over `k` from `first` below `end` in steps of `stride`, its
 * body `step(k)` repeated `unroll` times per iteration (independent loads in
 * flight), then the remainder one at a time.
 */
export function streamLoop(
  first: string,
  end: string,
  stride: number,
  unroll: number,
  step: (k: string) => string,
): string {
  const main =
    unroll > 1
      ? `for (; k + ${stride * (unroll - 1)}u < ${end}; k += ${stride * unroll}u) {
      ${Array.from({ length: unroll }, (_, i) => step(`k + ${stride * i}u`)).join('\n      ')}
    }
    `
      : '';
  return `var k = ${first};
    ${main}for (; k < ${end}; k += ${stride}u) {
      ${step('k')}
    }`;
}

/** WGSL: a tree sum over `count` threads `stride` apart of `values` slots of red (one barrier per level). */
function treeReduce(values: number, count: number, stride: number, self: string): string {
  const at = (i: number, o: string) => `red[${i * STREAM_THREADS}u + tid${o}]`;
  return `${Array.from({ length: values }, (_, i) => `${at(i, '')} = acc${i};`).join('\n  ')}
  workgroupBarrier();
  for (var s = ${count / 2}u; s > 0u; s >>= 1u) {
    if (${self} < s) {
      ${Array.from({ length: values }, (_, i) => `${at(i, '')} += ${at(i, ` + s * ${stride}u`)};`).join('\n      ')}
    }
    workgroupBarrier();
  }`;
}

/**
 * transB (b is [N, K], the usual weight layout): each output is a dot
 * product of a row of a with a row of b. `group` threads share rows of b and
 * walk K in vec4 steps (coalesced), each thread holding `cols` rows of b and
 * `rows` rows of a in registers, so each loaded vector is reused across the
 * other operand's rows. One tree reduction in workgroup memory sums the group.
 */
function dotBody(v: StreamVariant): string {
  const { group, cols, unroll } = v.shape;
  const rows = Array.from({ length: v.rows }, (_, r) => r);
  const cs = Array.from({ length: cols }, (_, c) => c);
  const acc = (r: number, c: number) => `acc${r * cols + c}`;
  const per = dotStep(v.b);
  const step = (k: string) => {
    const bs = cs.map((c) =>
      v.vecB
        ? `let b${c} = b[bRow${c} / ${per}u + ${k}];`
        : `let b${c} = ${loadScalar(v.b, 'b', `bRow${c} + ${k}`)};`,
    );
    const bPieces = cs.map((c) => unpackVector(v.b, `b${c}`));
    const terms = rows.map((r) => {
      if (!v.vecB) {
        const fmas = cs.map((c) => `${acc(r, c)} = fma(a${r}, b${c}, ${acc(r, c)});`);
        return `{ let a${r} = ${aScalar(v, `row${r}`, k)}; ${fmas.join(' ')} }`;
      }
      const as = aPieces(
        per,
        v.vecA,
        (kk) => aScalar(v, `row${r}`, kk),
        `(aBase + row${r} * params.k) / 4u`,
        k,
      );
      const names = as.map((_, j) => `a${r}_${j}`);
      const fmas = cs.map((c) => `${acc(r, c)} += ${dotPieces(names, bPieces[c]!)};`);
      return `{ ${as.map((x, j) => `let ${names[j]} = ${x};`).join(' ')} ${fmas.join(' ')} }`;
    });
    return `{\n        ${bs.join(' ')}\n        ${terms.join('\n        ')}\n      }`;
  };
  const values = v.rows * cols;
  return `
  let g = tid % ${group}u;
  let n0 = block / params.tilesM * ${streamColumns(v)}u + tid / ${group}u * ${cols}u;
  let m0 = block % params.tilesM * ${v.rows}u;
  ${rows.map((r) => `let row${r} = min(m0 + ${r}u, params.m - 1u);`).join('\n  ')}
  // Rows of b past N are clamped (read, never written).
  ${cs.map((c) => `let bRow${c} = bBase + min(n0 + ${c}u, params.n - 1u) * params.k;`).join('\n  ')}
  ${Array.from({ length: values }, (_, i) => `var acc${i} = 0.0;`).join('\n  ')}
  if (n0 < params.n) {
    // K in vector (or scalar) units; kBegin and kPerSplit are multiples of ${per}.
    ${streamLoop(`${v.vecB ? `kBegin / ${per}u` : 'kBegin'} + g`, v.vecB ? `kEnd / ${per}u` : 'kEnd', group, unroll, step)}
  }
  ${treeReduce(values, group, 1, 'g')}
  if (g == 0u) {
    ${rows
      .flatMap((r) =>
        cs.map(
          (c) =>
            `if (m0 + ${r}u < params.m && n0 + ${c}u < params.n) { emit1(yBase + (m0 + ${r}u) * params.n + n0 + ${c}u, red[${(r * cols + c) * STREAM_THREADS}u + tid], yOff); }`,
        ),
      )
      .join('\n    ')}
  }`;
}

/**
 * No transB (b is [K, N]): `group` lanes own 4 adjacent columns each (one
 * vec4 of a row of b, consecutive lanes on consecutive vectors); the other
 * threads split K into slices. Each b vector is loaded once and multiplied by
 * every row's a(row, k) (one address per warp: a broadcast). Then one tree
 * reduction over the slices.
 */
function axpyBody(v: StreamVariant): string {
  const { group: lanes, unroll } = v.shape;
  const slices = STREAM_THREADS / lanes;
  const width = v.vecB ? 4 : 1;
  const rows = Array.from({ length: v.rows }, (_, r) => r);
  const type = v.vecB ? 'vec4<f32>' : 'f32';
  const splat = (x: string) => (v.vecB ? `vec4<f32>(${x})` : x);
  const step = (k: string) => {
    const bv = v.vecB
      ? unpackQuad(v.b, `b[(bBase + (${k}) * params.n) / 4u + col / 4u]`)
      : loadScalar(v.b, 'b', `bBase + (${k}) * params.n + col`);
    const terms = rows.map((r) => `acc${r} = fma(${splat(aScalar(v, `row${r}`, k))}, bv, acc${r});`);
    return `{ let bv = ${bv}; ${terms.join(' ')} }`;
  };
  const emit = (r: number) => {
    const value = `red[${r * STREAM_THREADS}u + tid]`;
    const idx = `yBase + (m0 + ${r}u) * params.n + col`;
    return v.vecB ? `emit4(${idx}, col, ${value}, yOff);` : `emit1(${idx}, ${value}, yOff);`;
  };
  return `
  let lane = tid % ${lanes}u;
  let slice = tid / ${lanes}u;
  let col = block / params.tilesM * ${lanes * width}u + lane * ${width}u;
  let m0 = block % params.tilesM * ${v.rows}u;
  ${rows.map((r) => `let row${r} = min(m0 + ${r}u, params.m - 1u);`).join('\n  ')}
  ${rows.map((r) => `var acc${r} = ${type}();`).join('\n  ')}
  if (col < params.n) {
    ${streamLoop('kBegin + slice', 'kEnd', slices, unroll, step)}
  }
  ${treeReduce(v.rows, slices, lanes, 'slice')}
  if (slice == 0u && col < params.n) {
    ${rows.map((r) => `if (m0 + ${r}u < params.m) { ${emit(r)} }`).join('\n    ')}
  }`;
}

export function streamShader(v: StreamVariant, kernel: string) {
  const { group, cols, unroll } = v.shape;
  const key = [
    'matmul',
    `smallm/rows${v.rows}`,
    v.transB ? `dot/g${group}c${cols}u${unroll}` : `axpy/l${group}u${unroll}`,
    `tA${+v.transA}tB${+v.transB}`,
    `a${v.vecA ? 4 : 1}b${v.vecB ? 4 : 1}${storageKey(v.b)}`,
    outputKey(v.out),
  ].join('/');
  const values = v.transB ? v.rows * cols : v.rows;
  const type = v.transB || !v.vecB ? 'f32' : 'vec4<f32>';
  const code = () => {
    const module = new ShaderModule();
    declareBindings(module, v.vecA, bBinding(v.transB, v.vecB, v.b), v.out, v.b);
    module.workgroupArray('red', type, values * STREAM_THREADS);
    module.declare(emitFunctions(v.out));
    return module.build(
      undefined,
      STREAM_THREADS,
      `  ${decodeWorkgroup()}
  ${v.transB ? dotBody(v) : axpyBody(v)}`,
      '@builtin(local_invocation_index) tid: u32',
    );
  };
  return { key, kernel, code };
}

// ---- GEMV ----------------------------------------------------------------------

/** The same as the streaming kernels': `treeReduce` lays values out by it. */
const GEMV_THREADS = STREAM_THREADS;
/** transB: rows of b (outputs) per workgroup; every invocation reads all of them. */
const GEMV_DOT_COLS = 8;
const GEMV_DOT_UNROLL = 2;
/** No transB: K steps per loop iteration, each a load of b in flight. */
const GEMV_AXPY_UNROLL = 8;
/** No transB: bytes of a row of b one workgroup reads, widest first while the workgroups fill the GPU. */
export const GEMV_AXPY_ROW_BYTES = [256, 128, 64];

export interface GemvVariant {
  readonly transB: boolean;
  /** vec4 loads of a (transB only) and of b. */
  readonly vecA: boolean;
  readonly vecB: boolean;
  /** No transB: invocations side by side along a row of b, each on `vecB ? 4 : 1` columns. */
  readonly lanes: number;
  /** Reduce with subgroup operations (the `subgroups` feature). */
  readonly subgroups: boolean;
  /** How b is stored (f32, or halves in u32 words). */
  readonly b: Storage;
  /**
   * How a is stored: f32, or (with b in the same half) halves in u32 words,
   * read in place rather than widened into scratch by another dispatch.
   */
  readonly a?: Storage;
  /**
   * How y is stored: f32, or (transB, one K split, no epilogue, N even) halves
   * in u32 words, two adjacent outputs rounded and stored per word.
   */
  readonly y?: Storage;
  readonly out: Output;
}

/** Output columns one GEMV workgroup produces. */
export function gemvColumns(v: Pick<GemvVariant, 'transB' | 'vecB' | 'lanes'>): number {
  return v.transB ? GEMV_DOT_COLS : v.lanes * (v.vecB ? 4 : 1);
}

/**
 * WGSL: sets the workgroup flag `scattered` unless every subgroup is full and
 * numbered in invocation order (subgroup_invocation_id = local index mod
 * subgroup size). WGSL does not promise that layout, though drivers use it;
 * where it fails, the kernel takes its workgroup-memory path instead.
 */
export const CHECK_SUBGROUP_LAYOUT = `let inOrder = subgroupAll(sgid == tid % sgs);
  let full = subgroupAdd(1u) == sgs;
  if (!(inOrder && full)) { atomicStore(&scattered, 1u); }`;

/**
 * transB (b is [N, K]): all invocations walk K together over the same
 * GEMV_DOT_COLS rows of b (a warp reads 512 contiguous bytes of each), so
 * every invocation holds partial sums of the same outputs: one subgroupAdd
 * per output, then one value per subgroup through workgroup memory.
 */
function gemvDotBody(v: GemvVariant): string {
  const cs = Array.from({ length: GEMV_DOT_COLS }, (_, c) => c);
  const per = dotStep(v.b);
  const aStorage = v.a ?? 'f32';
  const step = (k: string) => {
    if (!v.vecB) {
      const terms = cs.map((c) => `acc${c} = fma(av, ${loadScalar(v.b, 'b', `bRow${c} + ${k}`)}, acc${c});`);
      return `{ let av = ${loadScalar(aStorage, 'a', `aBase + ${k}`)};
        ${terms.join('\n        ')} }`;
    }
    // A half a (with b in the same half) is one vector of 8 per step, as b is.
    const as =
      aStorage !== 'f32' && v.vecA
        ? unpackVector(aStorage, `a[aBase / ${per}u + ${k}]`)
        : aPieces(per, v.vecA, (kk) => loadScalar(aStorage, 'a', `aBase + ${kk}`), 'aBase / 4u', k);
    const names = as.map((_, j) => `av${j}`);
    const terms = cs.map(
      (c) =>
        `{ let bw = b[bRow${c} / ${per}u + ${k}]; acc${c} += ${dotPieces(names, unpackVector(v.b, 'bw'))}; }`,
    );
    return `{ ${as.map((x, j) => `let ${names[j]} = ${x};`).join(' ')}
        ${terms.join('\n        ')} }`;
  };
  const subgroupSum = `
  ${CHECK_SUBGROUP_LAYOUT}
  if (workgroupUniformLoad(&scattered) == 0u) {
    ${cs.map((c) => `let s${c} = subgroupAdd(acc${c});`).join('\n    ')}
    if (sgid == 0u) {
      ${cs.map((c) => `red[tid / sgs * ${GEMV_DOT_COLS}u + ${c}u] = s${c};`).join('\n      ')}
    }
    workgroupBarrier();
    if (tid < ${GEMV_DOT_COLS}u) {
      for (var j = 0u; j < ${GEMV_THREADS}u / sgs; j++) { total += red[j * ${GEMV_DOT_COLS}u + tid]; }
    }
  } else {`;
  return `
  let n0 = block * ${GEMV_DOT_COLS}u;
  // Rows of b past N are clamped (read, never written).
  ${cs.map((c) => `let bRow${c} = bBase + min(n0 + ${c}u, params.n - 1u) * params.k;`).join('\n  ')}
  ${cs.map((c) => `var acc${c} = 0.0;`).join('\n  ')}
  // K in vector (or scalar) units; kBegin and kPerSplit are multiples of ${per}.
  ${streamLoop(`${v.vecB ? `kBegin / ${per}u` : 'kBegin'} + tid`, v.vecB ? `kEnd / ${per}u` : 'kEnd', GEMV_THREADS, GEMV_DOT_UNROLL, step)}
  var total = 0.0;${v.subgroups ? subgroupSum : ''}
  ${treeReduce(GEMV_DOT_COLS, GEMV_THREADS, 1, 'tid')}
  if (tid < ${GEMV_DOT_COLS}u) { total = red[tid * ${GEMV_THREADS}u]; }${v.subgroups ? '\n  }' : ''}
  ${v.y && v.y !== 'f32' ? halfPairStore(v.y, v.out.c) : `if (tid < ${GEMV_DOT_COLS}u && n0 + tid < params.n) { emit1(yBase + n0 + tid, total, yOff); }`}`;
}

/**
 * WGSL: the workgroup's outputs (\`total\` of invocations below
 * GEMV_DOT_COLS) stored two per u32 word of a half y, each rounded once to
 * nearest even: y = alpha·total (+ beta·c). Words never straddle
 * workgroups: n0 and N are even.
 */
function halfPairStore(y: Exclude<Storage, 'f32'>, c: boolean): string {
  const value = (col: string, j: string) =>
    `params.alpha * outv[${j}]${c ? ` + params.beta * c[yBase + ${col}]` : ''}`;
  return `if (tid < ${GEMV_DOT_COLS}u) { outv[tid] = total; }
  workgroupBarrier();
  if (tid < ${GEMV_DOT_COLS / 2}u) {
    let col = n0 + 2u * tid;
    if (col < params.n) {
      let lo = to_${y}(${value('col', '2u * tid')});
      let hi = to_${y}(${value('col + 1u', '2u * tid + 1u')});
      y[(yBase + col) / 2u] = lo | (hi << 16u);
    }
  }`;
}

/**
 * No transB (b is [K, N]): `lanes` invocations side by side read one row
 * segment of b (vec4s of adjacent columns); the workgroup's other
 * invocations take further rows, so K is split into slices. Partners across
 * slices within a subgroup add up with subgroupShuffleXor; one slice per
 * subgroup then goes through workgroup memory.
 */
function gemvAxpyBody(v: GemvVariant): string {
  const lanes = v.lanes;
  const slices = GEMV_THREADS / lanes;
  const width = v.vecB ? 4 : 1;
  const type = v.vecB ? 'vec4<f32>' : 'f32';
  const step = (k: string) => {
    const bv = v.vecB
      ? unpackQuad(v.b, `b[(bBase + (${k}) * params.n + col) / 4u]`)
      : loadScalar(v.b, 'b', `bBase + (${k}) * params.n + col`);
    return `acc = fma(${type}(${loadScalar(v.a ?? 'f32', 'a', `aBase + ${k}`)}), ${bv}, acc);`;
  };
  const subgroupSum = `
  ${CHECK_SUBGROUP_LAYOUT}
  if (workgroupUniformLoad(&scattered) == 0u) {
    // Invocations sgid ^ m (m a multiple of the lanes) hold the same columns.
    for (var m = ${lanes}u; m < sgs; m <<= 1u) { acc += subgroupShuffleXor(acc, m); }
    stride = max(sgs / ${lanes}u, 1u);
  }`;
  return `
  let lane = tid % ${lanes}u;
  let slice = tid / ${lanes}u;
  let col = block * ${lanes * width}u + lane * ${width}u;
  var acc = ${type}();
  if (col < params.n) {
    ${streamLoop('kBegin + slice', 'kEnd', slices, GEMV_AXPY_UNROLL, step)}
  }
  // Slices \`stride\` apart hold the sums of the slices between them.
  var stride = 1u;${v.subgroups ? subgroupSum : ''}
  if (slice % stride == 0u) { red[tid] = acc; }
  workgroupBarrier();
  if (tid < ${lanes}u) {
    let col = block * ${lanes * width}u + tid * ${width}u;
    var total = ${type}();
    for (var j = 0u; j < ${slices}u; j += stride) { total += red[j * ${lanes}u + tid]; }
    if (col < params.n) { ${v.vecB ? 'emit4(yBase + col, col, total, yOff);' : 'emit1(yBase + col, total, yOff);'} }
  }`;
}

export function gemvShader(v: GemvVariant, kernel: string) {
  const halfY = v.y && v.y !== 'f32' ? v.y : undefined;
  if (halfY && (!v.transB || v.out.epilogue || v.out.vec))
    throw new Error('a half y is stored by the dot GEMV only, without an epilogue');
  const key = [
    'matmul/gemv',
    v.transB ? `dot/c${GEMV_DOT_COLS}u${GEMV_DOT_UNROLL}` : `axpy/l${v.lanes}u${GEMV_AXPY_UNROLL}`,
    v.subgroups ? 'subgroups' : 'workgroup',
    `a${v.vecA ? 4 : 1}b${v.vecB ? 4 : 1}${storageKey(v.b)}${v.a && v.a !== 'f32' ? `/a-${v.a}` : ''}${v.y && v.y !== 'f32' ? `/y-${v.y}` : ''}`,
    outputKey(v.out),
  ].join('/');
  const subgroupBuiltins = v.subgroups
    ? ', @builtin(subgroup_invocation_id) sgid: u32, @builtin(subgroup_size) sgs: u32'
    : '';
  const code = () => {
    const module = new ShaderModule();
    if (v.subgroups) module.enable('subgroups');
    declareBindings(module, v.vecA, bBinding(v.transB, v.vecB, v.b), v.out, v.b, v.a, v.y);
    if (v.transB) module.workgroupArray('red', 'f32', GEMV_DOT_COLS * GEMV_THREADS);
    else module.workgroupArray('red', v.vecB ? 'vec4<f32>' : 'f32', GEMV_THREADS);
    if (v.subgroups) module.workgroupVar('scattered', 'atomic<u32>');
    if (halfY) {
      module.workgroupArray('outv', 'f32', GEMV_DOT_COLS);
      module.declare(narrowFunctions(halfY));
    } else module.declare(emitFunctions(v.out));
    return module.build(
      undefined,
      GEMV_THREADS,
      `  ${decodeWorkgroup()}
  ${v.transB ? gemvDotBody(v) : gemvAxpyBody(v)}`,
      `@builtin(local_invocation_index) tid: u32${subgroupBuiltins}`,
    );
  };
  return { key, kernel, code };
}
