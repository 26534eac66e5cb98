import type { SubgroupMatrixConfig } from '../device.js';
import type { ParamLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import type { F16AttentionTileName } from '../tuning.js';
import { linearWorkgroup, ShaderModule } from '../wgsl/module.js';

// Prefill attention over an f16 cache on subgroup matrices (WGSL's
// `chromium_experimental_subgroup_matrix`, the tensor cores on NVIDIA), tiled
// the FlashAttention-2 way. A workgroup takes 16 query rows per subgroup of
// one kv head (a row being (token, grouped head), as in `causalAttention.ts`)
// and walks K/V tiles up to its last row's causal bound:
//   S = Q·Kᵀ    16×16 f16 fragments, f32 results, stored to workgroup memory;
//   softmax     two invocations a row, f32, each taking every other key;
//   P·V         P rounded to f16 into the rows that staged Q (Q's fragments
//               are held from the start), into fresh f32 result fragments
//               stored to workgroup memory, and added to each invocation's
//               f32 accumulator of O (its row's every other column) after
//               rescaling it by the tile's exp(m_old − m_new).
// Only fragment loads, products and stores of results are used, as in the
// f16 products (results are never loaded back). Keys past a row's bound
// weigh 0; rows past the end compute the last row again and store nothing.
//
// `emulated` runs the same text with each fragment operation replaced by
// plain arithmetic (see `emulatedOps`) and loops over fragments where the
// real kernel unrolls them. It runs on any adapter with shader-f16 and
// checks the staging, the fragment addressing, the masking and the
// rescaling the real variant has; its workgroups have 2 subgroups, as its
// copy of Q does not fit 4 in lavapipe's 32 KiB.

/** Fragment side (the 16×16×16 f16 → f32 configuration) and subgroup size the kernel is written for. */
const FRAG = 16;
const LANES = 32;
/** Halves of padding per staged f16 row, floats per f32 row (16 bytes each). */
const PAD_HALVES = 8;
const PAD_FLOATS = 4;
const NEG_BIG = '-3.0e38';

/** A workgroup's tile: `subgroups` × 16 query rows, K/V tiles of `keys` keys. */
export interface FlashPrefillTile {
  readonly subgroups: number;
  readonly keys: number;
}

export interface FlashPrefillVariant {
  readonly compute: 'subgroup-matrix' | 'emulated';
  readonly headDim: number;
  readonly tile: FlashPrefillTile;
}

/**
 * Most rows first, then most keys: the rows sharing a K/V tile divide its
 * staging (a store per half) among more products, and more keys a tile
 * halve the barriers a key. 8 × 32 ran the 1B shape's prompt attention 2.3×
 * as fast as 4 × 64 on an H200.
 */
const TILES: readonly FlashPrefillTile[] = [
  { subgroups: 8, keys: 32 },
  { subgroups: 4, keys: 64 },
  { subgroups: 4, keys: 32 },
  { subgroups: 2, keys: 32 },
  { subgroups: 4, keys: 16 },
  { subgroups: 2, keys: 16 },
];

/** Whether `configs` has the one configuration the kernel is written for: f16 16×16×16 → f32. */
export function hasFlashPrefillConfig(configs: readonly SubgroupMatrixConfig[]): boolean {
  return configs.some(
    (c) =>
      c.componentType === 'f16' &&
      c.resultComponentType === 'f32' &&
      c.M === FRAG &&
      c.N === FRAG &&
      c.K === FRAG,
  );
}

/** Query rows of a workgroup. */
export const flashPrefillRows = (tile: FlashPrefillTile) => tile.subgroups * FRAG;

/** Invocations of a workgroup. */
export const flashPrefillThreads = (tile: FlashPrefillTile) => tile.subgroups * LANES;

/** Bytes of workgroup memory: Q (then P), K and V in f16, S per subgroup and the row exchange in f32. */
export function flashPrefillBytes(headDim: number, tile: FlashPrefillTile, emulated: boolean): number {
  const stride = headDim + PAD_HALVES;
  const rows = tile.subgroups * FRAG;
  // The emulation holds Q's fragments in a copy of Q.
  const halves = ((emulated ? 2 : 1) * rows + 2 * tile.keys) * stride;
  const floats = rows * (tile.keys + PAD_FLOATS) + 2 * rows;
  return halves * 2 + floats * 4 + 4;
}

/** `named` where it fits, else the first of TILES that does for `headDim`; undefined where the kernel does not take it. */
export function pickFlashPrefillTile(
  headDim: number,
  maxWorkgroupBytes: number,
  maxInvocations: number,
  emulated: boolean,
  named?: F16AttentionTileName,
): FlashPrefillTile | undefined {
  if (headDim % FRAG !== 0 || headDim === 0) return undefined;
  // P's rows (keys long) live in Q's (headDim long); P·V goes through S's rows keys columns at a time.
  const fits = (t: FlashPrefillTile) =>
    headDim % t.keys === 0 &&
    flashPrefillThreads(t) <= maxInvocations &&
    flashPrefillBytes(headDim, t, emulated) <= maxWorkgroupBytes;
  const [subgroups, keys] = named ? named.split('x').map(Number) : [];
  const chosen = named && { subgroups: subgroups!, keys: keys! };
  return chosen && fits(chosen) ? chosen : TILES.find(fits);
}

type Kind = 'left' | 'right' | 'result';

/** The fragment operations in WGSL, on subgroup matrices or emulated. */
interface FragmentOps {
  declare(name: string, kind: Kind): string;
  load(name: string, kind: Kind, array: string, at: string, colMajor: boolean, stride: number): string;
  store(name: string, array: string, at: string, stride: number): string;
  mma(acc: string, left: string, right: string): string;
  zero(name: string): string;
}

const PER_LANE = (FRAG * FRAG) / LANES;

function realOps(): FragmentOps {
  const type = (kind: Kind) =>
    kind === 'result'
      ? `subgroup_matrix_result<f32, ${FRAG}, ${FRAG}>`
      : `subgroup_matrix_${kind}<f16, ${FRAG}, ${FRAG}>`;
  return {
    declare: (name, kind) => `var ${name}: ${type(kind)};`,
    load: (name, kind, array, at, colMajor, stride) =>
      `${name} = subgroupMatrixLoad<${type(kind)}>(&${array}, ${at}, ${colMajor}, ${stride}u);`,
    store: (name, array, at, stride) => `subgroupMatrixStore(&${array}, ${at}, ${name}, false, ${stride}u);`,
    mma: (acc, left, right) => `${acc} = subgroupMatrixMultiplyAccumulate(${left}, ${right}, ${acc});`,
    zero: (name) => `${name} = ${type('result')}();`,
  };
}

/**
 * The emulation: a result fragment is the lane's 8 values; a left or right
 * fragment is the offset it was loaded from (the array, orientation and
 * stride are the text's), read by the product, so no lane waits on another
 * (barriers in emulated products compiled for minutes on llvmpipe). Q's
 * fragments outlive their rows (P is written over them): loading one copies
 * it to `emu_q` at the same offset. `functions()` is the WGSL the text used.
 */
function emulatedOps(): FragmentOps & { functions(): string } {
  const from = new Map<string, { array: string; colMajor: boolean; stride: number }>();
  const products = new Map<string, string>();
  const base = (name: string) => name.replace(/\[.*$/, '');
  const place = `let flat = e * ${LANES}u + lane;
    let row = flat / ${FRAG}u;
    let col = flat % ${FRAG}u;`;
  const address = (colMajor: boolean, stride: number, row: string, col: string) =>
    colMajor ? `${col} * ${stride}u + ${row}` : `${row} * ${stride}u + ${col}`;
  const fixed = (qStride: number) => `
fn emuHold(at: u32, lane: u32) -> u32 {
  for (var e = 0u; e < ${PER_LANE}u; e++) {
    ${place}
    emu_q[at + row * ${qStride}u + col] = tile_q[at + row * ${qStride}u + col];
  }
  return at;
}
fn emuLoad_tile_s(at: u32, stride: u32, lane: u32) -> array<f32, ${PER_LANE}> {
  var m: array<f32, ${PER_LANE}>;
  for (var e = 0u; e < ${PER_LANE}u; e++) {
    ${place}
    m[e] = tile_s[at + row * stride + col];
  }
  return m;
}
fn emuStore_tile_s(m: array<f32, ${PER_LANE}>, at: u32, stride: u32, lane: u32) {
  for (var e = 0u; e < ${PER_LANE}u; e++) {
    ${place}
    tile_s[at + row * stride + col] = m[e];
  }
}`;
  let qStride = 0;
  return {
    declare: (name, kind) => `var ${name}: ${kind === 'result' ? `array<f32, ${PER_LANE}>` : 'u32'};`,
    load: (name, kind, array, at, colMajor, stride) => {
      if (kind === 'result') return `${name} = emuLoad_${array}(${at}, ${stride}u, lane);`;
      const held = base(name) === 'q';
      if (held) qStride = stride;
      from.set(base(name), { array: held ? 'emu_q' : array, colMajor, stride });
      return held ? `${name} = emuHold(${at}, lane);` : `${name} = ${at};`;
    },
    store: (name, array, at, stride) => `emuStore_${array}(${name}, ${at}, ${stride}u, lane);`,
    mma: (acc, left, right) => {
      const l = from.get(base(left))!;
      const r = from.get(base(right))!;
      const fn = `emuMma_${l.array}_${r.array}`;
      products.set(
        fn,
        `
fn ${fn}(acc: array<f32, ${PER_LANE}>, l: u32, r: u32, lane: u32, one: u32) -> array<f32, ${PER_LANE}> {
  var out = acc;
  for (var e = 0u; e < ${PER_LANE}u * one; e++) {
    ${place}
    var s = 0.0;
    for (var x = 0u; x < ${FRAG}u * one; x++) {
      s += f32(${l.array}[l + ${address(l.colMajor, l.stride, 'row', 'x')}]) * f32(${r.array}[r + ${address(r.colMajor, r.stride, 'x', 'col')}]);
    }
    out[e] += s;
  }
  return out;
}`,
      );
      return `${acc} = ${fn}(${acc}, ${left}, ${right}, lane, one);`;
    },
    zero: (name) => `${name} = array<f32, ${PER_LANE}>();`,
    functions: () => fixed(qStride) + [...products.values()].join(''),
  };
}

/** Pipeline key and WGSL of one variant; `params` is causalAttention's layout. */
export function flashPrefillShader(v: FlashPrefillVariant, params: ParamLayout<string>): ShaderSource {
  const { headDim: D, tile } = v;
  const real = v.compute === 'subgroup-matrix';
  const R = flashPrefillRows(tile);
  const T = flashPrefillThreads(tile);
  const B = tile.keys;
  const key = `decoding/causalAttention/flash-${v.compute}/d${D}/r${R}k${B}/cache-f16/wg${T}`;
  const code = () => {
    const emulated = real ? undefined : emulatedOps();
    const ops = emulated ?? realOps();
    // Strides: staged f16 rows (Q, P, K, V), f32 rows of S (and of O on its way out).
    const QS = D + PAD_HALVES;
    const SS = B + PAD_FLOATS;
    const dFrags = D / FRAG;
    const kFrags = B / FRAG;
    // The real kernel unrolls over fragments (each a variable of its own); the emulation loops
    // over arrays of them, as llvmpipe compiles unrolled emulated products for minutes.
    type Index = number | string;
    const each = (count: number, index: string, body: (i: Index) => string) =>
      real
        ? Array.from({ length: count }, (_, i) => body(i)).join('\n    ')
        : `for (var ${index} = 0u; ${index} < ${count}u * one; ${index}++) {\n      ${body(index)}\n    }`;
    const frag = (name: string, i: Index) => (real ? `${name}${i}` : `${name}[${i}]`);
    const times = (i: Index, k: number) => (typeof i === 'number' ? `${i * k}u` : `${i} * ${k}u`);
    const array = (name: string, kind: Kind, count: number) =>
      real
        ? Array.from({ length: count }, (_, i) => ops.declare(`${name}${i}`, kind)).join('\n  ')
        : `var ${name}: array<${kind === 'result' ? `array<f32, ${PER_LANE}>` : 'u32'}, ${count}>;`;
    const decls = [
      array('q', 'left', dFrags),
      ops.declare('sf', 'result'),
      ops.declare('kf', 'right'),
      ops.declare('vf', 'right'),
      ops.declare('pf', 'left'),
    ].join('\n  ');
    const sgS = `sg * ${FRAG * SS}u`;
    const holdQ = each(dFrags, 'i', (i) =>
      ops.load(frag('q', i), 'left', 'tile_q', `sg * ${FRAG * QS}u + ${times(i, FRAG)}`, false, QS),
    );
    const scores = each(
      kFrags,
      'n',
      (n) => `${ops.zero('sf')}
    ${each(
      dFrags,
      'i',
      (i) => `${ops.load('kf', 'right', 'tile_k', `${times(n, FRAG * QS)} + ${times(i, FRAG)}`, true, QS)}
    ${ops.mma('sf', frag('q', i), 'kf')}`,
    )}
    ${ops.store('sf', 'tile_s', `${sgS} + ${times(n, FRAG)}`, SS)}`,
    );
    // O's columns chunk·B … chunk·B + B − 1 of P·V into S's rows, then into each
    // invocation's accumulator (its row's every other column), rescaled by alpha.
    const pv = each(
      D / B,
      'chunk',
      (c) => `{
    ${each(kFrags, 'f', (f) => {
      const column =
        typeof c === 'number' && typeof f === 'number'
          ? `${(c * kFrags + f) * FRAG}u`
          : `(${times(c, kFrags)} + ${f}) * ${FRAG}u`;
      return `${ops.zero('sf')}
    ${each(
      kFrags,
      'kk',
      (kk) => `${ops.load('pf', 'left', 'tile_q', `sg * ${FRAG * QS}u + ${times(kk, FRAG)}`, false, QS)}
    ${ops.load('vf', 'right', 'tile_v', `${times(kk, FRAG * QS)} + ${column}`, false, QS)}
    ${ops.mma('sf', 'pf', 'vf')}`,
    )}
    ${ops.store('sf', 'tile_s', `${sgS} + ${times(f, FRAG)}`, SS)}`;
    })}
    workgroupBarrier();
    for (var y = 0u; y < ${B / 2}u * one; y++) {
      let j = side + 2u * ((y + rot) % ${B / 2}u);
      let x = ${times(c, B / 2)} + y;
      acc[x] = acc[x] * alpha + tile_s[sAt + j];
    }
    workgroupBarrier();
  }`,
    );
    const widths = D / 8;
    // Each invocation's share of a K/V tile, read into registers a tile ahead (the reads
    // overlap the tile's products); keys past the visited ones read as zeros.
    const fetches = Math.ceil((B * widths) / T);
    const fetch = (k0: string) => `for (var x = 0u; x < ${fetches}u * one; x++) {
      let e = tid + x * ${T}u;
      let j = ${k0} + e / ${widths}u;
      let src = kvBase + min(j, params.maxSeq - 1u) * ${widths}u + e % ${widths}u;
      kr[x] = vec4<u32>();
      vr[x] = vec4<u32>();
      if (j < keys && e < ${B * widths}u) { kr[x] = k[src]; vr[x] = v[src]; }
    }`;
    const unpack = (word: string, array: string) =>
      ['x', 'y', 'z', 'w']
        .map(
          (c, i) =>
            `let ${array}${c} = bitcast<vec2<f16>>(${word}.${c}); ${array}[at + ${2 * i}u] = ${array}${c}.x; ${array}[at + ${2 * i + 1}u] = ${array}${c}.y;`,
        )
        .join('\n        ');
    const module = new ShaderModule().params(params);
    if (real) {
      module.enable('chromium_experimental_subgroup_matrix').enable('subgroups');
      // Fragment offsets depend on subgroup_id: uniform per subgroup, not per workgroup.
      module.diagnostic('off', 'chromium.subgroup_matrix_uniformity');
    }
    module.storage('q', 'f32', 'read');
    module.storage('k', 'vec4<u32>', 'read');
    module.storage('v', 'vec4<u32>', 'read');
    module.storage('out', 'f32', 'read_write');
    module.workgroupArray('tile_q', 'f16', R * QS);
    module.workgroupArray('tile_k', 'f16', B * QS);
    module.workgroupArray('tile_v', 'f16', B * QS);
    module.workgroupArray('tile_s', 'f32', R * SS);
    module.workgroupArray('red', 'f32', 2 * R);
    if (emulated) {
      module.workgroupArray('emu_q', 'f16', R * QS);
      module.workgroupVar('emu_one', 'u32');
    }
    const body = `  let w = ${linearWorkgroup};
  // A grid spread over y may have a few workgroups too many.
  if (w >= params.tiles) { return; }
  ${
    real
      ? 'let sg = sgId;\n  // Loops run to counts times one (opaque in the emulation, see there).\n  let one = 1u;'
      : `let sg = tid / ${LANES}u;
  let lane = tid % ${LANES}u;
  // 1, opaque to the compiler: loops run to counts times one, as llvmpipe
  // compiled the emulation's unrolled constant loops for minutes.
  if (tid == 0u) { emu_one = 1u; }
  let one = workgroupUniformLoad(&emu_one);`
  }
  let g = w / params.rowTiles;
  let row0 = (w % params.rowTiles) * ${R}u;
  let rows = params.tokens * params.group;
  // Keys the workgroup visits: up to its last row's bound (uniform: no row of it sees further).
  let keys = params.position + min(row0 + ${R - 1}u, rows - 1u) / params.group + 1u;
  let kvBase = g * params.maxSeq * ${widths}u;
  // The softmax side: two invocations a row, each every other key of a tile, in an order
  // that puts the 32 invocations of a row block on distinct banks of S.
  let lr = tid / ${LANES}u * ${FRAG}u + tid % ${FRAG}u;
  let side = tid / ${FRAG}u % 2u;
  let rot = tid % ${FRAG}u / 8u;
  let row = min(row0 + lr, rows - 1u);
  let t = row / params.group;
  let bound = params.position + t;
  let sAt = tid / ${LANES}u * ${FRAG * SS}u + tid % ${FRAG}u * ${SS}u;
  let pAt = lr * ${QS}u;
  for (var e = tid; e < ${R * D}u * one; e += ${T}u) {
    let r = min(row0 + e / ${D}u, rows - 1u);
    let h = g * params.group + r % params.group;
    tile_q[e / ${D}u * ${QS}u + e % ${D}u] = f16(q[((r / params.group) * params.heads + h) * ${D}u + e % ${D}u]);
  }
  workgroupBarrier();
  ${decls}
  ${holdQ}
  var acc: array<f32, ${D / 2}>;
  var m = ${NEG_BIG};
  var sum = 0.0;
  var sv: array<f32, ${B / 2}>;
  var kr: array<vec4<u32>, ${fetches}>;
  var vr: array<vec4<u32>, ${fetches}>;
  ${fetch('0u')}
  for (var k0 = 0u; k0 < keys; k0 += ${B}u) {
    // The previous tile's readers (and the Q fragment loads) are done before it is overwritten.
    workgroupBarrier();
    for (var x = 0u; x < ${fetches}u * one; x++) {
      let e = tid + x * ${T}u;
      if (e < ${B * widths}u) {
        let at = e / ${widths}u * ${QS}u + e % ${widths}u * 8u;
        let kw = kr[x];
        let vw = vr[x];
        ${unpack('kw', 'tile_k')}
        ${unpack('vw', 'tile_v')}
      }
    }
    workgroupBarrier();
    ${fetch(`k0 + ${B}u`)}
    ${scores}
    workgroupBarrier();
    var mx = ${NEG_BIG};
    for (var c = 0u; c < ${B / 2}u * one; c++) {
      let j = side + 2u * ((c + rot) % ${B / 2}u);
      let s = select(${NEG_BIG}, params.scale * tile_s[sAt + j], k0 + j <= bound);
      sv[c] = s;
      mx = max(mx, s);
    }
    red[tid] = mx;
    workgroupBarrier();
    let mNew = max(m, max(mx, red[tid ^ ${FRAG}u]));
    let alpha = exp(m - mNew);
    m = mNew;
    sum *= alpha;
    for (var c = 0u; c < ${B / 2}u * one; c++) {
      let j = side + 2u * ((c + rot) % ${B / 2}u);
      let p = f16(select(0.0, exp(sv[c] - m), k0 + j <= bound));
      tile_q[pAt + j] = p;
      sum += f32(p);
    }
    workgroupBarrier();
    ${pv}
  }
  red[tid] = sum;
  workgroupBarrier();
  let total = sum + red[tid ^ ${FRAG}u];
  let oBase = (t * params.heads + g * params.group + row % params.group) * ${D}u;
  if (row0 + lr < rows) {
    for (var x = 0u; x < ${D / 2}u * one; x++) {
      let j = side + 2u * ((x % ${B / 2}u + rot) % ${B / 2}u);
      out[oBase + x / ${B / 2}u * ${B}u + j] = acc[x] / total;
    }
  }`;
    if (emulated) module.declare(emulated.functions());
    return module.build(
      undefined,
      T,
      body,
      `@builtin(local_invocation_index) tid: u32${real ? ', @builtin(subgroup_id) sgId: u32, @builtin(subgroup_invocation_id) lane: u32' : ''}`,
    );
  };
  return { key, kernel: 'causalAttention', code };
}

/** What of the device the routing depends on. */
export interface FlashPrefillDevice {
  readonly maxWorkgroupBytes: number;
  readonly maxInvocations: number;
  readonly shaderF16: boolean;
  /** The f16AttentionTile switch: this tile where it fits. */
  readonly tile?: F16AttentionTileName;
  readonly subgroupMatrix?: {
    readonly configs: readonly SubgroupMatrixConfig[];
    readonly subgroupSize: number;
    readonly minSubgroupSize: number;
  };
}

/**
 * The variant prefill attention takes over an f16 cache in the f16 products'
 * `mode` ('widen' keeps the f32 kernels), or undefined where the device or
 * the head dim does not fit it: subgroup matrices need the f16 → f32
 * 16×16×16 configuration and subgroups of exactly 32.
 */
export function planFlashPrefill(
  headDim: number,
  mode: 'subgroup-matrix' | 'emulated' | 'widen',
  device: FlashPrefillDevice,
): FlashPrefillVariant | undefined {
  if (mode === 'widen' || !device.shaderF16) return undefined;
  const emulated = mode === 'emulated';
  const sm = device.subgroupMatrix;
  const usable =
    sm && hasFlashPrefillConfig(sm.configs) && sm.subgroupSize === LANES && sm.minSubgroupSize === LANES;
  if (!emulated && !usable) return undefined;
  const tile = pickFlashPrefillTile(
    headDim,
    device.maxWorkgroupBytes,
    device.maxInvocations,
    emulated,
    device.tile,
  );
  return tile && { compute: emulated ? 'emulated' : 'subgroup-matrix', headDim, tile };
}
