import { parseCommandLine } from '../commandLine.js';
import { DECODE_USAGE, decodeBench, decodeSummary, parseDecodeArgs } from './decodeBench.js';

async function main(argv: readonly string[]): Promise<number> {
  const line = parseCommandLine('decode-bench', DECODE_USAGE, argv, parseDecodeArgs);
  if ('exitCode' in line) return line.exitCode;
  const report = await decodeBench(line.settings);
  process.stdout.write(decodeSummary(report));
  // A run that picks other tokens than the first one is a failure of correctness, not of speed
  // (unless they part where the reference's top two logits lie closer than the runs differ).
  return report.agreement.some((a) => a.gate && a.firstDisagreement >= 0 && !a.nearTie) ||
    report.backends.some((b) => b.status === 'error') ||
    report.prefill?.backends.some((b) => b.status === 'error')
    ? 1
    : 0;
}

process.exitCode = await main(process.argv.slice(2));
