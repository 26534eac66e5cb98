import {
  InvalidArgumentError,
  QGEMV_GROUPS,
  type QgemvShapeVariant,
  type QuantFormat,
  qgemvProblem,
  quantizedGateUpSwiglu,
  quantLayout,
} from '@rayo/core';
import { gridFor, type KernelEncoder, linearWorkgroup, type Operand } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { RowPiece } from '../rowPieces.js';
import { ACTIVATION_FUNCTIONS_WGSL, activationWgsl } from '../wgsl/activations.js';
import { storageOf } from '../wgsl/half.js';
import { ShaderModule, type WgslType } from '../wgsl/module.js';
import { QUANT_WEIGHT_PARAMS, SCALE_KINDS } from './quantizedParams.js';

// The small-M quantized GEMV (M <= 4 rows of x; decoding has one), shaped
// like cuda-ptx's quantizedGemv.ts: a workgroup is 8 groups of 32
// invocations ("warps"); invocation l of a group reads u32 word (or
// vec2/vec4 of words) l of a 32-invocation run of C rows of W, so each load
// is one coalesced run per row, and reads the matching x (32 contiguous
// bytes per invocation for q4) straight from the storage buffer, once per
// step for the C columns: no workgroup-memory stage and no barrier in the
// loop. The groups of a workgroup split K (S slices) when N alone gives
// too few groups for the GPU, and meet at the end in workgroup memory. A
// code becomes an exact f32 in vector operations: four nibbles (or bytes)
// masked in place in a vec4<u32>, ORed into the mantissa of 2^23 and
// bitcast, then one fma by 16^-j with −(2^23·16^-j + zero). The same shader
// with two weights is the fused gate·up·SwiGLU of decoding. x and y are f32
// in the shader (halves go through f32 scratch, see halfEdges.ts); the
// scales are read as stored. Its shapes (C columns and W words per
// invocation) are core's QGEMV_SHAPES; the backend's `qgemvVariant` and
// `qgemvSlices` options force one for measurements.

const LANES = 32;
/** Groups of 32 invocations per workgroup, as core's split of K counts them. */
const WARPS = QGEMV_GROUPS;
const THREADS = WARPS * LANES;
/** The most rows of x one workgroup takes; more rows take more workgroups. */
export const QGEMV_MAX_ROWS = 4;
/** Partial sums reduced at once in workgroup memory: 8 KiB of the 16 KiB every device has. */
const BATCH = 8;

const PARAMS = paramLayout([
  ...QUANT_WEIGHT_PARAMS,
  /** Groups of a workgroup that split K: 1, 2, 4 or 8. */
  ['slices', 'u32'],
  /** Workgroups along N; the rest of the grid's workgroups take the next rows of x. */
  ['tilesN', 'u32'],
  /** Workgroups that do work (the rest of a `gridFor` grid return at once). */
  ['tiles', 'u32'],
] as const);

/**
 * What a shader is compiled for. Zero points, c, the scales' storage and
 * the split of K are uniform parameters: each would multiply the shaders
 * to compile (seconds each on a software Vulkan), and their branches are
 * uniform.
 */
export interface QgemvShaderVariant {
  readonly format: QuantFormat;
  /** Rows of x per workgroup: 1 (decoding) or QGEMV_MAX_ROWS, rows past M clamped. */
  readonly rows: number;
  /** x read as vec4<f32>: K a multiple of 32 and x 16-byte aligned; else element by element up to K. */
  readonly vecX: boolean;
  /** Two weights: y = silu(x·Wgᵀ) ⊙ (x·Wuᵀ). */
  readonly pair: boolean;
  /** Columns of y per group of 32 invocations. */
  readonly cols: number;
  /** u32 code words per invocation and step. */
  readonly words: 1 | 2 | 4;
}

/** Steps whose loads are issued together: as many as about 64 registers of codes, scales and x hold. */
export function unrollOf(v: QgemvShaderVariant): number {
  const perWord = quantLayout(v.format, 1).perWord;
  const perStep = (v.pair ? 2 : 1) * v.cols * (v.words + 1) + v.rows * perWord * v.words;
  return Math.max(1, Math.min(4, Math.floor(64 / perStep)));
}

const f32Literal = (value: number) => {
  const text = String(value);
  return /[.e]/.test(text) ? text : `${text}.0`;
};

const vec4Literal = (values: readonly number[], type: 'f32' | 'u32') =>
  `vec4<${type}>(${values.map((x) => (type === 'u32' ? `${x >>> 0}u` : f32Literal(x))).join(', ')})`;

export function qgemvShader(v: QgemvShaderVariant) {
  if (v.cols * v.rows * (v.pair ? 2 : 1) > 64 || v.rows > QGEMV_MAX_ROWS) {
    throw new InvalidArgumentError('the quantized GEMV shader cannot take this configuration', {
      operation: 'quantizedMatmul',
      argument: 'cols',
      expected: `columns · rows · weights of at most 64 and at most ${QGEMV_MAX_ROWS} rows`,
      actual: `${v.cols} columns, ${v.rows} rows`,
    });
  }
  const layout = quantLayout(v.format, 1);
  const q4 = layout.bits === 4;
  const C = v.cols;
  const R = v.rows;
  const P = v.pair ? 2 : 1;
  const V = v.words;
  const E = layout.perWord * V;
  const U = unrollOf(v);
  const NV = P * C * R;
  const range = (n: number) => Array.from({ length: n }, (_, i) => i);
  const weights = range(P).map((p) => (p === 0 ? '' : '2'));
  const wordType: WgslType = V === 1 ? 'u32' : V === 2 ? 'vec2<u32>' : 'vec4<u32>';
  const bindingNames: [string, WgslType, 'read' | 'read_write'][] = [
    ['x', v.vecX ? 'vec4<f32>' : 'f32', 'read'],
    ...weights.flatMap((w) => [
      [`packed${w}`, wordType, 'read'] as [string, WgslType, 'read'],
      [`scales${w}`, 'u32', 'read'] as [string, WgslType, 'read'],
      ...(q4 ? [[`zeros${w}`, 'u32', 'read'] as [string, WgslType, 'read']] : []),
    ]),
    ...(v.pair ? [] : [['c', 'f32', 'read'] as [string, WgslType, 'read']]),
    ['y', 'f32', 'read_write'],
  ];
  // Dequantization: a word's codes as vec4<f32> less their zero, the lowest first.
  const positions = q4 ? 4 : 2;
  const masks = range(4).map((j) => ((q4 ? 0xf : 0xff) << ((j % positions) * layout.bits)) >>> 0);
  const mults = range(4).map((j) => 2 ** (-(j % positions) * layout.bits));
  const tops = range(4).map((j) => -(2 ** 23) * mults[j]!);
  // q4: nibbles 0–3 of w and of w >> 16 (two vec4s); q8: bytes 0, 1 of w and of w >> 16 (one vec4).
  const dequant = q4
    ? `fn codes4(w: u32, off: vec4<f32>) -> vec4<f32> {
  let bits = (vec4<u32>(w) & ${vec4Literal(masks, 'u32')}) | vec4<u32>(0x4b000000u);
  return fma(bitcast<vec4<f32>>(bits), ${vec4Literal(mults, 'f32')}, off);
}`
    : `fn codes4(w: u32, off: vec4<f32>) -> vec4<f32> {
  let s = w ^ 0x80808080u;
  let bits = (vec4<u32>(s, s, s >> 16u, s >> 16u) & ${vec4Literal(masks, 'u32')}) | vec4<u32>(0x4b000000u);
  return fma(bitcast<vec4<f32>>(bits), ${vec4Literal(mults, 'f32')}, off);
}`;
  const zeroFns = q4
    ? weights
        .map(
          (w) => `fn zero${w}_of(row: u32, g: u32) -> f32 {
  if (params.hasZeros == 0u) { return 8.0; }
  return f32((zeros${w}[row * params.zeroWords + (g >> 3u)] >> ((g & 7u) * 4u)) & 15u);
}`,
        )
        .join('\n')
    : '';
  const scaleFns = weights
    .map(
      (w) => `fn scale${w}_of(i: u32) -> f32 {
  if (params.scaleKind == 0u) { return bitcast<f32>(scales${w}[i]); }
  let half = (scales${w}[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
  if (params.scaleKind == 1u) { return unpack2x16float(half).x; }
  return bitcast<f32>(half << 16u);
}`,
    )
    .join('\n');
  /** The u32 words of a loaded chunk value. */
  const wordsOf = (name: string) => (V === 1 ? [name] : range(V).map((i) => `${name}[${i}]`));
  const xPieces = E / 4;
  /** WGSL of step u: its loads (0 past K), then its sums. */
  const step = (u: number) => {
    const kk = `kk${u}`;
    const loads = [
      `let ${kk} = kk + ${u * LANES}u * stepChunks * ${E}u;`,
      `let ok${u} = ${kk} < params.k;`,
      `let ch${u} = ${kk} / ${E}u;`,
      ...(q4 ? [`let g${u} = ${kk} / ${layout.groupSize}u;`] : []),
      ...weights.flatMap((w, p) =>
        range(C).flatMap((c) => {
          const name = `w${p}_${c}_${u}`;
          return [
            `var ${name} = ${wordType}(0u);`,
            `var s${p}_${c}_${u} = 0.0;`,
            `var z${p}_${c}_${u} = ${q4 ? '8.0' : '128.0'};`,
            `if (ok${u}) {`,
            `  ${name} = packed${w}[wRow${p}_${c} * chunks + ch${u}];`,
            ...(q4
              ? [
                  `  s${p}_${c}_${u} = scale${w}_of(rowId${c} * params.groups + g${u});`,
                  `  z${p}_${c}_${u} = zero${w}_of(rowId${c}, g${u});`,
                ]
              : []),
            '}',
          ];
        }),
      ),
      ...range(R).flatMap((r) =>
        range(xPieces).map((j) =>
          v.vecX
            ? `let x${r}_${j}_${u} = select(vec4<f32>(0.0), x[(xRow${r} + ${kk}) / 4u + ${j}u], ok${u});`
            : `let x${r}_${j}_${u} = vec4<f32>(${range(4)
                .map((i) => `x_at(xRow${r}, ${kk} + ${j * 4 + i}u)`)
                .join(', ')});`,
        ),
      ),
    ];
    const sums = weights.flatMap((_, p) =>
      range(C).flatMap((c) => {
        const ws = wordsOf(`w${p}_${c}_${u}`);
        const z = `z${p}_${c}_${u}`;
        const lines = [`{`, `  let off = ${vec4Literal(tops, 'f32')} - vec4<f32>(${z});`];
        range(R).forEach((r) => {
          lines.push(`  var part${r} = 0.0;`);
        });
        ws.forEach((word, wi) => {
          const pieces = q4
            ? [
                [`codes4(${word}, off)`, wi * 2],
                [`codes4(${word} >> 16u, off)`, wi * 2 + 1],
              ]
            : [[`codes4(${word}, off)`, wi]];
          pieces.forEach(([expr, piece], i) => {
            lines.push(`  let q${wi}_${i} = ${expr};`);
            range(R).forEach((r) => {
              lines.push(`  part${r} += dot(q${wi}_${i}, x${r}_${piece}_${u});`);
            });
          });
        });
        range(R).forEach((r) => {
          const acc = `acc${p}_${c}_${r}`;
          lines.push(q4 ? `  ${acc} = fma(part${r}, s${p}_${c}_${u}, ${acc});` : `  ${acc} += part${r};`);
        });
        lines.push('}');
        return lines;
      }),
    );
    return { loads, sums };
  };
  const steps = range(U).map(step);
  const accNames = weights.flatMap((_, p) =>
    range(C).flatMap((c) => range(R).map((r) => `acc${p}_${c}_${r}`)),
  );
  // The lanes' sums meet in BATCH-value rounds of a tree in `red`; lane 0 of each group keeps the
  // group's totals in `tot`, where one invocation per output adds the slices.
  const batches = range(Math.ceil(NV / BATCH)).map((b) => accNames.slice(b * BATCH, (b + 1) * BATCH));
  const reduce = batches
    .map(
      (batch, b) => `
  ${batch.map((name, i) => `red[${i * THREADS}u + tid] = ${name};`).join('\n  ')}
  workgroupBarrier();
  for (var s = ${LANES / 2}u; s > 0u; s >>= 1u) {
    if (lane < s) {
      ${batch.map((_, i) => `red[${i * THREADS}u + tid] += red[${i * THREADS}u + tid + s];`).join('\n      ')}
    }
    workgroupBarrier();
  }
  if (lane == 0u) {
    ${batch.map((_, i) => `tot[warp * ${NV}u + ${b * BATCH + i}u] = red[${i * THREADS}u + tid];`).join('\n    ')}
  }
  workgroupBarrier();`,
    )
    .join('');
  const groupsPerWg = `(${WARPS}u / params.slices)`;
  const sumOf = (p: number) =>
    `var sum${p} = 0.0;
    for (var s = 0u; s < params.slices; s++) { sum${p} += tot[(og * params.slices + s) * ${NV}u + ${p * C * R}u + o]; }`;
  const rowScale = (p: number) => (q4 ? '' : `sum${p} *= scale${weights[p]}_of(col);`);
  const output = v.pair
    ? `${activationWgsl('silu', 'sum0')} * sum1`
    : 'select(sum0, fma(params.beta, c[index], sum0), params.hasC != 0u)';
  return {
    key: `quantized/gemv/m${R}/c${C}w${V}/${v.vecX ? 'v4' : 'scalar'}/${v.pair ? 'gateup/' : ''}${v.format}`,
    kernel: v.pair ? quantizedGateUpSwiglu.name : 'quantizedMatmul',
    code: () => {
      const module = new ShaderModule().params(PARAMS);
      for (const [name, type, access] of bindingNames) module.storage(name, type, access);
      module.workgroupArray('red', 'f32', Math.min(NV, BATCH) * THREADS);
      module.workgroupArray('tot', 'f32', WARPS * NV);
      if (v.pair) module.declare(ACTIVATION_FUNCTIONS_WGSL);
      module.declare(dequant).declare(zeroFns).declare(scaleFns);
      if (!v.vecX)
        module.declare(
          'fn x_at(row: u32, k: u32) -> f32 { return select(0.0, x[row + min(k, params.k - 1u)], k < params.k); }',
        );
      return module.build(
        undefined,
        THREADS,
        `  let wgi = ${linearWorkgroup};
  if (wgi >= params.tiles) { return; }
  let lane = tid % ${LANES}u;
  let warp = tid / ${LANES}u;
  let slice = warp % params.slices;
  let group = warp / params.slices;
  let colBase = ((wgi % params.tilesN) * ${groupsPerWg} + group) * ${C}u;
  let row0 = (wgi / params.tilesN) * ${R}u;
  let stepChunks = params.slices;
  let chunks = params.rowWords / ${V}u;
  // Columns past N read row N − 1 of W and rows past M row M − 1 of x (never written).
  ${range(C)
    .map((c) => `let rowId${c} = min(colBase + ${c}u, params.n - 1u);`)
    .join('\n  ')}
  ${weights.flatMap((_, p) => range(C).map((c) => `let wRow${p}_${c} = rowId${c};`)).join('\n  ')}
  ${range(R)
    .map((r) => `let xRow${r} = min(row0 + ${r}u, params.m - 1u) * params.k;`)
    .join('\n  ')}
  ${accNames.map((name) => `var ${name} = 0.0;`).join('\n  ')}
  var kk = (slice * ${LANES}u + lane) * ${E}u;
  for (var first = slice * ${LANES * E}u; first < params.k; first += ${U * LANES}u * stepChunks * ${E}u) {
    ${steps.flatMap((st) => st.loads).join('\n    ')}
    ${steps.flatMap((st) => st.sums).join('\n    ')}
    kk += ${U * LANES}u * stepChunks * ${E}u;
  }
  ${reduce}
  // Invocation o = c·R + r of group og adds the slices' sums and stores y(row0 + r, colBase + c).
  let og = tid / ${C * R}u;
  let o = tid % ${C * R}u;
  let col = ((wgi % params.tilesN) * ${groupsPerWg} + og) * ${C}u + o / ${R}u;
  let row = row0 + o % ${R}u;
  if (og < ${groupsPerWg} && col < params.n && row < params.m) {
    ${range(P)
      .map((p) => `${sumOf(p)}\n    ${rowScale(p)}`)
      .join('\n    ')}
    let index = row * params.ldy + params.colOffset + col;
    y[index] = ${output};
  }`,
        '@builtin(local_invocation_index) tid: u32',
      );
    },
  };
}

/** The weight operands of one product. */
export interface QgemvWeight {
  readonly packed: Operand;
  readonly scales: Operand;
  readonly zeros: Operand | undefined;
}

/** Compute units assumed where the adapter does not say: an H100's 132 SMs. */
const UNITS = 132;

const aligned = (offset: number) => offset % 16 === 0;

/**
 * Dispatches the shader of `variant` (not `a`) for f32 x [M, K] against one
 * weight (y = x·Wᵀ + beta·c) or a gate·up pair (y = silu(x·Wgᵀ) ⊙ (x·Wuᵀ)).
 */
export function encodeQuantizedGemvF32(
  encoder: KernelEncoder,
  variant: QgemvShapeVariant,
  ops: {
    x: Operand;
    weights: readonly QgemvWeight[];
    c: Operand | undefined;
    y: Operand;
    /** The weights' rows bound (a piece of a larger weight): the columns of y written; all of them if absent. */
    columns?: RowPiece;
  },
  attrs: { format: QuantFormat; beta: number },
): void {
  const { x, weights, c, y } = ops;
  const ldy = y.shape[1]!;
  const columns = ops.columns ?? { start: 0, count: ldy };
  const problem = qgemvProblem(variant, x.shape, [x.shape[0]!, columns.count], attrs.format, {
    units: UNITS,
    slices: encoder.tuning.qgemvSlices,
  });
  if (!problem) return;
  const { m, k, n, shape, layout, slices } = problem;
  const { cols, words } = shape;
  const pair = weights.length === 2;
  // One row (decoding) or up to 4, rows past M clamped: two shaders per variant, not four.
  const rows = m === 1 ? 1 : QGEMV_MAX_ROWS;
  const shader = qgemvShader({
    format: attrs.format,
    rows,
    vecX: k % 32 === 0 && aligned(x.offset),
    pair,
    cols,
    words,
  });
  const tilesN = Math.ceil(n / ((cols * WARPS) / slices));
  const tiles = tilesN * Math.ceil(m / rows);
  const first = weights[0]!;
  // Absent zero points and c bind read-only placeholders the shader never reads.
  const weightBuffers = weights.flatMap((w) => [
    w.packed,
    w.scales,
    ...(layout.bits === 4 ? [w.zeros ?? w.packed] : []),
  ]);
  const buffers = [x, ...weightBuffers, ...(pair ? [] : [c ?? x]), y];
  encoder.dispatch({
    shader,
    buffers,
    params: {
      layout: PARAMS,
      values: {
        m,
        n,
        k,
        rowWords: layout.rowWords,
        groups: layout.groups,
        zeroWords: layout.zeroWords,
        beta: attrs.beta,
        hasC: c ? 1 : 0,
        hasZeros: first.zeros ? 1 : 0,
        scaleKind: SCALE_KINDS[storageOf(first.scales.dtype)],
        ldy,
        colOffset: columns.start,
        slices,
        tilesN,
        tiles,
      },
    },
    workgroups: gridFor(tiles, encoder.limits),
  });
}
