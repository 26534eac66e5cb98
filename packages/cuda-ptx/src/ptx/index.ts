export { f32Literal } from './immediates.js';
export type {
  ArithType,
  AtomOp,
  Axis,
  CmpOp,
  CmpType,
  CvtOptions,
  CvtType,
  FloatArithOptions,
  FloatOptions,
  FloatRounding,
  IntRounding,
  L2Prefetch,
  LoadCache,
  LoadOptions,
  LoopControl,
  LoopOptions,
  MinMaxOptions,
  SelpType,
  ShflMode,
  ShflOptions,
  SignedType,
  SpecialRegister,
  StoreCache,
  StoreOptions,
  Tuple,
  Vec2,
  Vec4,
  VecOf,
  Wider,
  WideSource,
} from './instructionTypes.js';
export { KernelBuilder } from './kernel.js';
export type {
  CpAsyncBytes,
  CpAsyncCache,
  CpAsyncOptions,
  LdmatrixCount,
  LdmatrixOptions,
  MmaLaneCoordinates,
} from './matrixInstructions.js';
export type {
  FragmentCoordinate,
  MmaInputType,
  MmaOperand,
  MmaShape,
  MmaShapeInfo,
} from './mmaFragments.js';
export { fragmentElement, fragmentRegisters, MMA_SHAPES } from './mmaFragments.js';
export type {
  Dim3,
  EntryOptions,
  ParamHandles,
  ParamInfo,
  PtxEntry,
  PtxModuleOptions,
} from './module.js';
export { PtxModule } from './module.js';
export type {
  Address,
  AddressLike,
  F32,
  Guard,
  Imm,
  Operand,
  Pred,
  R16,
  R32,
  R64,
  RegOf,
  Scope,
} from './operands.js';
export { addr, Label, Param, Register, SharedVar } from './operands.js';
export type { AssembleOptions, PtxasResult, PtxasStatus, PtxasTestGate } from './ptxas.js';
export { assemblePtx, assemblePtxOrThrow, findPtxas, ptxasTestGate } from './ptxas.js';
export type { SharedSwizzle } from './swizzle.js';
export {
  SHARED_SWIZZLES,
  SWIZZLE_SPAN,
  swizzledTileOffset,
  swizzleMask,
  swizzleOffset,
} from './swizzle.js';
export { DEFAULT_PTX_VERSION, DEFAULT_TARGET, KNOWN_TARGETS } from './target.js';
export type {
  BitType,
  HalfType,
  Int16Type,
  Int32Type,
  Int64Type,
  IntType,
  MemType,
  ParamScalar,
  ParamType,
  RegClass,
  ScalarType,
} from './types.js';
export type { WgmmaInputType, WgmmaOptions } from './warpgroupInstructions.js';
export type { WgmmaDescriptorFields, WgmmaN } from './wgmmaLayout.js';
export {
  isWgmmaN,
  wgmmaAccumulatorElement,
  wgmmaDescriptor,
  wgmmaDescriptorFlags,
} from './wgmmaLayout.js';
