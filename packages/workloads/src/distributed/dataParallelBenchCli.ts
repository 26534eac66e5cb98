import { main } from './dataParallelBench.js';

process.exitCode = await main(process.argv.slice(2));
