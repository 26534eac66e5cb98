import { DECODE_USAGE, decodeBench, decodeSummary, parseDecodeArgs } from './decodeBench.js';

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help')) {
    console.log(DECODE_USAGE);
    return 0;
  }
  let settings: ReturnType<typeof parseDecodeArgs>;
  try {
    settings = parseDecodeArgs(argv);
  } catch (error) {
    console.error(
      `decode-bench: ${error instanceof Error ? error.message : String(error)}\n\n${DECODE_USAGE}`,
    );
    return 2;
  }
  const report = await decodeBench(settings);
  process.stdout.write(decodeSummary(report));
  // A run that picks other tokens than the first one is a failure of correctness, not of speed.
  return report.agreement.some((a) => a.gate && a.firstDisagreement >= 0) ||
    report.backends.some((b) => b.status === 'error') ||
    report.prefill?.backends.some((b) => b.status === 'error')
    ? 1
    : 0;
}

process.exitCode = await main(process.argv.slice(2));
