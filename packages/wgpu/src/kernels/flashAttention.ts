import {
  flashAttention,
  flashAttentionBackward,
  flashDims,
  flashScale,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { gridFor, type KernelEncoder, linearWorkgroup, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { ShaderModule } from '../wgsl/module.js';

// flashAttention and its backward, tiled the FlashAttention-2 way in f32. A
// workgroup holds ROWS consecutive tokens of one (batch, head), a row per
// invocation with its vectors in private arrays, and walks the other side's
// rows a tile at a time through workgroup memory: the forward and the dq
// pass walk the keys up to the workgroup's last token, the dk and the dv
// pass walk the later queries of all the kv head's query heads. The dq pass
// also writes D = rowsum(dOut ∘ out) for the dk pass; dq has a pass of its
// own so that no row is summed into by many workgroups.
//
// Where headDim is a multiple of 4, rows are read and staged as vec4s: a
// workgroup-memory load then feeds four products instead of one. Each
// invocation's own rows stay f32 arrays (arrays of vec4s took lavapipe's
// compiler minutes).

/** Rows a workgroup. */
const ROWS = 64;
/** Workgroup memory every adapter offers (WebGPU's default limit). */
const WORKGROUP_BYTES = 16_384;
const MAX_TILE = 16;
const NEG_BIG = '-3.0e38';

const PARAMS = paramLayout([
  ['tokens', 'u32'],
  ['batch', 'u32'],
  ['heads', 'u32'],
  ['kvHeads', 'u32'],
  ['group', 'u32'],
  /** Workgroups per (batch, head). */
  ['rowTiles', 'u32'],
  /** Workgroups in all. */
  ['tiles', 'u32'],
  ['scale', 'f32'],
] as const);

/** How rows of headDim are read and staged: vec4s where they divide, else f32s. */
interface Lanes {
  /** Words a row. */
  readonly W: number;
  readonly type: 'vec4<f32>' | 'f32';
  /** WGSL: the components of word `w` with the indices of their elements in a row (for word index `d`). */
  readonly parts: readonly (readonly [component: string, element: string])[];
}

function lanesOf(headDim: number): Lanes {
  return headDim % 4 === 0
    ? {
        W: headDim / 4,
        type: 'vec4<f32>',
        parts: ['x', 'y', 'z', 'w'].map((c, i) => [`w.${c}`, `4u * d + ${i}u`] as const),
      }
    : { W: headDim, type: 'f32', parts: [['w', 'd']] };
}

/** WGSL: `for` each word d of a row, `w` the word `word` names, then `body` of each component and its element. */
function overWords(L: Lanes, word: string, body: (component: string, element: string) => string): string {
  return `for (var d = 0u; d < ${L.W}u; d++) { let w = ${word}; ${L.parts.map(([c, e]) => body(c, e)).join(' ')} }`;
}

/** WGSL: the private f32 row `row` from words `base + d` of `buffer`. */
function loadRow(L: Lanes, row: string, buffer: string, base: string): string {
  return overWords(L, `${buffer}[${base} + d]`, (c, e) => `${row}[${e}] = ${c};`);
}

/** WGSL: words `base + d` of `buffer` from the f32 row expression `value(e)` of element e. */
function storeRow(L: Lanes, buffer: string, base: string, value: (e: string) => string): string {
  const word = L.parts.map(([, e]) => value(e)).join(', ');
  return `for (var d = 0u; d < ${L.W}u; d++) { ${buffer}[${base} + d] = ${L.type === 'f32' ? word : `vec4<f32>(${word})`}; }`;
}

/** Other-side rows a tile: `arrays` rows of headDim f32 each (plus `extra` words a row) fit in workgroup memory. */
function tileRows(headDim: number, arrays: number, extra = 0): number {
  return Math.min(MAX_TILE, Math.floor(WORKGROUP_BYTES / 4 / (arrays * headDim + extra)));
}

/** The workgroup's (batch, head) and first token, and this invocation's token, clamped to the last. */
const PLACE = `  let tid = lid.x;
  let w = ${linearWorkgroup};
  // A grid spread over y may have a few workgroups too many (uniform: barriers stay uniform).
  if (w >= params.tiles) { return; }
  let bh = w / params.rowTiles;
  let t0 = (w % params.rowTiles) * ${ROWS}u;
  let mine = t0 + tid;
  let t = min(mine, params.tokens - 1u);
  let kvStride = params.batch * params.kvHeads;`;

/** Loads rows k0 … k0 + B − 1 (below `end`) of two [T, B, kvHeads, D] buffers into `a` and `b` (zeros past `end`). */
function loadKeyTile(L: Lanes, B: number, from: [string, string]): string {
  const W = L.W;
  return `    workgroupBarrier();
    for (var e = tid; e < ${B * W}u; e += ${ROWS}u) {
      let j = k0 + e / ${W}u;
      let at = (min(j, params.tokens - 1u) * kvStride + kv) * ${W}u + e % ${W}u;
      ta[e] = select(${L.type}(), ${from[0]}[at], j < end);
      tb[e] = select(${L.type}(), ${from[1]}[at], j < end);
    }
    workgroupBarrier();`;
}

/** Declares a pass's buffers: rows as the lanes' words, the per-row lse and delta as f32. */
function declareBuffers(
  module: ShaderModule,
  L: Lanes,
  buffers: readonly string[],
  readOnly: (b: string) => boolean,
) {
  for (const b of buffers) {
    module.storage(b, b === 'lse' || b === 'delta' ? 'f32' : L.type, readOnly(b) ? 'read' : accessOf(b));
  }
}

/**
 * The query-row passes: `pre` after q (and the row's word base `qBase`) is
 * loaded, `step` for key x of a tile (its score `s`, W words a row), `post`
 * for rows below the end.
 */
function queryShader(
  name: string,
  D: number,
  buffers: readonly string[],
  pre: string,
  step: string,
  post: string,
) {
  const L = lanesOf(D);
  const W = L.W;
  const B = tileRows(D, 2);
  const key = `flashAttention/${name}/d${D}/k${B}/w${D / W}/wg${ROWS}`;
  const code = () => {
    const module = new ShaderModule().params(PARAMS);
    declareBuffers(module, L, buffers, (b) => b === 'out' && name !== 'forward');
    module.workgroupArray('ta', L.type, B * W);
    module.workgroupArray('tb', L.type, B * W);
    return module.build(
      undefined,
      ROWS,
      `${PLACE}
  let b = bh / params.heads;
  let h = bh % params.heads;
  let kv = b * params.kvHeads + h / params.group;
  let row = (t * params.batch + b) * params.heads + h;
  let qBase = row * ${W}u;
  let end = min(params.tokens, t0 + ${ROWS}u);
  var qs: array<f32, ${D}>;
  ${loadRow(L, 'qs', 'q', 'qBase')}
${pre}
  for (var k0 = 0u; k0 < end; k0 += ${B}u) {
${loadKeyTile(L, B, ['k', 'v'])}
    for (var x = 0u; x < ${B}u; x++) {
      let causal = k0 + x <= t;
      var s = 0.0;
      ${overWords(L, `ta[x * ${W}u + d]`, (c, e) => `s += qs[${e}] * ${c};`)}
      s *= params.scale;
${step}
    }
  }
  if (mine < params.tokens) {
${post}
  }`,
    );
  };
  return { key, kernel: name === 'forward' ? 'flashAttention' : 'flashAttentionBackward', code };
}

const WRITTEN = new Set(['out', 'lse', 'dq', 'delta', 'dk', 'dv']);
function accessOf(buffer: string): 'read' | 'read_write' {
  return WRITTEN.has(buffer) ? 'read_write' : 'read';
}

function forwardShader(D: number): ShaderSource {
  const L = lanesOf(D);
  return queryShader(
    'forward',
    D,
    ['q', 'k', 'v', 'out', 'lse'],
    `  var o: array<f32, ${D}>;
  var m = ${NEG_BIG};
  var sum = 0.0;`,
    // One key at a time: the running max moves with it (key 0 is every row's, so it is finite from the first).
    `      let top = select(m, max(m, s), causal);
      let alpha = exp(m - top);
      let p = select(0.0, exp(s - top), causal);
      sum = sum * alpha + p;
      ${overWords(L, `tb[x * ${L.W}u + d]`, (c, e) => `o[${e}] = o[${e}] * alpha + p * ${c};`)}
      m = top;`,
    `    ${storeRow(L, 'out', 'qBase', (e) => `o[${e}] / sum`)}
    lse[row] = m + log(sum);`,
  );
}

function dqShader(D: number): ShaderSource {
  const L = lanesOf(D);
  return queryShader(
    'dq',
    D,
    ['q', 'k', 'v', 'out', 'dOut', 'lse', 'dq', 'delta'],
    `  var g: array<f32, ${D}>;
  var dqs: array<f32, ${D}>;
  var dsum = 0.0;
  ${loadRow(L, 'g', 'dOut', 'qBase')}
  ${overWords(L, 'out[qBase + d]', (c, e) => `dsum += g[${e}] * ${c};`)}
  let rowLse = lse[row];`,
    `      let p = select(0.0, exp(s - rowLse), causal);
      var dp = 0.0;
      ${overWords(L, `tb[x * ${L.W}u + d]`, (c, e) => `dp += g[${e}] * ${c};`)}
      let ds = p * (dp - dsum);
      ${overWords(L, `ta[x * ${L.W}u + d]`, (c, e) => `dqs[${e}] += ds * ${c};`)}`,
    `    ${storeRow(L, 'dq', 'qBase', (e) => `dqs[${e}] * params.scale`)}
    delta[row] = dsum;`,
  );
}

/** The buffers of the dk and the dv pass, in binding order. */
const KEY_PASS_BUFFERS = {
  dk: ['q', 'k', 'v', 'dOut', 'lse', 'delta', 'dk'],
  dv: ['q', 'k', 'dOut', 'lse', 'dv'],
} as const;

/**
 * dk or dv of ROWS keys of one (batch, kv head), over tiles of the packed
 * (query token, grouped head) rows at and after its first key. Each is a pass
 * of its own: together, an invocation's four rows of headDim (k, v, dk, dv)
 * outgrew the registers.
 */
function keyPassShader(D: number, part: 'dk' | 'dv'): ShaderSource {
  const L = lanesOf(D);
  const W = L.W;
  const B = tileRows(D, 2, 2);
  const key = `flashAttention/${part}/d${D}/k${B}/w${D / W}/wg${ROWS}`;
  const dk = part === 'dk';
  const code = () => {
    const module = new ShaderModule().params(PARAMS);
    declareBuffers(module, L, KEY_PASS_BUFFERS[part], () => false);
    module.workgroupArray('ta', L.type, B * W);
    module.workgroupArray('tb', L.type, B * W);
    module.workgroupArray('tl', 'f32', B);
    if (dk) module.workgroupArray('td', 'f32', B);
    return module.build(
      undefined,
      ROWS,
      `${PLACE}
  let b = bh / params.kvHeads;
  let kvh = bh % params.kvHeads;
  let kvBase = ((t * params.batch + b) * params.kvHeads + kvh) * ${W}u;
  var kr: array<f32, ${D}>;
  var acc: array<f32, ${D}>;
  ${loadRow(L, 'kr', 'k', 'kvBase')}
  ${
    dk
      ? `var vr: array<f32, ${D}>;
  ${loadRow(L, 'vr', 'v', 'kvBase')}`
      : ''
  }
  // Packed rows r = (i − t0) · group + head within the group, for queries i = t0 … T − 1.
  let total = (params.tokens - t0) * params.group;
  for (var r0 = 0u; r0 < total; r0 += ${B}u) {
    workgroupBarrier();
    for (var e = tid; e < ${B * W}u; e += ${ROWS}u) {
      let r = min(r0 + e / ${W}u, total - 1u);
      let i = t0 + r / params.group;
      let row = (i * params.batch + b) * params.heads + kvh * params.group + r % params.group;
      ta[e] = q[row * ${W}u + e % ${W}u];
      tb[e] = dOut[row * ${W}u + e % ${W}u];
      if (e % ${W}u == 0u) {
        tl[e / ${W}u] = lse[row];
        ${dk ? `td[e / ${W}u] = delta[row];` : ''}
      }
    }
    workgroupBarrier();
    for (var x = 0u; x < ${B}u; x++) {
      let r = r0 + x;
      let causal = r < total && t0 + r / params.group >= t;
      var s = 0.0;
      ${overWords(L, `ta[x * ${W}u + d]`, (c, e) => `s += ${c} * kr[${e}];`)}
      let p = select(0.0, exp(s * params.scale - tl[x]), causal);
${
  dk
    ? `      var dp = 0.0;
      ${overWords(L, `tb[x * ${W}u + d]`, (c, e) => `dp += ${c} * vr[${e}];`)}
      let ds = p * (dp - td[x]);
      ${overWords(L, `ta[x * ${W}u + d]`, (c, e) => `acc[${e}] += ds * ${c};`)}`
    : `      ${overWords(L, `tb[x * ${W}u + d]`, (c, e) => `acc[${e}] += p * ${c};`)}`
}
    }
  }
  if (mine < params.tokens) {
    ${storeRow(L, part, 'kvBase', (e) => (dk ? `acc[${e}] * params.scale` : `acc[${e}]`))}
  }`,
    );
  };
  return { key, kernel: 'flashAttentionBackward', code };
}

/** The params of a pass over `heads` (batch, head) pairs, and its workgroup grid. */
function pass(
  encoder: KernelEncoder,
  operation: string,
  q: Operand,
  k: Operand,
  scale: number,
  kvRows: boolean,
) {
  const d = flashDims(q, k);
  if (tileRows(d.headDim, 2, 2) < 1) {
    throw new UnsupportedOnBackendError(
      `${operation}: a tile row of headDim ${d.headDim} does not fit in workgroup memory`,
      {
        operation,
        argument: 'q',
        expected: `headDim <= ${Math.floor(WORKGROUP_BYTES / 8) - 1}`,
        actual: String(d.headDim),
      },
    );
  }
  const rowTiles = Math.ceil(d.tokens / ROWS);
  const tiles = rowTiles * d.batch * (kvRows ? d.nKvHeads : d.nHeads);
  const values = {
    tokens: d.tokens,
    batch: d.batch,
    heads: d.nHeads,
    kvHeads: d.nKvHeads,
    group: d.nHeads / d.nKvHeads,
    rowTiles,
    tiles,
    scale: flashScale(scale, d.headDim),
  };
  return { d, params: { layout: PARAMS, values }, workgroups: gridFor(tiles, encoder.limits) };
}

export const flashAttentionKernel = wgpuKernel(flashAttention, (encoder, { inputs, outputs, attrs }) => {
  const [q, k, v] = inputs as [Operand, Operand, Operand];
  const [out, lse] = outputs as [Operand, Operand];
  if (out.size === 0) return;
  const { d, ...rest } = pass(encoder, 'flashAttention', q, k, attrs.scale, false);
  encoder.dispatch({ shader: forwardShader(d.headDim), buffers: [q, k, v, out, lse], ...rest });
});

export const flashAttentionBackwardKernel = wgpuKernel(
  flashAttentionBackward,
  (encoder, { inputs, outputs, attrs }) => {
    const [q, k, v, out, dOut, lse] = inputs as [Operand, Operand, Operand, Operand, Operand, Operand];
    const [dq, dk, dv] = outputs as [Operand, Operand, Operand];
    if (dq.size === 0) return;
    const rows = pass(encoder, 'flashAttentionBackward', q, k, attrs.scale, false);
    const bytes = 4 * lse.size;
    const delta = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
    const hd = rows.d.headDim;
    encoder.dispatch({
      shader: dqShader(hd),
      buffers: [q, k, v, out, dOut, lse, dq, delta],
      params: rows.params,
      workgroups: rows.workgroups,
    });
    const keys = pass(encoder, 'flashAttentionBackward', q, k, attrs.scale, true);
    const operands = { q, k, v, dOut, lse, delta, dk, dv };
    for (const part of ['dk', 'dv'] as const) {
      encoder.dispatch({
        shader: keyPassShader(hd, part),
        buffers: KEY_PASS_BUFFERS[part].map((name) => operands[name]),
        params: keys.params,
        workgroups: keys.workgroups,
      });
    }
  },
);

/** Causal self-attention for training and its backward. */
export const FLASH_ATTENTION_KERNELS = [flashAttentionKernel, flashAttentionBackwardKernel] as const;
