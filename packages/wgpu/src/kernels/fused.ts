import {
  biasActivationBackward,
  bytesPerElement,
  FLOAT,
  type FusedLaunch,
  gateUpSwiglu,
  gateUpSwigluLaunch,
  type LinearActivation,
  linear,
  linearLaunch,
  rmsNormMatmul,
  rmsNormMatmul3,
  rmsNormMatmul3Launch,
  rmsNormMatmulLaunch,
} from '@rayo/core';
import {
  type AnyWgpuKernel,
  bindingRanges,
  gridFor,
  type KernelEncoder,
  linearWorkgroup,
  type Operand,
  operandRange,
  wgpuKernel,
} from '../kernel.js';
import { paramLayout } from '../params.js';
import type { FusedColumns } from '../tuning.js';
import { ACTIVATION_FUNCTIONS_WGSL, activationGradientWgsl, activationWgsl } from '../wgsl/activations.js';
import { GROUP_SUMS_END, groupSumsOrElse, SUBGROUP_BUILTINS } from '../wgsl/groupSums.js';
import {
  bindingType,
  halfFunctions,
  loadScalar,
  type Storage,
  storageOf,
  unpackVector,
  vectorElements,
} from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { encodeMatmul, streamLoop } from './matmul.js';

// gateUpSwiglu as one streaming pass over both weights. A workgroup is
// GROUPS groups of 32 invocations; group g owns output columns
// block · GROUPS · C + c · GROUPS + g (c < C, the group's columns) for ROWS
// rows of x and walks K in vec4 steps (32 lanes read 512 contiguous bytes of
// each weight row, as the GEMV does), each x vector loaded once for its C
// columns. Every lane sums x² of its part of each row alongside the dot
// products, so the optional rmsNorm needs no pass of its own: the group's
// sums give the row's inverse RMS, which scales the dot products before
// silu · mul. rmsNormMatmul is the same shader over one weight, its epilogue
// the scale; rmsNormMatmul3 runs it over the rows of two or three weights in
// one dispatch (q, k and v), each group picking its weight, row and output
// from its column, so the small weights do not each leave most of the GPU
// idle.
//
// A one-row product over weights (no gate) whose groups would each stream
// one column instead splits K across the workgroup: all GROUPS groups walk
// the same SPLIT_COLUMNS columns, each invocation a 256th of K, and the
// groups' sums meet in workgroup memory. Every loaded x and norm vector then
// serves SPLIT_COLUMNS weight rows rather than one, and each invocation's
// loads are all in flight at once (K ≤ 4,096 in bf16 is two steps), as in
// the GEMV; short rows (the q·k·v of a d 4096 model) stop waiting on a
// group's 16 dependent steps.

const THREADS = 256;
const LANES = 32;
const GROUPS = THREADS / LANES;
/** Rows of x per workgroup; more rows take more workgroups, each reading the weights again. */
const MAX_ROWS = 4;
/** Loop steps per iteration (loads in flight): each loads the weights and every row of x. */
const unrollFor = (rows: number, cols: number) => (rows === 1 && cols === 1 ? 4 : 2);
/**
 * One-row products give each group more columns (4, then 2) while they
 * still leave this many workgroups: short rows (K) then stream longer per
 * group and load x once for several columns, and the GPU stays full.
 */
const MIN_WORKGROUPS_PER_COLUMNS = 2048;
/** Columns a workgroup that splits K across its groups produces. */
const SPLIT_COLUMNS = 8;

const PARAMS = paramLayout([
  ['m', 'u32'],
  /** Output columns of this dispatch (a range of N when the weights are bound in pieces). */
  ['n', 'u32'],
  ['k', 'u32'],
  /** Row stride of y: all of N. */
  ['ldy', 'u32'],
  /** First output column of this dispatch. */
  ['colOffset', 'u32'],
  ['tilesN', 'u32'],
  ['tiles', 'u32'],
  ['eps', 'f32'],
  /** rmsNormMatmul3: columns of the first and second weights; the third has the rest of n. */
  ['n0', 'u32'],
  ['n1', 'u32'],
] as const);

interface Variant {
  /** Two weights and silu · mul (gateUpSwiglu), or one weight and the plain product (rmsNormMatmul). */
  readonly gated: boolean;
  /** Ungated only: weights whose rows the columns span, each with its own output (rmsNormMatmul3). */
  readonly weights: number;
  readonly rows: number;
  /** Columns each group streams (one weight only; 1 for rmsNormMatmul3), or with `split` the workgroup. */
  readonly cols: number;
  /** K split across the workgroup's groups, all on the same `cols` columns (one row, no gate). */
  readonly split: boolean;
  /** Vector loads along K: K a multiple of `vectorElements(w)` and 16-byte aligned operands. */
  readonly vec: boolean;
  /** How the weights are stored (f32, or halves in u32 words: 8 per vec4<u32> load). */
  readonly w: Storage;
  readonly norm: boolean;
  /** Sum each group with subgroupShuffleXor where subgroups of at least 32 run in invocation order. */
  readonly subgroups: boolean;
}

function fusedShader(v: Variant) {
  if (v.weights > 1 && v.cols !== 1 && !v.split) throw new Error('rmsNormMatmul3 streams one column a group');
  if (v.split && (v.gated || v.rows !== 1)) throw new Error('split K takes one row and no gate');
  const rows = Array.from({ length: v.rows }, (_, r) => r);
  const cs = Array.from({ length: v.cols }, (_, c) => c);
  const type = v.vec ? 'vec4<f32>' : 'f32';
  // Elements per step along K; vector steps are `pieces` vec4<f32> of x.
  const per = v.vec ? vectorElements(v.w) : 1;
  const pieces = Array.from({ length: Math.max(1, per / 4) }, (_, j) => j);
  const dot = (a: string, b: string) => (v.vec ? `dot(${a}, ${b})` : `${a} * ${b}`);
  /** WGSL: piece j of x-like f32 binding `name` at step k from element offset `base`. */
  const xAt = (name: string, base: string, k: string, j: number) =>
    v.vec
      ? `${name}[${base ? `${base} / 4u + ` : ''}(${k}) * ${pieces.length}u + ${j}u]`
      : `${name}[${base ? `${base} + ` : ''}${k}]`;
  /** WGSL: the f32 pieces of weight `name` at step k of the row starting at element `row` (bound as let `as`). */
  const wAt = (name: string, row: string, as: string, k: string) => {
    if (!v.vec)
      return { load: `let ${as}_0 = ${loadScalar(v.w, name, `${row} + ${k}`)};`, names: [`${as}_0`] };
    const parts = unpackVector(v.w, `${as}w`);
    return {
      load: `let ${as}w = ${name}[${row} / ${per}u + ${k}]; ${parts.map((e, j) => `let ${as}_${j} = ${e};`).join(' ')}`,
      names: parts.map((_, j) => `${as}_${j}`),
    };
  };
  // Partial sums per lane, laid out in red as value · THREADS + tid.
  const gSum = (r: number, c: number) => `g${r}_${c}`;
  const uSum = (r: number, c: number) => `u${r}_${c}`;
  const values = [
    ...rows.flatMap((r) => cs.map((c) => gSum(r, c))),
    ...(v.gated ? rows.flatMap((r) => cs.map((c) => uSum(r, c))) : []),
    ...(v.norm ? rows.map((r) => `s${r}`) : []),
  ];
  const step = (wName: string) => (k: string) => {
    const gv = cs.map((c) => wAt(wName, `wRow${c}`, `gv${c}`, k));
    const uv = v.gated ? cs.map((c) => wAt('wu', `wRow${c}`, `uv${c}`, k)) : [];
    const sum = (f: (j: number) => string) => pieces.map(f).join(' + ');
    return `{
      ${[...gv, ...uv].map((x) => x.load).join('\n      ')}
      ${v.norm ? pieces.map((j) => `let nv${j} = ${xAt('nw', '', k, j)};`).join(' ') : ''}
      ${rows
        .map(
          (r) => `{ ${pieces.map((j) => `let xv${j} = ${xAt('x', `xRow${r}`, k, j)};`).join(' ')}
        ${
          v.norm
            ? `s${r} += ${sum((j) => dot(`xv${j}`, `xv${j}`))}; ${pieces.map((j) => `let xn${j} = xv${j} * nv${j};`).join(' ')}`
            : pieces.map((j) => `let xn${j} = xv${j};`).join(' ')
        }
        ${cs.map((c) => `${gSum(r, c)} += ${sum((j) => dot(`xn${j}`, gv[c]!.names[j]!))};`).join(' ')}
        ${v.gated ? cs.map((c) => `${uSum(r, c)} += ${sum((j) => dot(`xn${j}`, uv[c]!.names[j]!))};`).join(' ') : ''} }`,
        )
        .join('\n      ')}
    }`;
  };
  const at = (i: number, o = '') => `red[${i * THREADS}u + tid${o}]`;
  const kernel = v.gated ? 'gateUpSwiglu' : v.weights > 1 ? `rmsNormMatmul3/w${v.weights}` : 'rmsNormMatmul';
  const extra = Array.from({ length: v.weights - 1 }, (_, i) => i + 1);
  const names = [
    'x',
    'wg',
    ...(v.gated ? ['wu'] : []),
    ...extra.map((i) => `w${i}`),
    ...(v.norm ? ['nw'] : []),
  ];
  const outputs = ['y', ...extra.map((i) => `y${i}`)];
  const loop = (wName: string) =>
    streamLoop(
      v.split ? 'tid' : 'lane',
      per > 1 ? `params.k / ${per}u` : 'params.k',
      v.split ? THREADS : LANES,
      v.split ? 2 : unrollFor(v.rows, v.cols),
      step(wName),
    );
  // Column c of weight i: its row c - (start of i), its output's columns N_i.
  const store = (row: string, c: number, out: string) =>
    v.weights === 1
      ? `y[${row} * params.ldy + params.colOffset + col${c}] = ${out};`
      : `switch wi {
        ${outputs.map((name, i) => `${i === v.weights - 1 ? 'default' : `case ${i}u`}: { ${name}[${row} * ${['params.n0', 'params.n1', '(params.n - params.n0 - params.n1)'][i]} + local${c > 0 ? ` + ${c}u` : ''}] = ${out}; }`).join('\n        ')}
      }`;
  const columns =
    v.weights === 1
      ? `${cs.map((c) => `let wRow${c} = min(col${c}, params.n - 1u) * params.k;`).join('\n  ')}
  ${loop('wg')}`
      : `var wi = 0u;
  var local = min(col0, params.n - 1u);
  if (local >= params.n0) { wi = 1u; local -= params.n0; }
  ${v.weights > 2 ? 'if (wi == 1u && local >= params.n1) { wi = 2u; local -= params.n1; }' : ''}
  ${
    v.cols === 1
      ? 'let wRow0 = local * params.k;'
      : `// Split K: the workgroup's columns lie in one weight (its start a multiple of ${v.cols}); the last ones past its end are clamped.
  let last = select(select(params.n - params.n0 - params.n1, params.n1, wi == 1u), params.n0, wi == 0u) - 1u;
  ${cs.map((c) => `let wRow${c} = min(local + ${c}u, last) * params.k;`).join('\n  ')}`
  }
  // Uniform within a group; each branch streams one weight.
  switch wi {
    ${['wg', ...extra.map((i) => `w${i}`)].map((name, i) => `${i === v.weights - 1 ? 'default' : `case ${i}u`}: { ${loop(name)} }`).join('\n    ')}
  }`;
  // Lane 0 of each group writes its columns of every row from the group's sums, `sum(i)` for value i
  // (with split K, invocation 0 from the workgroup's).
  const written = (sum: (i: number) => string) => `if (${v.split ? 'tid' : 'lane'} == 0u) {
    ${rows
      .map((r) => {
        const scale = v.norm
          ? `inverseSqrt(${sum(values.indexOf(`s${r}`))} / f32(params.k) + params.eps)`
          : '1.0';
        const out = (c: number) =>
          v.gated
            ? `${activationWgsl('silu', `scale * ${sum(values.indexOf(gSum(r, c)))}`)} * (scale * ${sum(values.indexOf(uSum(r, c)))})`
            : `scale * ${sum(values.indexOf(gSum(r, c)))}`;
        return `if (row0 + ${r}u < params.m) {
      let scale = ${scale};
      ${cs.map((c) => `if (col${c} < params.n) { ${store(`(row0 + ${r}u)`, c, out(c))} }`).join('\n      ')}
    }`;
      })
      .join('\n    ')}
  }`;
  // Split K: the groups' sums (lane 0's slots of red) add up in group order.
  const groupsTotal = (i: number) =>
    `(${Array.from({ length: GROUPS }, (_, g) => `red[${i * THREADS + g * LANES}u]`).join(' + ')})`;
  const epilogue = (sum: (i: number) => string) => written(v.split ? groupsTotal : sum);
  // Each group's sums by subgroup shuffles where it can, else the tree in workgroup memory.
  const subgroupSum = groupSumsOrElse(
    values,
    v.split
      ? `if (lane == 0u) {
      ${values.map((name, i) => `${at(i)} = ${name};`).join('\n      ')}
    }
    workgroupBarrier();
    ${epilogue(at)}`
      : epilogue((i) => values[i]!),
  );
  return {
    key: `fused/${kernel}/m${v.rows}${v.split ? `/split${v.cols}` : v.cols > 1 ? `c${v.cols}` : ''}/${v.vec ? 'v4' : 'scalar'}${v.w === 'f32' ? '' : `/w-${v.w}`}${v.norm ? '/norm' : ''}/${v.subgroups ? 'subgroups' : 'workgroup'}`,
    kernel,
    code: () => {
      const module = new ShaderModule();
      if (v.subgroups) module.enable('subgroups');
      module.params(PARAMS);
      for (const name of names)
        module.storage(name, name === 'x' || name === 'nw' ? type : bindingType(v.w, v.vec), 'read');
      for (const name of outputs) module.storage(name, 'f32', 'read_write');
      module.workgroupArray('red', 'f32', values.length * THREADS);
      if (v.subgroups) module.workgroupVar('scattered', 'atomic<u32>');
      module.declare(ACTIVATION_FUNCTIONS_WGSL);
      module.declare(halfFunctions(v.w));
      return module.build(
        undefined,
        THREADS,
        `  let wgi = ${linearWorkgroup};
  if (wgi >= params.tiles) { return; }
  ${cs.map((c) => (v.split ? `let col${c} = (wgi % params.tilesN) * ${v.cols}u + ${c}u;` : `let col${c} = (wgi % params.tilesN) * ${GROUPS * v.cols}u + ${c * GROUPS}u + tid / ${LANES}u;`)).join('\n  ')}
  let row0 = (wgi / params.tilesN) * ${v.rows}u;
  let lane = tid % ${LANES}u;
  // Columns and rows past the end are clamped (read, never written).
  ${rows.map((r) => `let xRow${r} = min(row0 + ${r}u, params.m - 1u) * params.k;`).join('\n  ')}
  ${values.map((name) => `var ${name} = 0.0;`).join('\n  ')}
  ${columns}${v.subgroups ? subgroupSum : ''}
  ${values.map((name, i) => `${at(i)} = ${name};`).join('\n  ')}
  workgroupBarrier();
  for (var s = ${LANES / 2}u; s > 0u; s >>= 1u) {
    if (lane < s) {
      ${values.map((_, i) => `${at(i)} += ${at(i, ' + s')};`).join('\n      ')}
    }
    workgroupBarrier();
  }
  ${epilogue(at)}${v.subgroups ? GROUP_SUMS_END : ''}`,
        `@builtin(local_invocation_index) tid: u32${v.subgroups ? SUBGROUP_BUILTINS : ''}`,
      );
    },
  };
}

/**
 * Columns each group of a one-row product over one weight streams: the
 * tuning switch where set, else the most (4, 2) that still leave
 * MIN_WORKGROUPS_PER_COLUMNS workgroups for the `n` columns.
 */
function fusedColumnsFor(n: number, forced: FusedColumns | undefined): FusedColumns {
  if (forced !== undefined) return forced;
  for (const c of [4, 2] as const) if (Math.ceil(n / (GROUPS * c)) >= MIN_WORKGROUPS_PER_COLUMNS) return c;
  return 1;
}

/**
 * Whether a product splits K across each workgroup (see the top): one row,
 * no gate, one column a group otherwise and the switch unset, and every
 * weight but the last a whole number of SPLIT_COLUMNS rows, so that a
 * workgroup's columns lie in one weight.
 */
function splitsK(
  rows: number,
  gated: boolean,
  groupColumns: number,
  forced: FusedColumns | undefined,
  cols: readonly number[],
): boolean {
  return (
    rows === 1 &&
    !gated &&
    groupColumns === 1 &&
    forced === undefined &&
    cols.slice(0, -1).every((n) => n % SPLIT_COLUMNS === 0)
  );
}

type FusedCall = FusedLaunch<Operand>;

const aligned = (offset: number) => offset % 16 === 0;

/** Half x, normWeight and y through f32 (see halfEdges.ts); the weights are read as stored. */
function encodeFused(encoder: KernelEncoder, call: FusedCall, kernel: string): void {
  const outputs = Object.fromEntries(call.y.map((t, i) => [`out[${i}]`, t]));
  encodeWithF32Activations(
    encoder,
    kernel,
    { x: call.x, normWeight: call.normWeight },
    outputs,
    (inputs, outs) => {
      encodeFusedF32(encoder, {
        ...call,
        x: inputs.x!,
        normWeight: inputs.normWeight,
        y: Object.values(outs).map((t) => t!),
      });
    },
  );
}

function encodeFusedF32(encoder: KernelEncoder, call: FusedCall): void {
  const { x, w, wUp, normWeight, y, eps } = call;
  const [m, k] = x.shape as [number, number];
  const cols = y.map((o) => o.shape[1]!);
  const storage = storageOf(w[0]!.dtype);
  const rowBytes = Math.max(k, 1) * bytesPerElement(w[0]!.dtype);
  const fits = cols.every((n) => bindingRanges(n, rowBytes, encoder).length <= 1);
  if (w.length > 1 && !fits) {
    // A weight in pieces takes several dispatches anyway: one weight at a time.
    w.forEach((wi, i) => {
      encodeFusedF32(encoder, { ...call, w: [wi], y: [y[i]!] });
    });
    return;
  }
  const n = cols.reduce((a, b) => a + b, 0);
  if (m === 0 || n === 0) return;
  const vec =
    k % vectorElements(storage) === 0 &&
    [x, ...w, ...(wUp ? [wUp] : []), ...(normWeight ? [normWeight] : [])].every((o) => aligned(o.offset));
  const rows = Math.min(m, MAX_ROWS);
  // K = 0 (gateUpSwiglu without the norm) binds a placeholder for the empty
  // operands (a binding cannot be empty); nothing reads it and y = silu(0) · 0.
  const empty = (): GPUBufferBinding => ({ buffer: encoder.scratch(16), offset: 0, size: 16 });
  const tilesM = Math.ceil(m / rows);
  // Weights larger than one binding go in pieces of whole rows (output columns);
  // several weights come here only when each fits one binding.
  const ranges = w.length > 1 ? [{ start: 0, count: n }] : bindingRanges(n, rowBytes, encoder);
  for (const range of ranges) {
    const weights =
      w.length > 1
        ? w
        : [w[0]!, ...(wUp ? [wUp] : [])].map((op) => operandRange(op, range.start * k, range.count * k));
    const groupColumns =
      rows === 1 && w.length === 1 ? fusedColumnsFor(range.count, encoder.tuning.fusedColumns) : 1;
    const split = splitsK(rows, wUp !== undefined, groupColumns, encoder.tuning.fusedColumns, cols);
    const tilesN = Math.ceil(range.count / (split ? SPLIT_COLUMNS : GROUPS * groupColumns));
    const tiles = tilesN * tilesM;
    const inputs = k === 0 ? [x, ...weights].map(empty) : [x, ...weights];
    encoder.dispatch({
      shader: fusedShader({
        gated: wUp !== undefined,
        weights: w.length,
        rows,
        cols: split ? SPLIT_COLUMNS : groupColumns,
        split,
        vec: vec && weights.every((op) => aligned(op.offset)),
        w: storage,
        norm: normWeight !== undefined,
        subgroups: encoder.features.has('subgroups'),
      }),
      buffers: [...inputs, ...(normWeight ? [normWeight] : []), ...y],
      params: {
        layout: PARAMS,
        values: {
          m,
          n: range.count,
          k,
          ldy: n,
          colOffset: range.start,
          tilesN,
          tiles,
          eps,
          n0: cols[0]!,
          n1: cols[1] ?? 0,
        },
      },
      workgroups: gridFor(tiles, encoder.limits),
    });
  }
}

// ---- linear's backward: dz and the bias gradient in one pass --------------------

/** Columns per workgroup: 32 invocations side by side read 128 contiguous bytes of a row. */
const BACKWARD_COLUMNS = 32;
const BACKWARD_SLICES = THREADS / BACKWARD_COLUMNS;

const BACKWARD_PARAMS = paramLayout([
  ['m', 'u32'],
  ['n', 'u32'],
] as const);

/**
 * dz = dy · act'(z) and db = Σ_rows dz: workgroup w owns columns
 * [32w, 32w + 32), invocation t column 32w + t % 32 and rows t / 32,
 * t / 32 + 8, …; each keeps its column's running sum, and the first 32 add
 * the 8 slices' sums in slice order (the same result every run).
 */
function biasActivationShader(activation: LinearActivation) {
  const grad = activation !== 'none';
  const names = grad ? ['dy', 'z', 'dz', 'db'] : ['dy', 'dz', 'db'];
  return {
    key: `fused/biasActivationBackward/${activation}`,
    kernel: biasActivationBackward.name,
    code: () => {
      const module = new ShaderModule().params(BACKWARD_PARAMS);
      for (const name of names)
        module.storage(name, 'f32', name.startsWith('d') && name !== 'dy' ? 'read_write' : 'read');
      if (grad)
        module.declare(
          `${ACTIVATION_FUNCTIONS_WGSL}\nfn act_grad(x: f32) -> f32 { return ${activationGradientWgsl(activation, 'x')}; }`,
        );
      module.workgroupArray('part', 'f32', THREADS);
      return module.build(
        undefined,
        THREADS,
        `  // Surplus workgroups of the grid find col >= n and take part in the barrier only.
  let col = (${linearWorkgroup}) * ${BACKWARD_COLUMNS}u + tid % ${BACKWARD_COLUMNS}u;
  var sum = 0.0;
  if (col < params.n) {
    for (var r = tid / ${BACKWARD_COLUMNS}u; r < params.m; r += ${BACKWARD_SLICES}u) {
      let i = r * params.n + col;
      let g = dy[i]${grad ? ' * act_grad(z[i])' : ''};
      dz[i] = g;
      sum += g;
    }
  }
  part[tid] = sum;
  workgroupBarrier();
  if (tid < ${BACKWARD_COLUMNS}u && col < params.n) {
    var total = part[tid];
    for (var s = 1u; s < ${BACKWARD_SLICES}u; s++) { total += part[s * ${BACKWARD_COLUMNS}u + tid]; }
    db[col] = total;
  }`,
        '@builtin(local_invocation_index) tid: u32',
      );
    },
  };
}

export const FUSED_KERNELS: readonly AnyWgpuKernel[] = [
  // w larger than one binding is bound in pieces of whole rows (see matmulColumns.ts).
  wgpuKernel(linear, (encoder, call) => encodeMatmul(encoder, linearLaunch(call), linear.name), {
    splitsLargeOperands: true,
    dtypes: FLOAT,
  }),
  wgpuKernel(
    biasActivationBackward,
    (encoder, { inputs, outputs, attrs }) => {
      const [dy, z] = inputs;
      const [dz, db] = outputs;
      const [m, n] = dy!.shape as [number, number];
      if (n === 0) return;
      encodeWithF32Activations(encoder, biasActivationBackward.name, { dy, z }, { dz, db }, (i, o) => {
        encoder.dispatch({
          shader: biasActivationShader(attrs.activation),
          buffers: i.z ? [i.dy!, i.z, o.dz!, o.db!] : [i.dy!, o.dz!, o.db!],
          params: { layout: BACKWARD_PARAMS, values: { m, n } },
          workgroups: gridFor(Math.ceil(n / BACKWARD_COLUMNS), encoder.limits),
        });
      });
    },
    { dtypes: FLOAT },
  ),
  wgpuKernel(
    gateUpSwiglu,
    (encoder, call) => encodeFused(encoder, gateUpSwigluLaunch(call), gateUpSwiglu.name),
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
  wgpuKernel(
    rmsNormMatmul,
    (encoder, call) => encodeFused(encoder, rmsNormMatmulLaunch(call), rmsNormMatmul.name),
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
  wgpuKernel(
    rmsNormMatmul3,
    (encoder, call) => encodeFused(encoder, rmsNormMatmul3Launch(call), rmsNormMatmul3.name),
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
];
