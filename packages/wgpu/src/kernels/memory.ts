import {
  bytesPerElement,
  copy,
  copyRows,
  type DType,
  fill,
  increment,
  transpose,
  UnsupportedOnBackendError,
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
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, WG } from './common.js';

// Every dtype of this family is 32 bits wide and moving data never looks at
// the values, so the shaders see all of them as u32 words: bit-exact for
// every dtype (NaN payloads included) and one pipeline per kernel.

// ---- fill and copy: vec4 words, then the odd tail --------------------------

// Moving 16 bytes per thread instead of 4 nearly doubles the bandwidth of
// these memory-bound kernels on large GPUs (an H100 fills at 3.1 TB/s instead
// of 1.7), and a copy shader ran 3.4× faster there than copyBufferToBuffer.
// The last n % 4 words go through a second, scalar dispatch (a buffer cannot
// be bound twice for writing in one). Operand offsets are storage-binding
// aligned (at least 16 bytes), so the vec4 view starts at the operand itself.

const WORDS_PARAMS = paramLayout([
  ['start', 'u32'],
  ['n', 'u32'],
  ['bits', 'u32'],
] as const);

type WordsOp = 'fill' | 'copy';

/** `y[i] = bits` or `y[i] = x[i]` for i in [start, n), in units of `vec4<u32>` or `u32`. */
function wordsShader(op: WordsOp, unit: 'vec4<u32>' | 'u32') {
  return {
    key: `memory/${op}/${unit === 'u32' ? 'u32' : 'vec4u32'}/wg${WG}`,
    kernel: op,
    code: () => {
      const module = new ShaderModule().params(WORDS_PARAMS);
      if (op === 'copy') module.storage('x', unit, 'read');
      module.storage('y', unit, 'read_write');
      return module.build(
        undefined,
        WG,
        `  let i = params.start + (${linearWorkgroup}) * ${WG}u + lid.x;
  if (i >= params.n) { return; }
  y[i] = ${op === 'fill' ? `${unit}(params.bits)` : 'x[i]'};`,
      );
    },
  };
}

/** Encodes a fill (`x` undefined) or a copy of `n` words. */
function encodeWords(
  encoder: KernelEncoder,
  op: WordsOp,
  x: Operand | undefined,
  y: Operand,
  bits: number,
): void {
  const n = y.size;
  const quads = Math.floor(n / 4);
  const view = (o: Operand): GPUBufferBinding => ({ buffer: o.buffer, offset: o.offset, size: quads * 16 });
  if (quads > 0) {
    encoder.dispatch({
      shader: wordsShader(op, 'vec4<u32>'),
      buffers: x ? [view(x), view(y)] : [view(y)],
      params: { layout: WORDS_PARAMS, values: { start: 0, n: quads, bits } },
      workgroups: elementGrid(encoder, quads),
    });
  }
  if (n > quads * 4) {
    encoder.dispatch({
      shader: wordsShader(op, 'u32'),
      buffers: x ? [x, y] : [y],
      params: { layout: WORDS_PARAMS, values: { start: quads * 4, n, bits } },
      workgroups: [1],
    });
  }
}

/** The 32-bit pattern of `value` stored as `dtype`. */
function wordOf(value: number, dtype: DType): number {
  if (dtype === 'f32') return new Uint32Array(new Float32Array([value]).buffer)[0]!;
  // i32 (two's complement) and u32: infer checked that the value is an integer in range.
  return value >>> 0;
}

const fillKernel = wgpuKernel(
  fill,
  (encoder, { outputs, attrs }) => {
    const y = outputs[0]!;
    const bits = wordOf(attrs.value, y.dtype);
    // Operands larger than one binding go in aligned pieces.
    for (const { start, count } of bindingRanges(y.size, 4, encoder)) {
      encodeWords(encoder, 'fill', undefined, operandRange(y, start, count), bits);
    }
  },
  { splitsLargeOperands: true },
);

// ---- increment: one dispatch per counter (a decode step's position and length) ----

const INCREMENT_PARAMS = paramLayout([
  ['n', 'u32'],
  ['by', 'u32'],
] as const);

/** `c[i] += by` over i32 words seen as u32: the same bits, wrapping as i32 does. */
const INCREMENT_SHADER = {
  key: `memory/increment/wg${WG}`,
  kernel: 'increment',
  code: () => {
    const module = new ShaderModule().params(INCREMENT_PARAMS);
    module.storage('c', 'u32', 'read_write');
    return module.build(
      undefined,
      WG,
      `  let i = (${linearWorkgroup}) * ${WG}u + lid.x;
  if (i >= params.n) { return; }
  c[i] = c[i] + params.by;`,
    );
  },
};

const incrementKernel = wgpuKernel(increment, (encoder, { outputs, attrs }) => {
  for (const c of outputs) {
    if (c.size === 0) continue;
    encoder.dispatch({
      shader: INCREMENT_SHADER,
      buffers: [c],
      params: { layout: INCREMENT_PARAMS, values: { n: c.size, by: attrs.by >>> 0 } },
      workgroups: elementGrid(encoder, c.size),
    });
  }
});

/** Copies `x` into `y` (same size): a shader, or the copy engine within one buffer. */
function encodeCopy(encoder: KernelEncoder, x: Operand, y: Operand): void {
  // One buffer cannot be bound for reading and writing in one dispatch.
  if (x.buffer === y.buffer) {
    encoder.copy(x.buffer, x.offset, y.buffer, y.offset, x.size * 4);
    return;
  }
  for (const { start, count } of bindingRanges(x.size, 4, encoder)) {
    encodeWords(encoder, 'copy', operandRange(x, start, count), operandRange(y, start, count), 0);
  }
}

const copyKernel = wgpuKernel(
  copy,
  (encoder, { inputs, outputs }) => {
    encodeCopy(encoder, inputs[0]!, outputs[0]!);
  },
  { splitsLargeOperands: true },
);

// ---- transpose ---------------------------------------------------------------

/** A TILE×TILE tile per workgroup of TILE×ROWS threads; each thread moves TILE/ROWS elements. */
const TILE = 32;
const ROWS = 8;
/** Padding the tile's rows by one word puts a column's words in different banks. */
const PITCH = TILE + 1;

const TRANSPOSE_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['cols', 'u32'],
  ['tilesC', 'u32'],
  ['tilesPerMatrix', 'u32'],
  ['tiles', 'u32'],
] as const);

const TRANSPOSE_SHADER = {
  key: `memory/transpose/u32/tile${TILE}x${ROWS}`,
  kernel: 'transpose',
  code: () => {
    const module = new ShaderModule().params(TRANSPOSE_PARAMS);
    module.storage('x', 'u32', 'read');
    module.storage('y', 'u32', 'read_write');
    module.workgroupArray('tile', 'u32', TILE * PITCH);
    return module.build(
      undefined,
      `${TILE}, ${ROWS}`,
      `  // No early return: every thread reaches the barrier.
  let w = ${linearWorkgroup};
  let valid = w < params.tiles;
  let matrix = w / params.tilesPerMatrix;
  let t = w % params.tilesPerMatrix;
  let r0 = (t / params.tilesC) * ${TILE}u;
  let c0 = (t % params.tilesC) * ${TILE}u;
  let base = matrix * params.rows * params.cols;
  // Coalesced reads along the input's rows.
  for (var j = 0u; j < ${TILE}u; j += ${ROWS}u) {
    let r = r0 + lid.y + j;
    let c = c0 + lid.x;
    if (valid && r < params.rows && c < params.cols) {
      tile[(lid.y + j) * ${PITCH}u + lid.x] = x[base + r * params.cols + c];
    }
  }
  workgroupBarrier();
  // Coalesced writes along the output's rows (the input's columns).
  for (var j = 0u; j < ${TILE}u; j += ${ROWS}u) {
    let c = c0 + lid.y + j;
    let r = r0 + lid.x;
    if (valid && r < params.rows && c < params.cols) {
      y[base + c * params.rows + r] = tile[lid.x * ${PITCH}u + lid.y + j];
    }
  }`,
    );
  },
};

const transposeKernel = wgpuKernel(transpose, (encoder, { inputs, outputs }) => {
  const x = inputs[0]!;
  const y = outputs[0]!;
  if (x.size === 0) return;
  const rank = x.shape.length;
  const rows = x.shape[rank - 2]!;
  const cols = x.shape[rank - 1]!;
  // With a single row or column both layouts are the same words in the same order.
  if (rows === 1 || cols === 1) {
    encodeCopy(encoder, x, y);
    return;
  }
  const tilesC = Math.ceil(cols / TILE);
  const tilesPerMatrix = Math.ceil(rows / TILE) * tilesC;
  const tiles = (x.size / (rows * cols)) * tilesPerMatrix;
  encoder.dispatch({
    shader: TRANSPOSE_SHADER,
    buffers: [x, y],
    params: { layout: TRANSPOSE_PARAMS, values: { rows, cols, tilesC, tilesPerMatrix, tiles } },
    workgroups: gridFor(tiles, encoder.limits),
  });
});

// ---- copyRows: the copy engine, or a word at a time for halves off words -----

const HALF_ROWS_PARAMS = paramLayout([
  ['start', 'u32'],
  ['n', 'u32'],
  ['firstWord', 'u32'],
  ['words', 'u32'],
] as const);

/**
 * Elements [start, start + n) of half y from half x: an invocation per word
 * of y the range touches, keeping the half of a word that lies outside it.
 */
const HALF_ROWS_SHADER = {
  key: `memory/copyRows/halves/wg${WG}`,
  kernel: copyRows.name,
  code: () => {
    const module = new ShaderModule().params(HALF_ROWS_PARAMS);
    module.storage('x', 'u32', 'read');
    module.storage('y', 'u32', 'read_write');
    return module.build(
      undefined,
      WG,
      `  let g = (${linearWorkgroup}) * ${WG}u + lid.x;
  if (g >= params.words) { return; }
  let i = params.firstWord + g;
  var word = y[i];
  for (var h = 0u; h < 2u; h++) {
    let e = 2u * i + h;
    if (e >= params.start && e < params.start + params.n) {
      let xe = e - params.start;
      let half = (x[xe >> 1u] >> ((xe & 1u) * 16u)) & 0xffffu;
      word = (word & ~(0xffffu << (16u * h))) | (half << (16u * h));
    }
  }
  y[i] = word;`,
    );
  },
};

const copyRowsKernel = wgpuKernel(
  copyRows,
  (encoder, { inputs, attrs }) => {
    const [y, x] = inputs as [Operand, Operand];
    if (x.size === 0) return;
    const bytes = bytesPerElement(y.dtype);
    const start = (attrs.row * y.size) / y.shape[0]!;
    // Whole words: the copy engine (no binding limit).
    if ((start * bytes) % 4 === 0 && (x.size * bytes) % 4 === 0) {
      encoder.copy(x.buffer, x.offset, y.buffer, y.offset + start * bytes, x.size * bytes);
      return;
    }
    if (y.size * bytes > encoder.maxBindingBytes) {
      throw new UnsupportedOnBackendError(
        'copyRows: a half tensor this large off whole words cannot be bound',
        {
          operation: copyRows.name,
          argument: 'y',
          expected: `at most ${encoder.maxBindingBytes} bytes, or rows that start and end on 4-byte words`,
          actual: `${y.size * bytes} bytes from element ${start}`,
        },
      );
    }
    const firstWord = Math.floor(start / 2);
    const words = Math.ceil((start + x.size) / 2) - firstWord;
    encoder.dispatch({
      shader: HALF_ROWS_SHADER,
      buffers: [x, y],
      params: { layout: HALF_ROWS_PARAMS, values: { start, n: x.size, firstWord, words } },
      workgroups: elementGrid(encoder, words),
    });
  },
  // Whole-word copies take any size; a half tensor off words binds whole.
  { splitsLargeOperands: true, dtypes: ['f32', 'f16', 'bf16'] },
);

export const MEMORY_KERNELS: readonly AnyWgpuKernel[] = [
  fillKernel,
  incrementKernel,
  copyKernel,
  transposeKernel,
  copyRowsKernel,
];
