export { ERROR_CASES, VALID_CASES } from './cases/index.js';
export * from './cases.js';
export { compareOutputs, DEFAULT_TOLERANCE } from './compare.js';
export {
  type ConformanceCheck,
  type ConformanceOptions,
  type ConformanceSuite,
  conformanceSuite,
  type RunSummary,
  runChecks,
} from './conformance.js';
export { faultContractChecks } from './faultContract.js';
export { FAULT_SCENARIOS } from './faultScenarios.js';
export {
  extendFaultSuite,
  type FaultContext,
  type FaultResult,
  type FaultScenario,
  type FaultSuiteExtension,
  faultExtensions,
  faultTable,
  runFaultScenarios,
  ScenarioFailure,
  scenarioFailed,
  settledWithin,
} from './faultSuite.js';
export { type FuzzOptions, type FuzzSummary, fuzzBadCalls } from './fuzz.js';
export {
  HALF_DTYPES,
  halfTolerance,
  halfVariants,
  roundoffTolerance,
  TF32_UNIT_ROUNDOFF,
  UNIT_ROUNDOFF,
  UnsupportedOnBackend,
} from './halfCases.js';
export { int8ProductError, readNumbers, runQuantizedProduct } from './int8Products.js';
export { quantOffsetLimit, quantScaleRange } from './quantizedInputs.js';
export { hashString, Rng } from './random.js';
export { checkRegisteredOnImport } from './registration.js';
export { ropeTolerance } from './ropeInputs.js';
export {
  type ConformanceSample,
  type SampleGrain,
  type SamplePick,
  SMALL_CASE_ELEMENTS,
  sampleConformance,
} from './sample.js';
export { rejectionOf, thrownBy } from './thrown.js';
