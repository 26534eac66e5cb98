import { conformanceSuite, runChecks } from '@rayo/core/testing';
import { expect, it } from 'vitest';
import { createWgpuBackend } from './index.js';

it('elementwise', async () => {
  const suite = conformanceSuite({ create: () => createWgpuBackend() });
  const checks = suite.checks.filter((c) => c.group === 'elementwise');
  const s = await runChecks(checks);
  console.log(s.passed, s.failed, s.failures.slice(0, 8));
  await suite.teardown();
  expect(s.failed).toBe(0);
}, 300000);
