import { parseCommandLine } from '../commandLine.js';
import { BATCH_USAGE, batchBench, batchSummary, parseBatchArgs } from './batchBench.js';

async function main(argv: readonly string[]): Promise<number> {
  const line = parseCommandLine('batch-bench', BATCH_USAGE, argv, parseBatchArgs);
  if ('exitCode' in line) return line.exitCode;
  const report = await batchBench(line.settings);
  process.stdout.write(batchSummary(report));
  return report.rayo.some((r) => 'error' in r) ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
