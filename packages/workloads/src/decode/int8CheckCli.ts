import { parseArgs } from 'node:util';
import { createBackend, probeBackends } from '@rayo/core';
import { QGEMV_DEPTH_CHOICES, QGEMV_PERSISTENT_CHOICES, WEIGHT_PREFETCH_CHOICES } from '@rayo/cuda-ptx';
import { INT8_CHECK_CASES, int8Check, int8CheckLine } from './int8Check.js';

// int8-check: see int8Check.ts. Opens cuda with int8 activations, once per
// --persistent, --depth, --columns and --prefetch choice, and exits 1 when any element is outside its bound.

const USAGE = `Usage: int8-check [--persistent LIST] [--depth LIST] [--columns LIST] [--prefetch LIST]
                  [--formats LIST] [--seed N]

Checks the cuda backend's int8-activation GEMVs, format by format, against the
product of x's int8 blocks in f64 (blocked and persistent kernels, pairs, and
with an rmsNorm folded in).

  --persistent LIST  qgemvPersistent choices to run (default on,off)
  --depth LIST       qgemvDepth choices to run (default 1,2,3; capped per case as the backend caps it)
  --columns LIST     default, or the qgemvVariant forcing columns a warp: b (4), c (2), d (8)
                     (default default,c: two columns keep 2 sums a lane, where depth 3 runs)
  --prefetch LIST    weightPrefetch choices to run: on, loads, chain, off (default off)
  --formats LIST     only these formats (default all)
  --seed N           inputs (default 1)`;

/** Columns a warp: the default, or a qgemvVariant that forces them. */
const COLUMNS = ['default', 'b', 'c', 'd'] as const;

/** The comma-separated choices of --flag, each one of `choices`. */
function choiceList<const C extends string | number>(flag: string, text: string, choices: readonly C[]): C[] {
  return text
    .split(',')
    .filter(Boolean)
    .map((word) => {
      const choice = choices.find((c) => String(c) === word);
      if (choice === undefined) throw new Error(`--${flag} takes ${choices.join(', ')}; got ${word}`);
      return choice;
    });
}

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
      columns: { type: 'string', default: 'default,c' },
      prefetch: { type: 'string', default: 'off' },
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
  const persistence = choiceList('persistent', values.persistent, QGEMV_PERSISTENT_CHOICES);
  const depths = choiceList('depth', values.depth, QGEMV_DEPTH_CHOICES);
  const columns = choiceList('columns', values.columns, COLUMNS);
  const prefetches = choiceList('prefetch', values.prefetch, WEIGHT_PREFETCH_CHOICES);
  const runs = persistence.flatMap((persistent) =>
    depths.flatMap((depth) =>
      columns.flatMap((variant) => prefetches.map((prefetch) => ({ persistent, depth, variant, prefetch }))),
    ),
  );
  for (const { persistent, depth, variant, prefetch } of runs) {
    const backend = await createBackend('cuda', {
      qgemvActivations: 'int8',
      qgemvPersistent: persistent,
      qgemvDepth: depth,
      weightPrefetch: prefetch,
      ...(variant === 'default' ? {} : { qgemvVariant: variant }),
    });
    console.log(
      `cuda (${backend.info.device}), qgemvPersistent ${persistent}, qgemvDepth ${depth}, columns ${variant}, weightPrefetch ${prefetch}: ${cases.length} cases`,
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
