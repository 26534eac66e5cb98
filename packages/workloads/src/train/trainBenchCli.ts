import { main } from './trainBench.js';

process.exitCode = await main(process.argv.slice(2));
