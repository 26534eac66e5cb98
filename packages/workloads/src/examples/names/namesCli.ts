import { namesMain } from './cli.js';

try {
  process.exitCode = await namesMain(process.argv.slice(2));
} catch (error) {
  console.error(`names: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
