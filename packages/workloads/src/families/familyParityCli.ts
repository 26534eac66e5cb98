import { messageOf, parseCommandLine } from '../commandLine.js';
import { familyParity, PARITY_USAGE, parityTable, parseParityArgs } from './familyParity.js';

async function main(argv: readonly string[]): Promise<number> {
  const line = parseCommandLine('family-parity', PARITY_USAGE, argv, parseParityArgs);
  if ('exitCode' in line) return line.exitCode;
  try {
    const report = await familyParity(line.settings);
    process.stdout.write(parityTable(report));
    return report.passed ? 0 : 1;
  } catch (error) {
    console.error(`family-parity: ${messageOf(error)}`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
