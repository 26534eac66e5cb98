import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { checkTrainPrecision } from '@rayo/train';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';

import { textTable } from '../decode/decodeBench.js';
import { PROFILE_HEADER, profileRows, profileTotals } from '../decode/stepProfile.js';
import { gpt2Workloads, QUICK_WORKLOADS, THROUGHPUT_WORKLOADS } from './trainBench.js';
import { profileTrainingStep } from './trainProfile.js';
import { workloadId } from './workload.js';

export const TRAIN_PROFILE_USAGE = `Usage: train-profile [options]

Profiles one replayed training step of train-bench's GPT-style model (the
model of dp-bench) kernel by kernel: the whole step timed on the device, then
each group of identical kernel calls alone and the step without it.

  --backend NAME   the backend (default cuda)
  --batch N        sequences per step (default 8: one rank of dp-bench's global 16)
  --reps N         back-to-back repetitions of a group per timing (default 10)
  --precision P    f32 (default), tf32, bf16 or f16: the products' precision
                   policy (bf16: f32 master weights and AdamW); f16 is
                   profiled without its loss scaler (the scaler's checks
                   and unscaling are not in the table)
  --no-kernels     the step time and the call table only
  --quick          the tiny transformer of train-bench's quick mode
  --gpt2           GPT-2 small's sizes (train-bench --suite gpt2: 12 × 768,
                   1,024 tokens, vocabulary 50,257)
  --out DIR        profile.json and profile.txt (default train-profile-results)
  -h, --help`;

/** Multi-tensor kernels (AdamW, the global norm) list every parameter: keep the table readable. */
function shortCells(row: string[]): string[] {
  return row.map((cell, i) => (i > 0 && i < 3 && cell.length > 72 ? `${cell.slice(0, 71)}…` : cell));
}

export async function main(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      backend: { type: 'string', default: 'cuda' },
      batch: { type: 'string' },
      reps: { type: 'string', default: '10' },
      precision: { type: 'string', default: 'f32' },
      'no-kernels': { type: 'boolean' },
      quick: { type: 'boolean' },
      gpt2: { type: 'boolean' },
      out: { type: 'string', default: 'train-profile-results' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(`${TRAIN_PROFILE_USAGE}\n`);
    return 0;
  }
  if (values.quick && values.gpt2) {
    process.stderr.write('train-profile: --quick and --gpt2 pick different models; give one\n');
    return 2;
  }
  const model = values.quick
    ? QUICK_WORKLOADS[2]!
    : values.gpt2
      ? gpt2Workloads(8)[0]!
      : THROUGHPUT_WORKLOADS[3]!;
  const batch = Number(values.batch ?? model.batch);
  const reps = Number(values.reps);
  for (const [name, value] of [
    ['batch', batch],
    ['reps', reps],
  ] as const) {
    if (!Number.isInteger(value) || value < 1) {
      process.stderr.write(`train-profile: --${name} must be an integer >= 1, got ${value}\n`);
      return 2;
    }
  }
  const precision = checkTrainPrecision(values.precision, 'train-profile');
  const spec = { ...model, batch, precision };
  const backend = await createBackendFromEnvironment(values.backend!);
  try {
    const profile = await profileTrainingStep(backend, spec, {
      repetitions: reps,
      kernels: !values['no-kernels'],
    });
    const lines = [
      `${backend.name}: ${workloadId(spec)}, one replayed training step (forward, backward, norm, AdamW)`,
      // The profiled step records no loss scaler: its kernels are f16's products and casts without the scaler's.
      ...(precision === 'f16'
        ? [
            'f16: profiled without its loss scaler (scaling, unscaling and the finite check are not in the table)',
          ]
        : []),
      ...textTable(PROFILE_HEADER, profileRows(profile).map(shortCells)),
      '',
      profileTotals(profile),
    ];
    await mkdir(values.out!, { recursive: true });
    await writeFile(join(values.out!, 'profile.json'), `${JSON.stringify({ spec, profile }, null, 2)}\n`);
    await writeFile(join(values.out!, 'profile.txt'), `${lines.join('\n')}\n`);
    process.stdout.write(`${lines.join('\n')}\n`);
    return 0;
  } finally {
    backend.dispose();
  }
}
