// The WGSL the wgpu test suites emit, as a list of SHA-256 hashes by pipeline
// key: proof that a refactor of the shader generators left their text alone.
// Each text has two hashes: of its bytes, and of its lines without the blank
// ones (blank lines come and go with empty template pieces and mean nothing
// to WGSL). A run passes when every text matches on the second and reports
// how many match byte for byte.
//
//   node packages/wgpu/scripts/wgsl-hashes.mjs            compare with wgsl-hashes.txt
//   node packages/wgpu/scripts/wgsl-hashes.mjs --write    record wgsl-hashes.txt anew
//   … --texts <folder>                                    also write every text there
//   … --compile                                          compile the real texts on the device
//                                                         (slow; by default it gets stand-ins)
//   … -- <vitest filters>                                 run only these test files
//                                                         (then only their shaders are compared)
//
// It runs the wgpu test files (all but the browser suite) under vitest with a
// setup file that records each shader module created on the device, plus a
// sweep of generator variants that a software Vulkan does not compile
// (wgsl-capture/sweep.capture.ts). The device compiles a stand-in with the
// same bindings for each shader (see wgsl-capture/record.ts), so the tests'
// checks of results fail by design: the run is for the texts, not a test run.
// It needs a WebGPU adapter: CI=true is set, so a missing one fails the run
// rather than skipping the suites.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const keyOf = (entry) => entry.slice(130);
const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
const manifestPath = join(here, 'wgsl-hashes.txt');

const args = process.argv.slice(2);
const dash = args.indexOf('--');
const filters = dash === -1 ? [] : args.slice(dash + 1);
const own = dash === -1 ? args : args.slice(0, dash);
const write = own.includes('--write');
const compile = own.includes('--compile');
const textsAt = own.indexOf('--texts');
const texts = textsAt === -1 ? undefined : own[textsAt + 1];
if (textsAt !== -1 && !texts) throw new Error('--texts needs a folder');
if (write && filters.length) throw new Error('--write records every test file: give no filters');

const capture = mkdtempSync(join(tmpdir(), 'wgsl-capture-'));
const logPath = join(tmpdir(), 'wgsl-capture-vitest.log');
const log = openSync(logPath, 'w');
const run = spawnSync(
  'npx',
  ['vitest', 'run', '--config', join(here, 'wgsl-capture', 'vitest.config.ts'), ...filters],
  {
    cwd: root,
    // The stand-ins fail the tests' checks by design: their reports go to a log, not the screen.
    stdio: compile ? 'inherit' : ['ignore', log, log],
    env: {
      ...process.env,
      CI: 'true',
      RAYO_WGSL_CAPTURE: capture,
      RAYO_WGSL_CAPTURE_COMPILE: compile ? '1' : '0',
    },
  },
);

/** The text without its blank lines: what the comparison holds to. */
const withoutBlankLines = (code) =>
  code
    .split('\n')
    .filter((line) => line.trim() !== '')
    .join('\n');
const sha256 = (text) => createHash('sha256').update(text).digest('hex');

/** key → hash → text */
const captured = new Map();
for (const file of readdirSync(capture)) {
  for (const line of readFileSync(join(capture, file), 'utf8').split('\n')) {
    if (!line) continue;
    const { key, code } = JSON.parse(line);
    const hash = `${sha256(withoutBlankLines(code))} ${sha256(code)}`;
    if (!captured.has(key)) captured.set(key, new Map());
    captured.get(key).set(hash, code);
  }
}
rmSync(capture, { recursive: true, force: true });

// One line per text: its hash without blank lines, its byte hash, its key.
const entries = [...captured]
  .flatMap(([key, byHash]) => [...byHash.keys()].map((hash) => `${hash} ${key}`))
  .sort((x, y) => keyOf(x).localeCompare(keyOf(y)) || x.localeCompare(y));
const shared = [...captured].filter(([, byHash]) => byHash.size > 1).map(([key]) => key);
if (shared.length)
  console.log(`keys with more than one text (a pipeline key must name one): ${shared.join(', ')}`);

if (texts) {
  mkdirSync(texts, { recursive: true });
  for (const [key, byHash] of captured)
    for (const [hash, code] of byHash)
      writeFileSync(join(texts, `${key.replace(/[^\w.-]+/g, '_')}.${hash.slice(0, 12)}.wgsl`), code);
}

console.log(
  `${entries.length} shader texts under ${captured.size} keys; hash of the list ${sha256(entries.join('\n'))}`,
);
if (!compile) console.log(`vitest's report (of stand-ins): ${logPath}`);
if (compile && run.status !== 0)
  console.log(`vitest exited with ${run.status}: some tests failed (texts recorded all the same)`);

if (write) {
  writeFileSync(manifestPath, `${entries.join('\n')}\n`);
  console.log(`wrote ${manifestPath}`);
  process.exit(0);
}

if (!existsSync(manifestPath)) throw new Error(`no ${manifestPath}: record it first with --write`);
const recorded = readFileSync(manifestPath, 'utf8').split('\n').filter(Boolean);
const bytesOf = (entry) => entry.slice(65, 129);
const meaningOf = (entry) => `${entry.slice(0, 64)} ${keyOf(entry)}`;
const before = new Set(recorded.map(meaningOf));
const beforeBytes = new Set(recorded.map((e) => `${bytesOf(e)} ${keyOf(e)}`));
const keysNow = new Set(entries.map(keyOf));
const keysBefore = new Set(recorded.map(keyOf));
const changed = [...keysNow].filter(
  (k) => keysBefore.has(k) && entries.some((e) => keyOf(e) === k && !before.has(meaningOf(e))),
);
const added = [...keysNow].filter((k) => !keysBefore.has(k));
// With filters only some test files ran: keys they did not reach are not missing.
const removed = filters.length ? [] : [...keysBefore].filter((k) => !keysNow.has(k));
for (const [label, keys] of [
  ['changed', changed],
  ['new', added],
  ['gone', removed],
])
  for (const key of keys) console.log(`${label}: ${key}`);
const same = entries.filter((e) => before.has(meaningOf(e))).length;
const sameBytes = entries.filter((e) => beforeBytes.has(`${bytesOf(e)} ${keyOf(e)}`)).length;
console.log(
  `${same} of ${entries.length} texts identical to wgsl-hashes.txt but for blank lines, ${sameBytes} byte for byte; ` +
    `${changed.length} keys changed, ${added.length} new, ${removed.length} gone`,
);
process.exit(changed.length || added.length || removed.length ? 1 : 0);
