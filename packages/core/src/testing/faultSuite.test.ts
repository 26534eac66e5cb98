import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../cpu/backend.js';
import { FAULT_SCENARIOS } from './faultScenarios.js';
import { type FaultScenario, faultTable, runFaultScenarios } from './faultSuite.js';

describe('fault suite', () => {
  it('every backend-neutral scenario is survived on cpu', async () => {
    const results = await runFaultScenarios(FAULT_SCENARIOS, {
      backendName: 'cpu',
      create: async () => new CpuBackend(),
      soakKernels: 2000,
    });
    expect(results.map((r) => [r.scenario, r.status, r.outcome]).filter((r) => r[1] !== 'survived')).toEqual(
      [],
    );
    expect(results).toHaveLength(FAULT_SCENARIOS.length);
  });

  it('reports a hanging or failing scenario and still runs the rest, disposing their backends', async () => {
    const disposed: string[] = [];
    const scenario = (name: string, run: () => Promise<string>): FaultScenario => ({
      name,
      timeoutSeconds: () => 0.05,
      run: async (context) => {
        const backend = await context.create();
        const dispose = backend.dispose.bind(backend);
        backend.dispose = () => {
          disposed.push(name);
          dispose();
        };
        return run();
      },
    });
    const results = await runFaultScenarios(
      [
        scenario('hangs', () => new Promise<string>(() => {})),
        scenario('throws', () => Promise.reject(new Error('not survived'))),
        scenario('survives', async () => 'fine'),
      ],
      { backendName: 'cpu', create: async () => new CpuBackend(), soakKernels: 0 },
    );
    expect(results.map((r) => [r.scenario, r.status, r.outcome])).toEqual([
      ['hangs', 'TIMED OUT', 'no outcome within 0.05 s'],
      ['throws', 'FAILED', 'Error: not survived'],
      ['survives', 'survived', 'fine'],
    ]);
    expect(disposed).toEqual(['hangs', 'throws', 'survives']);
    const table = faultTable(results).split('\n');
    expect(table[0]).toMatch(/^\| scenario +\| status +\| seconds \| outcome \|$/);
    expect(table[3]).toContain('| FAILED    |');
  });
});
