export {
  dot,
  expectClose,
  expectError,
  expectThrows,
  type Input,
  meta,
  numericGradient,
  random,
  run,
  thrown,
  unchanged,
} from './referenceKit.js';
