import { createCpuBackend } from '../cpu/backend.js';
import { describeConformance } from '../testing/vitest.js';

describeConformance('cpu backend conformance', { create: createCpuBackend });
