// The GEMM encoders and tile plans of @rayo/cuda-ptx, which its public API
// keeps behind matmul's routing. The tools pick a path or a tile themselves,
// so they take these from its sources: this package is bundled from source
// (scripts/bundle.mjs), never built on its own and never published.
export { encodeMatmul, type MatmulPlan, planMatmul, tilePlan } from '../../cuda-ptx/src/kernels/matmul.js';
export { encodeTensorCore } from '../../cuda-ptx/src/kernels/matmulTensorCore.js';
export { TILE_LARGE, TILE_MID } from '../../cuda-ptx/src/kernels/matmulTile.js';
export { encodeWgmma, wgmmaApplies } from '../../cuda-ptx/src/kernels/matmulWgmma.js';
