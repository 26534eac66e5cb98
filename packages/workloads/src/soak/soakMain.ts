// The soak CLI as a program: `pnpm -F @rayo/workloads soak -- --backend wgpu --calls 100000`.
import { main } from './soakCli.js';

process.exitCode = await main(process.argv.slice(2));
