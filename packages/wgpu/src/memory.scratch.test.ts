import { conformanceSuite, runChecks } from '@rayo/core/testing';
import { expect, it } from 'vitest';
import { createWgpuBackend } from './index.js';

it('conformance', async () => {
  const suite = conformanceSuite({ create: () => createWgpuBackend() });
  const checks = suite.checks.filter((c) => ['memory', 'reduction', 'softmax'].includes(c.group));
  const s = await runChecks(checks);
  console.log(s.passed, s.failed, JSON.stringify(s.failures.slice(0, 10), null, 1));
  await suite.teardown();
  expect(s.failed).toBe(0);
}, 600000);
