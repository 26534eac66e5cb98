export { type CliOptions, parseCliArgs, USAGE, UsageError } from './args.js';
export { type BenchOptions, type CaseResult, type CaseStatus, isFailure, runBenchmarks } from './bench.js';
export { type CliIo, EXIT_FAILED, EXIT_OK, EXIT_USAGE, main } from './main.js';
export * from './report.js';
export * from './suite.js';
export * from './timing.js';
export * from './verify.js';
