import type { AnyConformanceCase, AnyErrorCase } from '../cases.js';
import { castCases } from './cast.js';
import { causalAttentionCases } from './causalAttention.js';
import { decodingCases } from './decoding.js';
import { elementwiseCases } from './elementwise.js';
import { embeddingCases } from './embedding.js';
import { flashAttentionCases } from './flashAttention.js';
import { fusedCases } from './fused.js';
import { lossCases } from './loss.js';
import { lossScalingCases } from './lossScaling.js';
import { matmulCases } from './matmul.js';
import { memoryCases } from './memory.js';
import { normalizationCases } from './normalization.js';
import { optimizerCases } from './optimizer.js';
import { pagedAttentionCases } from './pagedAttention.js';
import { quantizedCases } from './quantized.js';
import { quantizedGateUpCases } from './quantizedGateUp.js';
import { quantizeRowsCases } from './quantizeRows.js';
import { reductionCases } from './reduction.js';
import { ropeCases } from './rope.js';
import { softmaxCases } from './softmax.js';

const families = [
  memoryCases,
  castCases,
  elementwiseCases,
  reductionCases,
  softmaxCases,
  normalizationCases,
  ropeCases,
  matmulCases,
  decodingCases,
  causalAttentionCases,
  flashAttentionCases,
  pagedAttentionCases,
  optimizerCases,
  lossScalingCases,
  lossCases,
  embeddingCases,
  fusedCases,
  quantizedCases,
  quantizedGateUpCases,
  quantizeRowsCases,
];

export const VALID_CASES: readonly AnyConformanceCase[] = families.flatMap((f) => f.cases);
export const ERROR_CASES: readonly AnyErrorCase[] = families.flatMap((f) => f.errors);
