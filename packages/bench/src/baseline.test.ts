import { execFileSync, spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { needPython, python, scratchFolder } from '../testing/python.js';
import {
  type BaselineCaseFile,
  type BaselineOutput,
  baselineKind,
  baselineTimes,
  buildCaseFile,
  compareWithTorch,
  findBaselineScript,
  runTorchBaseline,
} from './baseline.js';
import { selectCases } from './case.js';
import { ceilingCase, SUITE } from './suite.js';
import { FULL_TIMING, QUICK_TIMING } from './timing.js';

const byId = (id: string) => SUITE.find((c) => c.id === id)!;
const script = findBaselineScript()!;
const scratch = scratchFolder('rayo-baseline-');

describe('the case file', () => {
  it('names what each case times', () => {
    expect(baselineKind(byId('gemm/256x256x256'))).toBe('matmul');
    expect(baselineKind(byId('wcache/4x512x512'))).toBe('weightCache');
    expect(baselineKind(byId('batch/1000x1024'))).toBe('elementwiseChain');
    expect(baselineKind(byId('upload/4KiB'))).toBe('upload');
    expect(baselineKind(byId('read/1MiB'))).toBe('read');
    expect(baselineKind(byId('attention/h8-d64-t128'))).toBe('incrementalAttention');
    expect(baselineKind(ceilingCase('full'))).toBe('copy');
  });

  it('holds ids, kinds, shapes, fills, resolved attributes, rotation and the timing', () => {
    const cases = [ceilingCase('quick'), ...selectCases(SUITE, { mode: 'quick' })];
    const file: BaselineCaseFile = JSON.parse(JSON.stringify(buildCaseFile(cases, 'quick', QUICK_TIMING)));
    expect(file.schema).toBe('rayo-bench-cases/2');
    expect(file.mode).toBe('quick');
    expect(file.timing).toEqual({
      warmup: 1,
      minReps: 5,
      maxReps: 200,
      targetMs: 100,
      deviceSampleMs: 1,
      maxCallsPerSample: 1024,
    });
    expect(file.cases.map((c) => c.id)).toEqual(cases.map((c) => c.id));
    const find = (id: string) => file.cases.find((c) => c.id === id)!;
    expect(find('gemm-tb/256x256x256')).toEqual({
      id: 'gemm-tb/256x256x256',
      family: 'gemm-tb',
      kind: 'matmul',
      shapes: [
        [256, 256],
        [256, 256],
      ],
      fills: ['uniform', 'uniform'],
      dtypes: ['f32', 'f32'],
      attrs: { alpha: 1, beta: 1, transA: false, transB: true, precision: 'f32', out: 'auto' },
      rotate: 8,
    });
    // half cases carry each input's dtype, so PyTorch stores the same bytes
    expect(find('gemv-half/f32xbf16-1x1024x1024').dtypes).toEqual(['f32', 'bf16']);
    expect(find('attention-half/h8-d128-t1024').dtypes).toEqual(['f32', 'bf16', 'bf16']);
    // tf32 is asked for by the case, and the script sets allow_tf32 from it
    expect(find('gemm-tf32/256x256x256').attrs).toMatchObject({ precision: 'tf32' });
    expect(find('adamw/1e5').fills).toEqual(['uniform', 'uniform', 'uniform', 'positive']);
    expect(find('adamw/1e5').attrs).toMatchObject({ lr: 1e-3, step: 10, weightDecay: 0.01 });
    // defaults are spelled out: the script needs no knowledge of rayo's specs
    expect(find('attention/h8-d128-t1024').attrs).toEqual({ seqLen: 1024, scale: 0 });
    expect(find('rmsnorm/64x4096')).toMatchObject({ kind: 'rmsNorm', attrs: { eps: 1e-5 } });
    expect(find('batch/1000x1024')).toMatchObject({
      kind: 'elementwiseChain',
      chain: 1000,
      rotate: 1,
      attrs: {},
    });
    expect(find('upload/1MiB')).toMatchObject({ kind: 'upload', shapes: [[262144]], rotate: 1 });
    expect(find('clip/1e5').shapes).toEqual([[50000], [25000], [12500], [12500]]);
  });

  it('lists each case once and rotates only what fits in L2', () => {
    const file = buildCaseFile(
      [byId('gemm/256x256x256'), byId('gemm/256x256x256'), byId('gemm/8192x8192x8192')],
      'full',
      FULL_TIMING,
    );
    expect(file.cases.map((c) => [c.id, c.rotate])).toEqual([
      ['gemm/256x256x256', 64],
      ['gemm/8192x8192x8192', 1],
    ]);
  });
});

describe('ratios', () => {
  it('divide rayo time by PyTorch time, and the other way round for throughput', () => {
    expect(compareWithTorch(3, 1.5)).toEqual({ torchMs: 1.5, timeRatio: 2, throughputRatio: 0.5 });
    expect(compareWithTorch(3, { ms: 1.5, method: 'graph', impl: 'torch.mv', eagerMs: 2 })).toEqual({
      torchMs: 1.5,
      via: 'graph torch.mv',
      eagerMs: 2,
      timeRatio: 2,
      throughputRatio: 0.5,
    });
    expect(compareWithTorch(0.01, 0.04)).toEqual({ torchMs: 0.04, timeRatio: 0.25, throughputRatio: 4 });
    const r = compareWithTorch(0.7, 0.3)!;
    expect(r.timeRatio * r.throughputRatio).toBeCloseTo(1);
  });

  it('are undefined without two positive, finite times', () => {
    expect(compareWithTorch(undefined, 1)).toBeUndefined();
    expect(compareWithTorch(1, undefined)).toBeUndefined();
    expect(compareWithTorch(0, 1)).toBeUndefined();
    expect(compareWithTorch(1, 0)).toBeUndefined();
    expect(compareWithTorch(Number.NaN, 1)).toBeUndefined();
    expect(compareWithTorch(1, Number.POSITIVE_INFINITY)).toBeUndefined();
  });

  it('use PyTorch times per call: a chain is divided by its length, failures are left out', () => {
    const file = buildCaseFile([byId('batch/1000x1024'), byId('softmax/64x4096')], 'quick', QUICK_TIMING);
    const output: BaselineOutput = {
      schema: 'rayo-bench-torch/2',
      available: true,
      results: [
        { id: 'batch/1000x1024', status: 'ok', medianMs: 5, method: 'graph', impl: 'add/mul', eagerMs: 8 },
        { id: 'softmax/64x4096', status: 'ok', medianMs: 0.02 },
        { id: 'rope/64x8x64', status: 'error', message: 'RuntimeError: no' },
        { id: 'swiglu/64x1024', status: 'ok', medianMs: 0 },
      ],
    };
    const times = baselineTimes(output, file);
    expect([...times.entries()]).toEqual([
      ['batch/1000x1024', { ms: 0.005, method: 'graph', impl: 'add/mul', eagerMs: 0.008 }],
      ['softmax/64x4096', { ms: 0.02 }],
    ]);
  });
});

describe('the baseline script', () => {
  it('ships beside the package sources', () => {
    expect(script).toMatch(/baseline[/\\]torch_baseline\.py$/);
  });

  it.runIf(needPython)('compiles', () => {
    // The cache prefix keeps __pycache__ out of the package.
    execFileSync(python, ['-m', 'py_compile', script], {
      env: { ...process.env, PYTHONPYCACHEPREFIX: scratch() },
    });
  });

  it.runIf(needPython)('writes a result file whether or not torch can run here', async () => {
    const cases = [byId('softmax/64x4096'), byId('rope/64x8x64')];
    const casesFile = join(scratch(), 'cases.json');
    const outFile = join(scratch(), 'torch.json');
    await writeFile(casesFile, JSON.stringify(buildCaseFile(cases, 'quick', QUICK_TIMING)));
    // --device cpu: where torch exists without a GPU, the script still runs every case.
    const run = spawnSync(python, [script, '--cases', casesFile, '--out', outFile, '--device', 'cpu'], {
      encoding: 'utf8',
    });
    expect(run.status, run.stderr).toBe(0);
    const output: BaselineOutput = JSON.parse(await readFile(outFile, 'utf8'));
    expect(output.schema).toBe('rayo-bench-torch/2');
    if (output.available) {
      expect(output.results.map((r) => [r.id, r.status])).toEqual(cases.map((c) => [c.id, 'ok']));
    } else {
      expect(output.reason).toMatch(/PyTorch is not installed/);
      expect(output.results).toEqual([]);
    }
  });

  it.runIf(needPython)('rejects a file that is not a case file', async () => {
    const bad = join(scratch(), 'bad.json');
    await writeFile(bad, JSON.stringify({ schema: 'something-else' }));
    const run = spawnSync(python, [script, '--cases', bad, '--out', join(scratch(), 'x.json')], {
      encoding: 'utf8',
    });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain('is not a rayo-bench-cases/2 case file');
  });
});

describe('running the baseline', () => {
  const casesFile = () => join(scratch(), 'run-cases.json');
  /** Runs the baseline with a stand-in script of `source` (written as `name`.py, writing `name`.json). */
  async function runFake(name: string, source: string, onOutput?: (text: string) => void) {
    const script = join(scratch(), `${name}.py`);
    await writeFile(script, source);
    return runTorchBaseline({
      casesFile: casesFile(),
      outFile: join(scratch(), `${name}.json`),
      script,
      python,
      onOutput,
    });
  }

  it('says so when Python is missing', async () => {
    const outcome = await runTorchBaseline({
      casesFile: casesFile(),
      outFile: join(scratch(), 'none.json'),
      python: join(scratch(), 'no-python-here'),
    });
    expect(outcome).toEqual({
      status: 'unavailable',
      reason: `${join(scratch(), 'no-python-here')} was not found (set $PYTHON to a Python with PyTorch)`,
    });
  });

  it('takes $PYTHON from the environment', async () => {
    const outcome = await runTorchBaseline({
      casesFile: casesFile(),
      outFile: join(scratch(), 'none.json'),
      env: { PYTHON: 'python-that-is-not-there' },
    });
    expect(outcome.status === 'unavailable' && outcome.reason).toMatch(
      /^python-that-is-not-there was not found/,
    );
  });

  it.runIf(needPython)('reads what the script wrote, and passes its progress on', async () => {
    const output: BaselineOutput = {
      schema: 'rayo-bench-torch/2',
      available: true,
      torch: '9.9.9',
      device: 'Test GPU',
      results: [{ id: 'softmax/64x4096', status: 'ok', medianMs: 0.01, samples: 5, timer: 'cuda-events' }],
    };
    let progress = '';
    const outcome = await runFake(
      'fake_ok',
      [
        'import json, sys',
        'args = sys.argv[1:]',
        'print("[1/1] torch softmax/64x4096 ... 10 us", file=sys.stderr)',
        `json.dump(json.loads(${JSON.stringify(JSON.stringify(output))}), open(args[args.index("--out") + 1], "w"))`,
      ].join('\n'),
      (text) => {
        progress += text;
      },
    );
    expect(outcome).toEqual({ status: 'ok', output });
    expect(progress).toContain('torch softmax/64x4096');
  });

  it.runIf(needPython)('reports the reason the script gives, or its last error line', async () => {
    const noTorch = [
      'import json, sys',
      'args = sys.argv[1:]',
      'json.dump({"schema": "rayo-bench-torch/2", "available": False, "reason": "CUDA is not available", "results": []}, open(args[args.index("--out") + 1], "w"))',
    ].join('\n');
    expect(await runFake('fake_unavailable', noTorch)).toEqual({
      status: 'unavailable',
      reason: 'CUDA is not available',
    });
    const crash = 'import sys\nprint("starting", file=sys.stderr)\nraise SystemExit("out of memory")\n';
    expect(await runFake('fake_crash', crash)).toEqual({
      status: 'unavailable',
      reason: 'the baseline script exited with code 1: out of memory',
    });
  });
});
