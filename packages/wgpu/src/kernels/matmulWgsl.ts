import type { LinearActivation } from '@rayo/core';
import { linearWorkgroup, storage, uniform } from '../kernel.js';
import { paramLayout } from '../params.js';
import { halfFunctions, type Storage } from '../wgsl/half.js';
import { WGSL_MATH } from './common.js';

// What the matrix-product shaders share: their parameters, bindings, and the
// epilogue that writes y (alpha, beta·c, and linear's bias and activation).

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

/** Storage declaration of a binding read as vec4 or scalar. */
function bind(binding: number, name: string, vec: boolean, access: 'read' | 'read_write'): string {
  return storage(binding, name, vec ? 'vec4<f32>' : 'f32', access);
}

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

export function epilogueKey(e: Epilogue | undefined): string {
  return e ? `/${e.bias ? 'bias' : 'nobias'}/${e.activation}${e.z ? '/z' : ''}` : '';
}

export function outputKey(o: Output): string {
  return `y${o.vec ? 4 : 1}/c${+o.c}${epilogueKey(o.epilogue)}`;
}

/** WGSL `act_f(z)` for an activation, with the math it uses (nothing without one). */
export function activationWgsl(e: Epilogue | undefined): string {
  if (!e || e.activation === 'none') return '';
  const body: Record<Exclude<LinearActivation, 'none'>, string> = {
    relu: 'max(x, 0.0)',
    gelu: 'gelu_f(x)',
    silu: 'silu_f(x)',
    sigmoid: 'sigmoid_f(x)',
    tanh: 'tanh_f(x)',
  };
  return `${WGSL_MATH}\nfn act_f(x: f32) -> f32 { return ${body[e.activation]}; }`;
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
  return `${activationWgsl(e)}
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
 * a, b, then c, bias, y and z where present (the order `outputBuffers` binds
 * them in), then the params. `bType` is b's element type (half weights are
 * bound as u32 words, see `wgsl/half.ts`); its `halfFunctions` follow.
 */
export function bindings(
  vecA: boolean,
  bType: string,
  o: Output,
  b: Storage = 'f32',
  a: Storage = 'f32',
  y: Storage = 'f32',
): string {
  const aBinding =
    a === 'f32' ? bind(0, 'a', vecA, 'read') : storage(0, 'a', vecA ? 'vec4<u32>' : 'u32', 'read');
  const lines = [aBinding, storage(1, 'b', bType, 'read')];
  if (o.c) lines.push(bind(lines.length, 'c', o.vec, 'read'));
  if (o.epilogue?.bias) lines.push(storage(lines.length, 'bias', 'f32', 'read'));
  // A half y is written a u32 word (two elements) at a time.
  lines.push(
    y === 'f32'
      ? bind(lines.length, 'y', o.vec, 'read_write')
      : storage(lines.length, 'y', 'u32', 'read_write'),
  );
  if (o.epilogue?.z) lines.push(bind(lines.length, 'z', o.vec, 'read_write'));
  lines.push(uniform(lines.length));
  lines.push(halfFunctions(b));
  if (a !== b) lines.push(halfFunctions(a));
  return lines.join('\n');
}

/** Pipeline-key part of b's storage: nothing for f32 (the keys f32 always had). */
export function storageKey(b: Storage): string {
  return b === 'f32' ? '' : `/b-${b}`;
}
