import { FLOAT, type QuantFormat, quantizedEmbedding, quantLayout } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { rowPieces, rowsOf, rowsOfAll } from '../rowPieces.js';
import { narrowFunctions, type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule, type WgslType } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import { Q5G32_GATHER_WORD } from './quantizedQ5g32.js';
import { Q5K_GATHER_CODE, Q5K_GATHER_WORD } from './quantizedQ5k.js';
import { q6kLookup, q6kScaleFunction } from './quantizedQ6k.js';
import { SUB_BLOCK_SCALE_MIN } from './quantizedSubBlocks.js';

// quantizedEmbedding: y[r, :] = dequant(table)[ids[r], :] for a table in one
// of core's quantized formats (quant/layout.ts has the bits), one invocation
// per output element: its code's u32 word, its group's scale (and zero point
// or offset; q4k's and q5k's d · sc and dmin · m of its sub-block), (q − zero) · scale
// (− offset); q5k's code takes its high bit from its sub-block's high word; q6k's f32(d · sc) · (q − 32), see quantizedQ6k.ts. An id outside [0, V) is compared
// as u32 and reads nothing: its row is NaN. The scales' storage is a
// parameter (one shader per format). A table larger than one binding is
// bound in pieces of whole rows, a dispatch each: a dispatch writes the
// elements whose id lies in its rows (the first also the NaN rows), a
// half y's words keeping the element another piece wrote.

const PARAMS = paramLayout([
  ['count', 'u32'],
  /** The id of y's element 0 in the bound ids (a later piece of the lookups where y is split). */
  ['idBase', 'u32'],
  ['dim', 'u32'],
  ['vocab', 'u32'],
  /** The table rows this dispatch binds: [rowStart, rowStart + rowCount) of V. */
  ['rowStart', 'u32'],
  ['rowCount', 'u32'],
  /** 1 for the dispatch that writes the NaN rows of ids outside [0, V). */
  ['first', 'u32'],
  ['rowWords', 'u32'],
  ['groups', 'u32'],
  ['zeroWords', 'u32'],
  /** 1 when zero points are given. */
  ['hasZeros', 'u32'],
  /** How the scales (and offsets) are stored: 0 f32, 1 f16, 2 bf16 (all bound as u32 words). */
  ['scaleKind', 'u32'],
] as const);

const SCALE_KINDS = { f32: 0, f16: 1, bf16: 2 } as const;

/** Element i of the scales (or offsets) as stored, and the NaN an id out of range gives. */
const FLOAT_AT = `var<private> nanBits: u32 = 0x7fc00000u;
// Element i of a float array stored as u32 words: f32, or a half of a word (f16, bf16).
fn float_at(i: u32, word: u32) -> f32 {
  if (params.scaleKind == 0u) { return bitcast<f32>(word); }
  let half = (word >> ((i & 1u) * 16u)) & 0xffffu;
  if (params.scaleKind == 1u) { return unpack2x16float(half).x; }
  return bitcast<f32>(half << 16u);
}
fn word_index(i: u32) -> u32 { return select(i >> 1u, i, params.scaleKind == 0u); }
// Whether this dispatch writes element e: its id lies in the bound rows, or outside [0, V) for the first.
fn owns(e: u32) -> bool {
  let id = bitcast<u32>(ids[params.idBase + e / params.dim]);
  if (id >= params.vocab) { return params.first != 0u; }
  return id - params.rowStart < params.rowCount;
}`;

/**
 * The shader of `format` writing y as `out`: f32, one element an
 * invocation; a half dtype, one u32 word (two elements, each rounded to
 * nearest even) an invocation, so that no two invocations write one word.
 */
export function quantEmbeddingShader(format: QuantFormat, out: Storage = 'f32') {
  const layout = quantLayout(format, 1);
  const names: [string, WgslType, 'read' | 'read_write'][] = [
    ['ids', 'i32', 'read'],
    ['packed', 'u32', 'read'],
    ['scales', 'u32', 'read'],
    ...(layout.zeroPoints || layout.subBlockScales
      ? [['zeros', 'u32', 'read'] as [string, WgslType, 'read']]
      : []),
    ...(layout.offsets ? [['offsets', 'u32', 'read'] as [string, WgslType, 'read']] : []),
    ['y', out === 'f32' ? 'f32' : 'u32', 'read_write'],
  ];
  const code =
    layout.bits === 8
      ? `f32((bitcast<i32>(word) << (24u - shift)) >> 24u)`
      : layout.bits === 5
        ? Q5K_GATHER_CODE
        : `f32((word >> shift) & 15u)`;
  // q5k's nibble and high bit lie in a super-block of 40 words (see quantizedQ5k.ts), q5g32's in the row's
  // nibbles and its group's high word after them (quantizedQ5g32.ts).
  const wordOf =
    layout.bits === 5
      ? layout.subBlockScales
        ? Q5K_GATHER_WORD
        : Q5G32_GATHER_WORD
      : `let word = packed[row * params.rowWords + col / ${layout.perWord}u];
  let shift = (col % ${layout.perWord}u) * ${layout.bits}u;`;
  const zero = layout.zeroPoints
    ? `select(8.0, f32((zeros[row * params.zeroWords + (g >> 3u)] >> ((g & 7u) * 4u)) & 15u), params.hasZeros != 0u)`
    : `${layout.offset}.0`;
  // Element i's value from its id's row: (q − zero) · scale (− offset).
  const lookup =
    layout.bits === 6
      ? q6kLookup
      : (nan: string) => `  let id = bitcast<u32>(ids[params.idBase + i / params.dim]);
  if (id >= params.vocab) {
    ${nan};
  }
  let col = i % params.dim;
  // The row within the bound piece of the table.
  let row = id - params.rowStart;
  ${wordOf}
  let g = ${layout.scalePerRow ? '0u' : `col / ${layout.groupSize}u`};
  let at = row * params.groups + g;
  ${
    layout.subBlockScales
      ? `// q4k: sub-block (col / 32) mod 8 of super-block g.
  let sm = sub_block_scale_min(row * params.zeroWords + g * 3u, (col / 32u) & 7u);
  let s = float_at(at, scales[word_index(at)]) * f32(sm.x);`
      : 'let s = float_at(at, scales[word_index(at)]);'
  }
  let value = (${code} - ${zero}) * s;`;
  const offset = layout.subBlockScales
    ? 'float_at(at, offsets[word_index(at)]) * f32(sm.y)'
    : 'float_at(at, offsets[word_index(at)])';
  const result = layout.offsets ? `value - ${offset}` : 'value';
  return {
    key: `quantized/embedding/${format}${out === 'f32' ? '' : `/to-${out}`}/wg${WG}`,
    kernel: quantizedEmbedding.name,
    code: () => {
      const module = new ShaderModule().params(PARAMS);
      for (const [name, type, access] of names) module.storage(name, type, access);
      module.declare(FLOAT_AT);
      if (layout.bits === 6)
        module.declare(q6kScaleFunction((at) => `float_at(${at}, scales[word_index(${at})])`));
      else if (layout.subBlockScales) module.declare(SUB_BLOCK_SCALE_MIN);
      if (out === 'f32') {
        return module.build(
          undefined,
          WG,
          `  ${elementIndex('params.count')}
  if (!owns(i)) { return; }
${lookup('y[i] = bitcast<f32>(nanBits);\n    return')}
  y[i] = ${result};`,
        );
      }
      module.declare(narrowFunctions(out));
      module.declare(`fn element(i: u32) -> f32 {
${lookup('return bitcast<f32>(nanBits)')}
  return ${result};
}`);
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('(params.count + 1u) / 2u')}
  let e = 2u * i;
  let has1 = e + 1u < params.count;
  let own0 = owns(e);
  let own1 = has1 && owns(e + 1u);
  if (!own0 && !own1) { return; }
  // Past the end the high half is 0; a half another piece of the table writes is kept.
  var word = 0u;
  if (!own0 || (has1 && !own1)) { word = y[i]; }
  var lo = word & 0xffffu;
  var hi = word >> 16u;
  if (own0) { lo = to_${out}(element(e)); }
  if (own1) { hi = to_${out}(element(e + 1u)); }
  y[i] = lo | (hi << 16u);`,
      );
    },
  };
}

export const QUANTIZED_EMBEDDING_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    quantizedEmbedding,
    (encoder, { inputs, outputs, attrs }) => {
      const [ids, packed, scales, zeros, offsets] = inputs;
      const y = outputs[0]!;
      if (y.size === 0) return;
      const layout = quantLayout(attrs.format, attrs.dim);
      const vocab = packed!.shape[0]!;
      const out = storageOf(y.dtype);
      const lookups = ids!.size;
      // Pieces of whole rows where an operand is larger than one binding: of the table (rows of
      // V) and of the lookups (rows of y), a dispatch for each pair. The ids stay bound whole
      // (the piece's first is a parameter) unless they too exceed a binding.
      const table = { packed: packed!, scales: scales!, zeros, offsets };
      const tablePieces = rowPieces(encoder, quantizedEmbedding.name, vocab, table);
      const idsWhole = ids!.size * 4 <= encoder.maxBindingBytes;
      const lookupOperands = idsWhole ? { y } : { ids: ids!, y };
      for (const rows of rowPieces(encoder, quantizedEmbedding.name, lookups, lookupOperands)) {
        const count = rows.count * attrs.dim;
        for (const [p, piece] of tablePieces.entries()) {
          const t = rowsOfAll(table, vocab, piece);
          encoder.dispatch({
            shader: quantEmbeddingShader(attrs.format, out),
            buffers: [
              idsWhole ? ids! : rowsOf(ids!, lookups, rows),
              t.packed,
              t.scales,
              // Absent zero points bind a read-only placeholder the shader never reads.
              ...(layout.zeroPoints || layout.subBlockScales ? [t.zeros ?? t.packed] : []),
              ...(layout.offsets ? [t.offsets!] : []),
              rowsOf(y, lookups, rows),
            ],
            params: {
              layout: PARAMS,
              values: {
                count,
                idBase: idsWhole ? rows.start : 0,
                dim: attrs.dim,
                vocab,
                rowStart: piece.start,
                rowCount: piece.count,
                first: p === 0 ? 1 : 0,
                rowWords: layout.rowWords,
                groups: layout.groups,
                zeroWords: layout.zeroWords,
                hasZeros: zeros && layout.zeroPoints ? 1 : 0,
                scaleKind: SCALE_KINDS[storageOf(scales!.dtype)],
              },
            },
            // A half y: one invocation per word of two elements.
            workgroups: elementGrid(encoder, out === 'f32' ? count : Math.ceil(count / 2)),
          });
        }
      }
    },
    // The scales (and offsets) in f32, f16 or bf16, read as stored; y in `to`'s dtype. A table
    // (or ids and y) larger than one binding is bound in pieces of whole rows.
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
];
