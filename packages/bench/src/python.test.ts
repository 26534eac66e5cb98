import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { needPython, python, scratchFolder } from '../testing/python.js';
import { findPackageScript, runPythonScript, SHARED_BASELINE_MODULE, sharedBaselineDir } from './python.js';

const scratch = scratchFolder('rayo-python-');

describe('findPackageScript', () => {
  it('finds a script in the baseline folder of the package that holds the caller, however deep', () => {
    const deep = new URL('./some/nested/folder/caller.js', import.meta.url);
    expect(findPackageScript('torch_baseline.py', deep)).toMatch(
      /bench[/\\]baseline[/\\]torch_baseline\.py$/,
    );
  });

  it('prefers a script beside the caller, as in a bundle', async () => {
    const bundle = join(scratch(), 'bundle');
    await mkdir(bundle, { recursive: true });
    await writeFile(join(bundle, 'x.py'), '');
    expect(findPackageScript('x.py', pathToFileURL(join(bundle, 'app.mjs')))).toBe(join(bundle, 'x.py'));
  });

  it('stops at the package root: a name the package does not ship is not found', () => {
    expect(findPackageScript('no_such_script.py', import.meta.url)).toBeUndefined();
  });

  it('knows where the shared module lies', () => {
    expect(sharedBaselineDir()).toBe(dirname(findPackageScript(SHARED_BASELINE_MODULE, import.meta.url)!));
  });
});

describe.runIf(needPython)('runPythonScript', () => {
  it('lets a script kept anywhere import the shared module, and keeps PYTHONPATH entries', async () => {
    const extra = join(scratch(), 'extra');
    await mkdir(extra, { recursive: true });
    await writeFile(join(extra, 'extra_module.py'), 'VALUE = 7\n');
    const script = join(scratch(), 'uses_shared.py');
    const outFile = join(scratch(), 'uses_shared.json');
    await writeFile(
      script,
      [
        'import sys',
        'import extra_module',
        'from rayo_torch import quantile, write_json',
        'write_json(sys.argv[1], {"available": True, "median": quantile([1.0, 2.0, 4.0], 0.5), "extra": extra_module.VALUE})',
        '',
      ].join('\n'),
    );
    const outcome = await runPythonScript<{ available: boolean; median: number; extra: number }>({
      script,
      args: [outFile],
      outFile,
      label: 'the test script',
      python,
      env: { ...process.env, PYTHONPATH: extra, PYTHONDONTWRITEBYTECODE: '1' },
    });
    expect(outcome).toEqual({ status: 'ok', output: { available: true, median: 2, extra: 7 } });
  });

  it('says why when a script cannot import what it needs', async () => {
    const script = join(scratch(), 'missing_import.py');
    await writeFile(script, 'import no_such_module_here\n');
    const outcome = await runPythonScript({
      script,
      args: [],
      outFile: join(scratch(), 'never.json'),
      label: 'the test script',
      python,
    });
    expect(outcome.status).toBe('unavailable');
    if (outcome.status === 'unavailable')
      expect(outcome.reason).toMatch(/^the test script exited with code 1: ModuleNotFoundError/);
  });
});
