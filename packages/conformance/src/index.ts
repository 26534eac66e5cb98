export { describeConformance, runConformanceCheck } from './describeConformance.js';
