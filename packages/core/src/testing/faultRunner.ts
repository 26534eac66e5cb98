#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { backendOptionsFromEnvironment, createBackend } from '../registry.js';
import { parseCommandLine } from './commandLine.js';
import { FAULT_SCENARIOS } from './faultScenarios.js';
import { type FaultResult, faultExtensions, faultTable, runFaultScenarios } from './faultSuite.js';

const USAGE = `Usage: rayo-faults [--backend NAME] [--soak N] [--filter TEXT]

Runs rayo's fault suite on one backend: out of memory and recovery, reads of
unsubmitted work, a soak of mixed kernels with memory and GPU objects flat,
concurrent reads racing with disposals, and the scenarios the backend's
package adds (a faulting kernel on cuda, device loss on wgpu). Each scenario
has its own timeout; a table of scenario → outcome is printed at the end,
whatever happened. Exits 1 when a scenario was not survived, 2 when the
backend cannot run.

  --backend NAME   cpu (default), wgpu or cuda
  --soak N         kernels in the soak (default 1000000 on a GPU, 20000 on cpu)
  --filter TEXT    only scenarios whose name contains TEXT`;

async function main(): Promise<number> {
  const args = parseCommandLine(parse, USAGE);
  if (typeof args === 'number') return args;
  const name = args.values.backend ?? 'cpu';
  let info: string;
  let kind: string;
  let fromEnvironment: Readonly<Record<string, unknown>>;
  try {
    fromEnvironment = await backendOptionsFromEnvironment(name, process.env);
    // A probe backend only to say what runs; each scenario gets fresh ones.
    const probe = await createBackend(name, fromEnvironment);
    info = probe.info.device;
    kind = probe.info.kind;
    probe.dispose();
  } catch (error) {
    process.stderr.write(`rayo-faults: ${(error as Error).message}\n`);
    return 2;
  }
  const soak =
    args.values.soak === undefined ? (kind === 'gpu' ? 1_000_000 : 20_000) : Number(args.values.soak);
  if (!Number.isInteger(soak) || soak < 0) {
    process.stderr.write(`rayo-faults: --soak must be a non-negative integer, got ${args.values.soak}\n`);
    return 2;
  }
  const filter = args.values.filter;
  const scenarios = [...FAULT_SCENARIOS, ...faultExtensions(name).flatMap((e) => e.scenarios ?? [])].filter(
    (s) => (!s.backends || s.backends.includes(name)) && (!filter || s.name.includes(filter)),
  );
  process.stdout.write(
    `rayo fault suite on ${name}: ${info} (${scenarios.length} scenarios, soak ${soak} kernels)\n`,
  );
  if (kind === 'gpu' && faultExtensions(name).length === 0) {
    process.stdout.write(
      `note: no ${name}-specific scenarios are registered (the bundled faults.mjs registers them)\n`,
    );
  }
  const results: FaultResult[] = [];
  // Whatever a scenario leaves behind must not end the run before the table is printed.
  const stray = (error: unknown) =>
    process.stdout.write(`stray error (after its scenario ended): ${(error as Error)?.message ?? error}\n`);
  process.on('unhandledRejection', stray);
  process.on('uncaughtException', stray);
  await runFaultScenarios(scenarios, {
    backendName: name,
    create: (options) => createBackend(name, { ...fromEnvironment, ...options }),
    soakKernels: soak,
    onResult: (r) => {
      results.push(r);
      process.stdout.write(`${r.status.padEnd(9)} ${r.scenario} (${r.seconds.toFixed(1)} s): ${r.outcome}\n`);
    },
  });
  process.stdout.write(`\n${faultTable(results)}\n`);
  const bad = results.filter((r) => r.status !== 'survived').length;
  process.stdout.write(`${results.length - bad} survived, ${bad} not survived\n`);
  return bad === 0 ? 0 : 1;
}

function parse() {
  return parseArgs({
    options: {
      backend: { type: 'string' },
      soak: { type: 'string' },
      filter: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
}

const code = await main();
// A scenario abandoned on its timeout may hold the event loop open: once the
// table is written out, end here.
process.stdout.write('', () => process.exit(code));
