import { QUANT_FORMATS, quantLayout } from '@rayo/core';
import { conformanceSuite, runChecks } from '@rayo/core/testing';
import { createEmulatedGpu, expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { type QuantizeRowsVariant, quantizeRowsKey, quantizeRowsModule } from './quantizeRows.js';
import {
  type QuantizeSuperBlocksVariant,
  quantizeSuperBlocksKey,
  quantizeSuperBlocksModule,
} from './quantizeSuperBlocks.js';

const VARIANTS: QuantizeRowsVariant[] = QUANT_FORMATS.filter(
  (format) => !quantLayout(format, 1).subBlockScales,
).flatMap((format) =>
  (quantLayout(format, 1).zeroPoints ? [false, true] : [false]).flatMap((zeros) =>
    (['f32', 'bf16'] as const).map((weight) => ({ format, zeros, weight, scale: 'f16' as const })),
  ),
);
const SUPER_BLOCK_VARIANTS: QuantizeSuperBlocksVariant[] = (['q4k', 'q5k', 'q6k'] as const).flatMap(
  (format) =>
    (['f32', 'bf16'] as const).flatMap((weight) =>
      (['f16', 'f32'] as const).map((scale) => ({ format, weight, scale })),
    ),
);
const MODULES = [
  ...VARIANTS.map((v) => ({ key: quantizeRowsKey(v), module: () => quantizeRowsModule(v) })),
  ...SUPER_BLOCK_VARIANTS.map((v) => ({
    key: quantizeSuperBlocksKey(v),
    module: () => quantizeSuperBlocksModule(v),
  })),
];

describe('quantizeRows PTX', () => {
  it('names every variant in its key', () => {
    expect(new Set(MODULES.map((m) => m.key)).size).toBe(MODULES.length);
  });
});

const gate = ptxasTestGate();
describe.skipIf(gate.skip)(`quantizeRows PTX assembles with ptxas, without spills (${gate.reason})`, () => {
  it('every format, zero points, weight and scale storage', () => {
    expectAllAssembleCleanly(
      MODULES.flatMap(({ key, module }) => {
        const ptx = module().emit();
        return ['sm_90', DEFAULT_TARGET].map((arch) => ({ ptx, arch, what: `${key} ${arch}` }));
      }),
    );
  });
});

// Every conformance case of the spec (every format, zero points, f16 and bf16 weights, batches,
// error cases) through the PTX interpreter: the device's bits against the host quantizer's.
describe('quantizeRows conformance cases on an emulated device', () => {
  it('gives the host quantizer’s bits', async () => {
    const suite = conformanceSuite({ create: () => createEmulatedGpu({ multiprocessors: 2 }).gpu });
    try {
      const checks = suite.checks.filter(
        (c) => c.group === 'quantizeRows' || c.name.startsWith('quantizeRows '),
      );
      expect(checks.length).toBeGreaterThan(40);
      const summary = await runChecks(checks);
      expect(summary.failures).toEqual([]);
    } finally {
      await suite.teardown();
    }
  }, 600_000);
});
