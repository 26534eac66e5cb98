// The benchmark suite's case constructors: each builds the inputs, reference
// check and FLOP/byte counts of one kernel at one shape (suite.ts lists them).
// They live in one file per family of kernels; this file gathers them.

export { BOTH, FULL, halfTolerance, MIB, type Modes, modes, QUICK } from './caseDefaults.js';
export { attention, groupedAttention, halfAttention, kvScatter, ropeKv } from './decodeCases.js';
export {
  gateUp,
  gemm,
  halfGemm,
  halfGemv,
  linearCase,
  normMatmul,
  normMatmul3,
  tf32Gemm,
  weightCache,
} from './gemmCases.js';
export { adamw, adamwMulti, clip, gptShapes, label } from './optimizerCases.js';
export { quantizedGateUp, quantizedGemv } from './quantizedCases.js';
export { argmaxCase, ropeCase, rows, swigluCase } from './rowCases.js';
export { batchCase, bytesLabel, ceilingCase, copyCase, transfer } from './transferCases.js';
