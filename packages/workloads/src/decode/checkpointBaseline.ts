import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  findPackageScript,
  type PythonScriptOutcome,
  type PythonScriptOutput,
  runPythonScript,
} from '@rayo/bench';

/** A PyTorch baseline script run on a checkpoint, for a request of the decode benchmarks. */
export interface CheckpointBaselineRun {
  /** The script's file name: beside a bundle, or in the package's `baseline/` folder. */
  readonly script: string;
  /** The checkpoint folder (`--model`). */
  readonly dir: string;
  /** The folder the request (`<name>-request.json`) and the output (`<name>.json`) go to. */
  readonly out: string;
  readonly name: string;
  readonly request: Readonly<Record<string, unknown>>;
  /** The script's own options, before `--device`. */
  readonly args?: readonly string[];
  readonly torchDevice: string;
  /** How messages name the run, e.g. `the prefill baseline`. */
  readonly label: string;
}

/**
 * Writes the request, runs the script (its output echoed on stderr) and
 * reads what it wrote. Never throws for a missing script, Python, torch or
 * GPU: the outcome says why.
 */
export async function runCheckpointBaseline<T extends PythonScriptOutput>(
  run: CheckpointBaselineRun,
): Promise<PythonScriptOutcome<T>> {
  const script = findPackageScript(run.script, import.meta.url);
  if (!script) return { status: 'unavailable', reason: `the script ${run.script} was not found` };
  const request = join(run.out, `${run.name}-request.json`);
  const outFile = join(run.out, `${run.name}.json`);
  await writeFile(request, `${JSON.stringify(run.request)}\n`);
  return runPythonScript<T>({
    script,
    args: [
      '--model',
      run.dir,
      '--request',
      request,
      '--out',
      outFile,
      ...(run.args ?? []),
      '--device',
      run.torchDevice,
    ],
    outFile,
    label: run.label,
    onOutput: (text) => process.stderr.write(text),
  });
}
