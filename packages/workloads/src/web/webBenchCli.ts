import { parseCommandLine } from '../commandLine.js';
import { parseWebBenchArgs, WEB_BENCH_USAGE, webBench, webBenchSummary } from './webBench.js';

async function main(argv: readonly string[]): Promise<number> {
  const line = parseCommandLine('web-bench', WEB_BENCH_USAGE, argv, parseWebBenchArgs);
  if ('exitCode' in line) return line.exitCode;
  const report = await webBench(line.settings, (text) => console.log(text));
  process.stdout.write(webBenchSummary(report));
  // Other text on the browser path is a failure of correctness, not of speed.
  return report.sameText ? 0 : 1;
}

process.exitCode = await main(process.argv.slice(2));
