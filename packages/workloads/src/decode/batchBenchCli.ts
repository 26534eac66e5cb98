import { parseCommandLine } from '../commandLine.js';
import { BATCH_USAGE, batchBench, batchFailed, batchSummary, parseBatchArgs } from './batchBench.js';

async function main(argv: readonly string[]): Promise<number> {
  const line = parseCommandLine('batch-bench', BATCH_USAGE, argv, parseBatchArgs);
  if ('exitCode' in line) return line.exitCode;
  const report = await batchBench(line.settings);
  process.stdout.write(batchSummary(report));
  return batchFailed(report) ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
