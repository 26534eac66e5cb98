import { frequencyTurns64, inverseTwoPiFixed, thetaFrequency } from '@rayo/core';
import { usageFlags } from '../buffers.js';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { GPUBuffer, GPUDevice } from '../webgpuTypes.js';
import type { ShaderModule } from '../wgsl/module.js';

// The rotation every rope shader shares. The angle position · frequency
// reaches 2^31 radians, so it is never formed in f32: a pair's frequency is
// held as turns per position in a 64-bit binary fraction (two u32 words),
// its product with the u32 position modulo 2^64 is the angle's fraction of
// a turn, exact to position · 2^−64 turns, and only that fraction becomes an
// f32. theta's frequencies (f64, as the reference's) are turned into such
// fractions on the host, once per device, theta and head size, and bound as
// a table; a frequency table's f32 entries are turned on the device, each an
// exact sum of products with 1/2π in 12-bit pieces. The cosine and sine of
// the fraction come from polynomials, not from WGSL's cos and sin: those need
// only be accurate to about 2^−11 on [−π, π] (SwiftShader's are), far coarser
// than an f32 rotation.

/**
 * 1/2π in five 12-bit pieces, bits 3–62 of its binary fraction (below 2^−62
 * its rest moves a turn by less than position · 2^−62): the product of a
 * piece with 12 bits is exact in f32.
 */
export const INVERSE_TWO_PI_PIECES: readonly number[] = (() => {
  // floor(2^62 / 2π) has 60 bits.
  const bits = inverseTwoPiFixed(62);
  return Array.from({ length: 5 }, (_, j) => {
    const piece = Number((bits >> BigInt(48 - 12 * j)) & 0xfffn);
    return Math.fround(piece * 2 ** (-14 - 12 * j));
  });
})();

function f32Bits(value: number): string {
  const view = new DataView(new ArrayBuffer(4));
  view.setFloat32(0, value);
  return `0x${view.getUint32(0).toString(16)}u`;
}

/**
 * WGSL `frequencyTurns(pair)`: the pair's turns per position, as (high word,
 * low word) of a 64-bit binary fraction, from the bound `frequencies`.
 */
function frequencyTurnsWgsl(table: boolean): string {
  if (!table) {
    return `
/** theta's turns per position of the pair, computed on the host. */
fn frequencyTurns(pair: u32) -> vec2<u32> { return frequencies[pair]; }`;
  }
  const terms = INVERSE_TWO_PI_PIECES.flatMap((c) => [
    `  g = add64(g, fraction64(fh * bitcast<f32>(${f32Bits(c)})));`,
    `  g = add64(g, fraction64(fl * bitcast<f32>(${f32Bits(c)})));`,
  ]);
  return `
/** x · 2^64 for x in [0, 1), truncated: (high word, low word). */
fn fraction64(x: f32) -> vec2<u32> {
  let s = x * 4294967296.0;
  let h = floor(s);
  return vec2<u32>(u32(h), u32((s - h) * 4294967296.0));
}

/** a + b modulo 2^64. */
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let low = a.y + b.y;
  return vec2<u32>(a.x + b.x + select(0u, 1u, low < a.y), low);
}

/** The table's frequency / 2π: its 12-bit halves times 1/2π's 12-bit pieces, each product exact. */
fn frequencyTurns(pair: u32) -> vec2<u32> {
  let f = frequencies[pair];
  let fh = bitcast<f32>(bitcast<u32>(f) & 0xfffff000u);
  let fl = f - fh;
  var g = vec2<u32>(0u, 0u);
${terms.join('\n')}
  return g;
}`;
}

/** WGSL `ropeRotation(position, pair, sign)` and its helpers, for a shader that binds `frequencies` (see `declareRopeFrequencies`). */
function ropeRotationWgsl(table: boolean): string {
  return `${frequencyTurnsWgsl(table)}

/** The high word of the product a · b. */
fn mulHigh(a: u32, b: u32) -> u32 {
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let lh = a0 * b1;
  let hl = a1 * b0;
  let mid = ((a0 * b0) >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return a1 * b1 + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}

/**
 * position · the pair's frequency in turns, modulo 1, in [−½, ½): an exact
 * f32 of its top 24 bits and an f32 of the next 32.
 */
fn ropeTurns(position: u32, pair: u32) -> vec2<f32> {
  let g = frequencyTurns(pair);
  let low = position * g.y;
  let high = position * g.x + mulHigh(position, g.y);
  let top = f32(bitcast<i32>(high & 0xffffff00u)) * 2.3283064365386963e-10;
  let rest = f32(((high & 0xffu) << 24u) | (low >> 8u)) * 1.3877787807814457e-17;
  return vec2<f32>(top, rest);
}

/**
 * (cos, sin) of t.x + t.y turns (|t.x| <= ½, t.y below 2^−24): the nearest
 * quarter turn q is split off exactly, and the remainder r (|r| <= π/4
 * radians) goes to Cephes' single precision minimax polynomials, accurate
 * to about an ulp.
 */
fn cosSinTurns(t: vec2<f32>) -> vec2<f32> {
  let q = round(4.0 * t.x);
  let r = ((t.x - 0.25 * q) + t.y) * 6.283185307179586;
  let z = r * r;
  let s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
  let c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
  // Rotating (c, s) by q quarter turns.
  switch (i32(q) & 3) {
    case 1: { return vec2<f32>(-s, c); }
    case 2: { return vec2<f32>(-c, -s); }
    case 3: { return vec2<f32>(s, -c); }
    default: { return vec2<f32>(c, s); }
  }
}

/** (cos, sin) of sign · position · frequency radians for the pair; sign is ±1. */
fn ropeRotation(position: u32, pair: u32, sign: f32) -> vec2<f32> {
  return cosSinTurns(sign * ropeTurns(position, pair));
}`;
}

const THETA_ROTATION_WGSL = ropeRotationWgsl(false);
const TABLE_ROTATION_WGSL = ropeRotationWgsl(true);

/** The rotation of a shader that binds a frequency table (`table`), or theta's turns. */
export function ropeRotationSource(table: boolean): string {
  return table ? TABLE_ROTATION_WGSL : THETA_ROTATION_WGSL;
}

/** Declares the `frequencies` binding the rotation reads: a table's f32s, or theta's turns (pairs of u32 words). */
export function declareRopeFrequencies(module: ShaderModule, table: boolean): void {
  module.storage('frequencies', table ? 'f32' : 'vec2<u32>', 'read');
}

/** The key suffix of a shader that reads a frequency table. */
export function tableKey(table: boolean): string {
  return table ? '/table' : '';
}

/** theta's turns tables, per device and (theta, headDim); a few models' worth at most. */
const THETA_TURNS = new WeakMap<GPUDevice, Map<string, GPUBuffer>>();
const MAX_THETA_TABLES = 64;

/** theta's turns per position of each pair, (high word, low word), in f64 as the reference's frequencies. */
export function thetaTurnsWords(theta: number, headDim: number): Uint32Array {
  const half = headDim / 2;
  const words = new Uint32Array(2 * half);
  for (let i = 0; i < half; i++) {
    const turns = frequencyTurns64(thetaFrequency(theta, headDim, i));
    words[2 * i] = Number(turns >> 32n);
    words[2 * i + 1] = Number(turns & 0xffffffffn);
  }
  return words;
}

/**
 * What a rope shader binds as `frequencies`: the call's frequency table, or
 * a buffer of theta's turns made once per device, theta and headDim. An
 * older table dropped from the cache lives on in the recordings that bind it.
 */
export function ropeFrequencyBinding(
  encoder: KernelEncoder,
  theta: number,
  headDim: number,
  table: Operand | undefined,
): Operand | GPUBufferBinding {
  if (table) return table;
  let tables = THETA_TURNS.get(encoder.device);
  if (!tables) {
    tables = new Map();
    THETA_TURNS.set(encoder.device, tables);
  }
  const key = `${theta}/${headDim}`;
  let buffer = tables.get(key);
  if (!buffer) {
    const words = thetaTurnsWords(theta, headDim);
    buffer = encoder.device.createBuffer({
      size: Math.max(8, words.byteLength),
      usage: usageFlags('STORAGE'),
      mappedAtCreation: true,
    });
    new Uint32Array(buffer.getMappedRange()).set(words);
    buffer.unmap();
    if (tables.size >= MAX_THETA_TABLES) tables.delete(tables.keys().next().value!);
    tables.set(key, buffer);
  }
  return { buffer };
}
