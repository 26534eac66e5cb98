import {
  type Backend,
  createBackend,
  createCpuBackend,
  InvalidArgumentError,
  type KernelRunner,
  probeBackends,
  type Tensor,
} from '@rayo/core';
import { LlamaModel } from '@rayo/train';
import { temporaryDirectories } from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { DECODE_CONFIGS } from './decodeBench.js';
import { measureHostPhases } from './hostPhases.js';
import { writeSeededLlama } from './seededLlama.js';
import { profileRows, profileStep, profileTotals } from './stepProfile.js';

/** Lavapipe compiles each pipeline on first use. */
const TIMEOUT = 60_000;

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const backends: [string, () => Promise<Backend>][] = [['cpu', async () => createCpuBackend()]];
if (wgpu.available || process.env.CI === 'true') backends.push(['wgpu', () => createBackend('wgpu')]);

const tempDir = temporaryDirectories('rayo-profile-');

/** `inner`, its kernel calls counted by name (independently of the profiler). */
function countingRunner(inner: KernelRunner): { runner: KernelRunner; counts: Map<string, number> } {
  const counts = new Map<string, number>();
  const runner: KernelRunner = {
    run(spec, ...rest) {
      counts.set(spec.name, (counts.get(spec.name) ?? 0) + 1);
      return inner.run(spec, ...rest);
    },
  };
  return { runner, counts };
}

const config = DECODE_CONFIGS['llama-tiny']!;
const hidden = config.hidden_size as number;
const vocab = config.vocab_size as number;
const heads = config.num_attention_heads as number;
const kvHeads = config.num_key_value_heads as number;
const headDim = hidden / heads;
const POSITION = 9;

describe.each(backends)('decode step profile on %s', (name, create) => {
  let backend: Backend;
  let model: LlamaModel;
  afterAll(() => {
    model?.dispose();
    backend?.dispose();
  });

  async function setUp(): Promise<LlamaModel> {
    if (model) return model;
    backend = await create();
    const dir = await tempDir();
    await writeSeededLlama(dir, config, 3);
    model = await LlamaModel.load(backend, dir, { maxSequence: 16 });
    // Disposed, not left to the garbage collector: a collection mid-test would change the live count.
    model.prefill([1, 2, 3, 4, 5, 6, 7, 8, 9]).dispose();
    backend.write(model.tokenInput, Int32Array.of(11));
    backend.write(model.positionInput, Int32Array.of(POSITION));
    backend.write(model.lengthInput, Int32Array.of(POSITION + 1));
    return model;
  }

  it(
    'lists every call the step makes, with shapes and bytes at the written length',
    async () => {
      const m = await setUp();
      const profile = await profileStep(backend, (runner, made) => m.recordStep(runner, made), {
        repetitions: 2,
        stepRepetitions: 2,
        deviceValues: new Map([
          [m.positionInput, POSITION],
          [m.lengthInput, POSITION + 1],
        ]),
      });

      // Every call, counted apart from the profiler.
      const batch = backend.batch();
      const made: Tensor[] = [];
      const counter = countingRunner(batch);
      m.recordStep(counter.runner, made);
      batch.dispose();
      for (const t of made) t.dispose();
      const total = [...counter.counts.values()].reduce((a, b) => a + b, 0);
      expect(profile.calls).toBe(total);
      expect(profile.groups.reduce((a, g) => a + g.calls, 0)).toBe(total);
      const byKernel = new Map<string, number>();
      for (const g of profile.groups) byKernel.set(g.kernel, (byKernel.get(g.kernel) ?? 0) + g.calls);
      expect(byKernel).toEqual(counter.counts);

      // The head: [1, hidden], its final norm folded in, against [vocab, hidden], once per step.
      const head = profile.groups.find(
        (g) => g.shapes === `[1, ${hidden}] · [${hidden}] · [${vocab}, ${hidden}]`,
      )!;
      expect(head).toMatchObject({ kernel: 'rmsNormMatmul', calls: 1 });
      expect(head.bytesPerCall).toBe(4 * (hidden + hidden + vocab * hidden + vocab));
      expect(head.flopsPerCall).toBe(2 * vocab * hidden + 3 * hidden);
      // Attention (RoPE and the cache write in the same call) reads the rows written so far, not the whole cache.
      const attention = profile.groups.find((g) => g.kernel === 'ropeAttention')!;
      expect(attention.calls).toBe(config.num_hidden_layers);
      const rows = heads + 2 * kvHeads;
      expect(attention.shapes).toBe(
        `[${rows}, ${headDim}] · [${kvHeads}, 16, ${headDim}] · [${kvHeads}, 16, ${headDim}] · [1] i32`,
      );
      const newRows = 2 * kvHeads * headDim;
      const attended = 2 * kvHeads * (POSITION + 1) * headDim;
      expect(attention.bytesPerCall).toBe(4 * (rows * headDim + newRows + attended + heads * headDim));

      const table = profileRows(profile);
      expect(table).toHaveLength(profile.groups.length);
      if (name === 'cpu') {
        // No device clock: no times, and the table says so.
        expect(profile.deviceClock).toBe(false);
        expect(profile.stepDeviceMs).toBeUndefined();
        expect(profile.groups.every((g) => g.usPerCall === undefined)).toBe(true);
        expect(profileTotals(profile)).toMatch(/no device clock/);
      } else {
        expect(profile.deviceClock).toBe(backend.info.features.includes('timestamp-query'));
        if (profile.deviceClock) {
          expect(Number.isFinite(profile.stepDeviceMs)).toBe(true);
          expect(profile.stepSamplesMs).toHaveLength(2);
          expect(
            profile.groups.every(
              (g) => Number.isFinite(g.usPerCall) && Number.isFinite(g.gbps) && Number.isFinite(g.usInStep),
            ),
          ).toBe(true);
          expect(Number.isFinite(profile.replayedStepMs)).toBe(true);
          expect(profile.kernelSumMs).toBeCloseTo(
            profile.groups.reduce((a, g) => a + g.usPerStep!, 0) / 1e3,
            9,
          );
          expect(profileTotals(profile)).toMatch(/the whole step takes/);
        }
      }
      // Every tensor the profile made is freed: the step's outputs, the groups' repetitions.
      // (At most as many as before: the safety-net finalizer may collect a dropped tensor meanwhile.)
      const before = backend.memory().liveTensors;
      await profileStep(backend, (runner, made) => m.recordStep(runner, made), {
        repetitions: 1,
        stepRepetitions: 1,
      });
      expect(backend.memory().liveTensors).toBeLessThanOrEqual(before);
    },
    TIMEOUT,
  );

  it(
    'times the host phases of replayed tokens',
    async () => {
      const m = await setUp();
      const before = backend.memory().liveTensors;
      const phases = await measureHostPhases(m, { position: POSITION, tokens: 3, warmup: 1 });
      expect(phases).toMatchObject({ tokens: 3, position: POSITION, logitsBytes: 4 * vocab });
      // Four replays, each moving the position on the device, +1 and −1 in turn: back where they began.
      expect([...(await m.positionInput.read()), ...(await m.lengthInput.read())]).toEqual([
        POSITION,
        POSITION + 1,
      ]);
      for (const key of [
        'enqueueUs',
        'submitUs',
        'readTokenUs',
        'tokenUs',
        'idleReadLogitsUs',
        'hostArgmaxUs',
      ] as const)
        expect(Number.isFinite(phases[key])).toBe(true);
      expect(backend.memory().liveTensors).toBe(before);
      await expect(measureHostPhases(m, { position: 16 })).rejects.toThrow(InvalidArgumentError);
      await expect(measureHostPhases(m, { position: 0, tokens: 0 })).rejects.toThrow(InvalidArgumentError);
    },
    TIMEOUT,
  );

  it('refuses bad repetition counts', async () => {
    const m = await setUp();
    await expect(
      profileStep(backend, (runner, made) => m.recordStep(runner, made), { repetitions: 0 }),
    ).rejects.toThrow(InvalidArgumentError);
  });
});
