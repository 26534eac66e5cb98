import { parseArgs } from 'node:util';
import { createBackend, probeBackends } from '@rayo/core';
import { INT8_CHECK_CASES, int8Check, int8CheckLine } from './int8Check.js';

// int8-check: see int8Check.ts. Opens cuda with int8 activations, once per
// --persistent and --depth choice, and exits 1 when any element is outside its bound.

const USAGE = `Usage: int8-check [--persistent LIST] [--depth LIST] [--formats LIST] [--seed N]

Checks the cuda backend's int8-activation GEMVs, format by format, against the
product of x's int8 blocks in f64 (blocked and persistent kernels, pairs).

  --persistent LIST  qgemvPersistent choices to run (default on,off)
  --depth LIST       qgemvDepth choices to run (default 1,2,3; capped per case as the backend caps it)
  --formats LIST     only these formats (default all)
  --seed N           inputs (default 1)`;

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help')) {
    console.log(USAGE);
    return 0;
  }
  const { values } = parseArgs({
    args: [...argv],
    options: {
      persistent: { type: 'string', default: 'on,off' },
      depth: { type: 'string', default: '1,2,3' },
      formats: { type: 'string', default: '' },
      seed: { type: 'string', default: '1' },
    },
  });
  const [cuda] = await probeBackends(['cuda']);
  if (!cuda?.available) {
    console.error(`int8-check: the cuda backend cannot run here: ${cuda?.reason ?? 'unavailable'}`);
    return 2;
  }
  const formats = values.formats.split(',').filter(Boolean);
  const cases = INT8_CHECK_CASES.filter((c) => formats.length === 0 || formats.includes(c.format));
  let failed = 0;
  const persistence = values.persistent
    .split(',')
    .filter(Boolean)
    .map((choice): 'on' | 'off' => {
      if (choice !== 'on' && choice !== 'off') throw new Error(`--persistent takes on, off; got ${choice}`);
      return choice;
    });
  const depths = values.depth
    .split(',')
    .filter(Boolean)
    .map((choice): 1 | 2 | 3 => {
      if (choice !== '1' && choice !== '2' && choice !== '3')
        throw new Error(`--depth takes 1, 2, 3; got ${choice}`);
      return Number(choice) as 1 | 2 | 3;
    });
  const runs = persistence.flatMap((persistent) => depths.map((depth) => ({ persistent, depth })));
  for (const { persistent, depth } of runs) {
    const backend = await createBackend('cuda', {
      qgemvActivations: 'int8',
      qgemvPersistent: persistent,
      qgemvDepth: depth,
    });
    console.log(
      `cuda (${backend.info.device}), qgemvPersistent ${persistent}, qgemvDepth ${depth}: ${cases.length} cases`,
    );
    try {
      for (const c of cases) {
        const result = await int8Check(backend, c, Number(values.seed));
        if (!result.ok) failed++;
        console.log(`  ${int8CheckLine(result)}`);
      }
    } finally {
      backend.dispose();
    }
  }
  console.log(failed === 0 ? 'int8-check: all passed' : `int8-check: ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

process.exitCode = await main(process.argv.slice(2));
