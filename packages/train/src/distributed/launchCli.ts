import { RayoError } from '@rayo/core';
import { launchDataParallel } from './launcher.js';

export const LAUNCH_USAGE = `Usage: launch --gpus N|LIST [--master-port P] SCRIPT [ARGS...]

Starts SCRIPT once per GPU (N GPUs 0 … N−1, or a comma-separated LIST of
ordinals), each process seeing only its GPU and told RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT. When a rank fails, the others are
stopped; the exit code is then 1.`;

/** Parses the launcher's options (everything after SCRIPT goes to the script) and runs it. */
export async function launchCli(argv: readonly string[]): Promise<number> {
  let gpus: number | number[] | undefined;
  let masterPort: number | undefined;
  let i = 0;
  for (; i < argv.length && argv[i]!.startsWith('--'); i += 2) {
    const [flag, value] = [argv[i]!, argv[i + 1] ?? ''];
    if (flag === '--gpus') gpus = value.includes(',') ? value.split(',').map(Number) : Number(value);
    else if (flag === '--master-port') masterPort = Number(value);
    else {
      console.error(`launch: unknown option ${flag}\n\n${LAUNCH_USAGE}`);
      return 2;
    }
  }
  const script = argv[i];
  if (gpus === undefined || script === undefined) {
    console.error(LAUNCH_USAGE);
    return 2;
  }
  try {
    await launchDataParallel({ gpus, script, args: argv.slice(i + 1), masterPort });
    return 0;
  } catch (error) {
    if (!(error instanceof RayoError)) throw error;
    console.error(error.message);
    return 1;
  }
}
