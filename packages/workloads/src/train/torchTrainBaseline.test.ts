import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findTorchTrainScript, runTorchTrainBaseline, TORCH_TRAIN_SCRIPT } from './torchTrainBaseline.js';

// Node stands in for Python: the runner only needs an interpreter and a script.
describe('runTorchTrainBaseline', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'train-baseline-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const fakeScript = async (name: string, body: string): Promise<string> => {
    const path = join(dir, name);
    await writeFile(path, body);
    return path;
  };
  it('finds the script in the package', () => {
    expect(findTorchTrainScript()).toMatch(new RegExp(`baseline[\\\\/]${TORCH_TRAIN_SCRIPT}$`));
  });

  it('passes the request and reads the output file', async () => {
    const script = await fakeScript(
      'ok.mjs',
      `import { readFileSync, writeFileSync } from 'node:fs';
const args = process.argv.slice(2);
const request = JSON.parse(readFileSync(args[args.indexOf('--request') + 1], 'utf8'));
process.stderr.write('progress\\n');
const memory = { peakAllocatedBytes: 1024, peakReservedBytes: 2048 };
const results = request.workloads.map((w) => ({ id: w.id, status: 'ok', samplesPerSecond: 5, memory, graph: { samplesPerSecond: 6, memory } }));
const output = { schema: 'rayo-train-torch/3', available: true, torch: '2.x', results };
writeFileSync(args[args.indexOf('--out') + 1], JSON.stringify(output));
`,
    );
    const requestFile = join(dir, 'request.json');
    await writeFile(requestFile, JSON.stringify({ workloads: [{ id: 'mlp-a' }] }));
    const progress: string[] = [];
    const outcome = await runTorchTrainBaseline({
      requestFile,
      outFile: join(dir, 'out.json'),
      script,
      python: process.execPath,
      onOutput: (t) => progress.push(t),
    });
    expect(outcome.status).toBe('ok');
    if (outcome.status === 'ok')
      expect(outcome.output.results).toEqual([
        {
          id: 'mlp-a',
          status: 'ok',
          samplesPerSecond: 5,
          memory: { peakAllocatedBytes: 1024, peakReservedBytes: 2048 },
          graph: { samplesPerSecond: 6, memory: { peakAllocatedBytes: 1024, peakReservedBytes: 2048 } },
        },
      ]);
    expect(progress.join('')).toContain('progress');
    expect(JSON.parse(await readFile(join(dir, 'out.json'), 'utf8')).torch).toBe('2.x');
  });

  it('says why there is no baseline: no interpreter, a failing script, no torch', async () => {
    const base = { requestFile: join(dir, 'none.json'), outFile: join(dir, 'none-out.json') };
    const missing = await runTorchTrainBaseline({ ...base, python: join(dir, 'no-such-python') });
    expect(missing).toEqual({
      status: 'unavailable',
      reason: expect.stringMatching(/was not found .*\$PYTHON/),
    });

    const crash = await fakeScript(
      'crash.mjs',
      "console.error('first');\nconsole.error('ModuleNotFoundError: x');\nprocess.exit(3);",
    );
    const crashed = await runTorchTrainBaseline({ ...base, script: crash, python: process.execPath });
    expect(crashed).toEqual({
      status: 'unavailable',
      reason: 'the script exited with code 3: ModuleNotFoundError: x',
    });

    const noTorch = await fakeScript(
      'no-torch.mjs',
      `import { writeFileSync } from 'node:fs';
const args = process.argv.slice(2);
writeFileSync(args[args.indexOf('--out') + 1], JSON.stringify({ available: false, reason: 'PyTorch is not installed', results: [] }));`,
    );
    const unavailable = await runTorchTrainBaseline({ ...base, script: noTorch, python: process.execPath });
    expect(unavailable).toEqual({ status: 'unavailable', reason: 'PyTorch is not installed' });
  });

  const python = process.env.PYTHON ?? 'python3';
  // CI must run the real script; elsewhere a machine without Python skips this.
  const needPython = spawnSync(python, ['--version']).status === 0 || process.env.CI === 'true';

  it.runIf(needPython)(
    'runs the real script, which finds the shared Python module through the launcher',
    async () => {
      const requestFile = join(dir, 'real-request.json');
      const request = {
        schema: 'rayo-train-workloads/1',
        warmup: 1,
        steps: 1,
        clipNorm: 1,
        seed: 0,
        adamw: { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 },
        workloads: [],
      };
      await writeFile(requestFile, JSON.stringify(request));
      const outcome = await runTorchTrainBaseline({
        requestFile,
        outFile: join(dir, 'real-out.json'),
        python,
        args: ['--device', 'cpu'],
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
      });
      // With torch the (empty) request trains nothing on the cpu; without it the script says so. An import
      // error of the shared module would be neither.
      if (outcome.status === 'ok') expect(outcome.output.results).toEqual([]);
      else expect(outcome.reason).toMatch(/^PyTorch is not installed/);
    },
  );
});
