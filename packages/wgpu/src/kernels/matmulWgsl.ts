import type { LinearActivation } from '@rayo/core';
import { linearWorkgroup } from '../kernel.js';
import { paramLayout } from '../params.js';
import { ACTIVATION_FUNCTIONS_WGSL, activationWgsl } from '../wgsl/activations.js';
import { halfFunctions, type Storage } from '../wgsl/half.js';
import type { ShaderModule, WgslType } from '../wgsl/module.js';

// What the matrix-product shaders share: their parameters, bindings, the
// double-buffered K loop of the tiled products, and the epilogue that writes
// y (alpha, beta·c, and linear's bias and activation).

export const PARAMS = paramLayout([
  ['m', 'u32'],
  ['n', 'u32'],
  ['k', 'u32'],
  /** Output blocks along M and N per batch entry and split. */
  ['tilesM', 'u32'],
  ['tilesN', 'u32'],
  ['splits', 'u32'],
  ['batches', 'u32'],
  ['kPerSplit', 'u32'],
  ['strideA', 'u32'],
  ['strideB', 'u32'],
  ['strideY', 'u32'],
  /** Elements of one split's partial sums (batches · M · N). */
  ['partStride', 'u32'],
  ['alpha', 'f32'],
  ['beta', 'f32'],
] as const);

export const REDUCE_PARAMS = paramLayout([
  ['total', 'u32'],
  ['splits', 'u32'],
  /** Columns of y: the bias of element i is bias[i % n]. */
  ['n', 'u32'],
  ['alpha', 'f32'],
  ['beta', 'f32'],
] as const);

/** f32 elements read as vec4 or scalar. */
const f32Type = (vec: boolean): WgslType => (vec ? 'vec4<f32>' : 'f32');

/**
 * What `linear` adds after alpha·v (+ beta·c): a bias per column, then an
 * activation, with the pre-activation z stored too when `z` is set.
 */
export interface Epilogue {
  readonly bias: boolean;
  readonly activation: LinearActivation;
  readonly z: boolean;
}

/** How a kernel's results reach y. */
export interface Output {
  /** y (and c, and z) bound as vec4: N % 4 = 0 and aligned offsets. */
  readonly vec: boolean;
  /** c is present. */
  readonly c: boolean;
  readonly epilogue?: Epilogue;
}

/** How the f32 streaming and tiled products read a and b and write y. */
export interface OperandReads {
  readonly transA: boolean;
  readonly transB: boolean;
  /** vec4 loads of a (transB: along K) and of b. */
  readonly vecA: boolean;
  readonly vecB: boolean;
  /** How b is stored (f32, or halves in u32 words). */
  readonly b: Storage;
  readonly out: Output;
}

export function epilogueKey(e: Epilogue | undefined): string {
  return e ? `/${e.bias ? 'bias' : 'nobias'}/${e.activation}${e.z ? '/z' : ''}` : '';
}

export function outputKey(o: Output): string {
  return `y${o.vec ? 4 : 1}/c${+o.c}${epilogueKey(o.epilogue)}`;
}

/** WGSL `act_f(z)` for an activation, with the helpers it uses (nothing without one). */
export function epilogueActivationWgsl(e: Epilogue | undefined): string {
  if (!e || e.activation === 'none') return '';
  return `${ACTIVATION_FUNCTIONS_WGSL}\nfn act_f(x: f32) -> f32 { return ${activationWgsl(e.activation, 'x')}; }`;
}

/**
 * WGSL statements that store `value` (an f32 or, with `vec4`, a vec4
 * expression of the product) of column `col` as y: plainly, or through the
 * epilogue (z = value + bias, stored when asked, and y = act(z)). `yAt` and
 * `zAt` are the index expressions of y and z.
 */
export function storeWgsl(
  e: Epilogue | undefined,
  value: string,
  col: string,
  yAt: string,
  vec4: boolean,
): string {
  if (!e) return `y${yAt} = ${value};`;
  const bias = !e.bias
    ? ''
    : vec4
      ? ` + vec4<f32>(bias[${col}], bias[${col} + 1u], bias[${col} + 2u], bias[${col} + 3u])`
      : ` + bias[${col}]`;
  const act = (x: string) =>
    e.activation === 'none'
      ? x
      : vec4
        ? `vec4<f32>(act_f(${x}.x), act_f(${x}.y), act_f(${x}.z), act_f(${x}.w))`
        : `act_f(${x})`;
  return `{ let zv = ${value}${bias};${e.z ? ` z${yAt} = zv;` : ''} y${yAt} = ${act('zv')}; }`;
}

/**
 * WGSL `emit4(idx, col, v)` / `emit1(idx, v)`: the epilogue
 * y = alpha·v (+ beta·c) at element `idx` of y (columns col..col+3 for emit4,
 * those past N skipped). A K split writes its raw sums into scratch the same
 * way: alpha = 1, no c, and its own block of the output at `yOff`.
 */
export function emitFunctions(o: Output): string {
  const e = o.epilogue;
  const value = (v: string, at: string) => `params.alpha * ${v}${o.c ? ` + params.beta * c[${at}]` : ''}`;
  const vec4Store = o.vec
    ? `if (col < params.n) { ${storeWgsl(e, value('v', 'idx / 4u'), 'col', '[(yOff + idx) / 4u]', true)} }`
    : `for (var j = 0u; j < 4u; j++) {
    if (col + j < params.n) { ${storeWgsl(e, value('v[j]', 'idx + j'), 'col + j', '[yOff + idx + j]', false)} }
  }`;
  // Element idx of a batch's [M, N] block is in column idx % N (blocks start at multiples of N).
  const scalarStore = o.vec
    ? `let at = yOff + idx;\n  ${storeWgsl(e, value('v', 'idx / 4u][idx % 4u'), 'idx % params.n', '[at / 4u][at % 4u]', false)}`
    : storeWgsl(e, value('v', 'idx'), 'idx % params.n', '[yOff + idx]', false);
  return `${epilogueActivationWgsl(e)}
fn emit4(idx: u32, col: u32, v: vec4<f32>, yOff: u32) {
  ${vec4Store}
}
fn emit1(idx: u32, v: f32, yOff: u32) {
  ${scalarStore}
}`;
}

/**
 * WGSL that maps the linear workgroup index to (block, split, batch) and
 * returns from surplus workgroups of a `gridFor` grid.
 */
export function decodeWorkgroup(): string {
  return `let wgi = ${linearWorkgroup};
  let blocks = params.tilesM * params.tilesN;
  if (wgi >= blocks * params.splits * params.batches) { return; }
  let block = wgi % blocks;
  let rest = wgi / blocks;
  let split = rest % params.splits;
  let batch = rest / params.splits;
  let kBegin = split * params.kPerSplit;
  let kEnd = min(params.k, kBegin + params.kPerSplit);
  let aBase = batch * params.strideA;
  let bBase = batch * params.strideB;
  let yBase = batch * params.strideY;
  let yOff = split * params.partStride;`;
}

/**
 * Declares the params, then a, b, c, bias, y and z where present (the order
 * `outputBuffers` binds them in). `bType` is b's element type (half weights
 * are bound as u32 words, see `wgsl/half.ts`); its `halfFunctions` follow.
 */
export function declareBindings(
  module: ShaderModule,
  vecA: boolean,
  bType: WgslType,
  o: Output,
  b: Storage = 'f32',
  a: Storage = 'f32',
  y: Storage = 'f32',
): void {
  module.params(PARAMS);
  module.storage('a', a === 'f32' ? f32Type(vecA) : vecA ? 'vec4<u32>' : 'u32', 'read');
  module.storage('b', bType, 'read');
  if (o.c) module.storage('c', f32Type(o.vec), 'read');
  if (o.epilogue?.bias) module.storage('bias', 'f32', 'read');
  // A half y is written a u32 word (two elements) at a time.
  module.storage('y', y === 'f32' ? f32Type(o.vec) : 'u32', 'read_write');
  if (o.epilogue?.z) module.storage('z', f32Type(o.vec), 'read_write');
  module.declare(halfFunctions(b));
  if (a !== b) module.declare(halfFunctions(a));
}

/** How a tiled product stages one operand: global memory → registers → one of two workgroup buffers. */
export interface TileStage {
  /** WGSL: fills the registers with the operand's slice of K starting at `k0` (zero outside it). */
  load(k0: string): string;
  /** WGSL: stores the registers into the workgroup buffer starting at `buffer`. */
  store(buffer: string): string;
  /** Elements of one buffer in the workgroup array. */
  readonly size: number;
}

/**
 * WGSL: the K loop of the tiled products (the f32 tiles and the half
 * subgroup-matrix tiles). The first BK slice of both operands is staged into
 * buffer 0; each step then loads the next slice into registers, multiplies
 * the current buffers (`multiply`, which reads them at offsets `ca` and
 * `cb`), and stores the registers into the other buffers, one barrier per
 * step. Reads [kBegin, kEnd) of `decodeWorkgroup`.
 */
export function doubleBufferedKLoop(a: TileStage, b: TileStage, bk: number, multiply: string): string {
  return `${a.load('kBegin')}
  ${b.load('kBegin')}
  ${a.store('0u')}
  ${b.store('0u')}
  workgroupBarrier();
  let steps = (kEnd - kBegin + ${bk - 1}u) / ${bk}u;
  for (var s = 0u; s < steps; s++) {
    let cur = s % 2u;
    let next = s + 1u < steps;
    if (next) {
      let k0 = kBegin + (s + 1u) * ${bk}u;
      ${a.load('k0')}
      ${b.load('k0')}
    }
    let ca = cur * ${a.size}u;
    let cb = cur * ${b.size}u;
    ${multiply}
    if (next) {
      let na = ${a.size}u - ca;
      let nb = ${b.size}u - cb;
      ${a.store('na')}
      ${b.store('nb')}
    }
    workgroupBarrier();
  }`;
}

/** Pipeline-key part of b's storage: nothing for f32 (the keys f32 always had). */
export function storageKey(b: Storage): string {
  return b === 'f32' ? '' : `/b-${b}`;
}
