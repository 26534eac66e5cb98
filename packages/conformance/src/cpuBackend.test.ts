import { createCpuBackend } from '@rayo/core';
import { describeConformance } from './describeConformance.js';

describeConformance('cpu backend conformance', { create: createCpuBackend });
