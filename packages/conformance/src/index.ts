export {
  type DescribeConformanceOptions,
  describeConformance,
  runConformanceCheck,
} from './describeConformance.js';
