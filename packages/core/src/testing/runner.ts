#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { backendOptionsFromEnvironment, createBackend } from '../registry.js';
import { parseCommandLine } from './commandLine.js';
import { conformanceSuite, runChecks } from './conformance.js';
import { UnsupportedOnBackend } from './halfCases.js';

const USAGE = `Usage: rayo-conformance [--backend NAME] [--filter TEXT] [--verbose]

Runs the rayo conformance suite (every kernel spec against the reference, the
error cases and the Backend contract) on one backend and prints
"N passed, M failed, U unsupported" (U: checks in a dtype the backend declares
it does not run, whose calls it refused as declared). Exits 1 when a check fails, 2 when the backend cannot run.

  --backend NAME   cpu (default), wgpu or cuda
  --filter TEXT    only checks whose name or group contains TEXT
  --verbose        print every check, not only failures`;

async function main(): Promise<number> {
  const args = parseCommandLine(parse, USAGE);
  if (typeof args === 'number') return args;
  const name = args.values.backend ?? 'cpu';
  let backend: Awaited<ReturnType<typeof createBackend>>;
  try {
    backend = await createBackend(name, await backendOptionsFromEnvironment(name, process.env));
  } catch (error) {
    process.stderr.write(`rayo-conformance: ${(error as Error).message}\n`);
    return 2;
  }
  process.stdout.write(`rayo conformance on ${backend.info.name}: ${backend.info.device}\n`);
  const suite = conformanceSuite({ create: () => backend });
  const filter = args.values.filter;
  const checks = filter
    ? suite.checks.filter((c) => c.name.includes(filter) || c.group.includes(filter))
    : suite.checks;
  const started = performance.now();
  const summary = await runChecks(checks, (check, error) => {
    if (error instanceof UnsupportedOnBackend) {
      if (args.values.verbose) process.stdout.write(`unsupported ${check.group} › ${check.name}\n`);
    } else if (error)
      process.stdout.write(
        `FAIL ${check.group} › ${check.name}\n     ${String((error as Error).message ?? error).replace(/\n/g, '\n     ')}\n`,
      );
    else if (args.values.verbose) process.stdout.write(`ok   ${check.group} › ${check.name}\n`);
  });
  await suite.teardown();
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  const groups = new Set(checks.map((c) => c.group)).size;
  process.stdout.write(`${checks.length} checks in ${groups} groups, ${seconds} s\n`);
  process.stdout.write(
    `${summary.passed} passed, ${summary.failed} failed, ${summary.unsupported} unsupported (refused as declared)\n`,
  );
  return summary.failed === 0 ? 0 : 1;
}

function parse() {
  return parseArgs({
    options: {
      backend: { type: 'string' },
      filter: { type: 'string' },
      verbose: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
}

process.exitCode = await main();
