import { familyParity, PARITY_USAGE, parityTable, parseParityArgs } from './familyParity.js';

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help')) {
    console.log(PARITY_USAGE);
    return 0;
  }
  let settings: ReturnType<typeof parseParityArgs>;
  try {
    settings = parseParityArgs(argv);
  } catch (error) {
    console.error(
      `family-parity: ${error instanceof Error ? error.message : String(error)}\n\n${PARITY_USAGE}`,
    );
    return 2;
  }
  try {
    const report = await familyParity(settings);
    process.stdout.write(parityTable(report));
    return report.passed ? 0 : 1;
  } catch (error) {
    console.error(`family-parity: ${error instanceof Error ? error.message : String(error)}`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
