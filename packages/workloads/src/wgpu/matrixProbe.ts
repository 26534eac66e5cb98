import { parseArgs } from 'node:util';
import { requestWgpuDevice, wgpuOptionsFromEnvironment } from '@rayo/wgpu';
import type {} from '@rayo/wgpu/webgpu-types';

// What WGSL's subgroup matrices (Dawn's `chromium_experimental_subgroup_matrix`)
// deliver on this adapter, without a GEMM's global loads around them: the
// ceiling any f16 product or attention kernel written on them can reach.
//   registers  FM×FN f16 16×16×16 products a step on fragments held in registers;
//   shared     the same with the FM left and FN right fragments loaded from
//              workgroup memory every step (a tiled GEMM's inner loop);
//   staged     shared, plus every invocation storing 8 halves into workgroup
//              memory and a barrier every `bk`/16 steps (a GEMM's staging);
//   rescale    shared, plus a result fragment stored to workgroup memory, each
//              lane rescaling and reading back its share every step (what a
//              flash-attention kernel without in-register rescaling pays);
//   relay      global's fragments for the next step loaded from storage while
//              this step's products run, stored into workgroup memory as
//              fragments, a barrier, then loaded from there (staging without
//              a store per half);
//   global     the fragments loaded straight from storage every step, as a
//              GEMM without staging reads a [2048, 4096] a and b (the
//              workgroups' tiles spread over them, K walked 16 a step).

const USAGE = `Usage: node matrix-probe.mjs [--fragments 2x2,4x2,4x4] [--probes registers,shared,staged,rescale]
                              [--subgroups 4] [--steps 256] [--workgroups 1056] [--reps 5]

Prints TFLOP/s of f16 16×16×16 → f32 subgroup-matrix products for each probe
and fragment grid (FM left × FN right fragments a subgroup, FM·FN products a
step), from timestamp queries around one dispatch, best of --reps. Needs
Dawn's unsafe APIs (set here) and an adapter with subgroup matrices; Dawn
toggles come from RAYO_DAWN_ENABLE / RAYO_DAWN_DISABLE.`;

type Probe = 'registers' | 'shared' | 'staged' | 'rescale' | 'global' | 'relay';
const PROBES: readonly Probe[] = ['registers', 'shared', 'staged', 'rescale', 'global', 'relay'];
/** The global probe's operands: a and b [GLOBAL_ROWS, GLOBAL_K] f16, one after the other in `src`. */
const GLOBAL_ROWS = 2048;
const GLOBAL_K = 4096;
const PAD = 8;
const BK = 32;

interface ProbeCase {
  readonly probe: Probe;
  readonly fm: number;
  readonly fn: number;
  readonly subgroups: number;
  readonly steps: number;
}

/** WGSL of one probe: every subgroup runs `steps` steps of FM·FN fragment products. */
export function probeShader(c: ProbeCase): string {
  const { fm, fn, subgroups, steps } = c;
  const L = 'subgroup_matrix_left<f16, 16, 16>';
  const R = 'subgroup_matrix_right<f16, 16, 16>';
  const C = 'subgroup_matrix_result<f32, 16, 16>';
  // A tile of 4 steps of fragments per subgroup: rows of BK + PAD halves.
  const stride = BK + PAD;
  const rowsPerSubgroup = 16 * (fm + fn);
  const tileHalves = subgroups * rowsPerSubgroup * stride;
  const lines: string[] = [];
  for (let i = 0; i < fm; i++) for (let j = 0; j < fn; j++) lines.push(`var acc${i}_${j}: ${C};`);
  const loads = (fromShared: boolean) => {
    const out: string[] = [];
    for (let i = 0; i < fm; i++)
      out.push(
        fromShared
          ? `let l${i} = subgroupMatrixLoad<${L}>(&tile, base + ${i * 16}u * ${stride}u + kk, false, ${stride}u);`
          : `let l${i} = subgroupMatrixLoad<${L}>(&src, ${i * 256}u, false, 16u);`,
      );
    for (let j = 0; j < fn; j++)
      out.push(
        fromShared
          ? `let r${j} = subgroupMatrixLoad<${R}>(&tile, base + ${(fm + j) * 16}u * ${stride}u + kk, true, ${stride}u);`
          : `let r${j} = subgroupMatrixLoad<${R}>(&src, ${(fm + j) * 256}u, true, 16u);`,
      );
    return out.join('\n    ');
  };
  // The global probe's subgroups form a 2×(subgroups/2) grid over a workgroup tile (1×1 for one).
  const wm = subgroups >= 2 ? 2 : 1;
  const wn = subgroups / wm;
  const tileM = wm * fm * 16;
  const tileN = wn * fn * 16;
  const globalLoads = (prefix = 'let ', name = (x: string) => x) => {
    const out: string[] = [];
    for (let i = 0; i < fm; i++)
      out.push(
        `${prefix}${name(`l${i}`)} = subgroupMatrixLoad<${L}>(&src, (rowA + ${i * 16}u) * ${GLOBAL_K}u + kk, false, ${GLOBAL_K}u);`,
      );
    for (let j = 0; j < fn; j++)
      out.push(
        `${prefix}${name(`r${j}`)} = subgroupMatrixLoad<${R}>(&src, ${GLOBAL_ROWS * GLOBAL_K}u + (rowB + ${j * 16}u) * ${GLOBAL_K}u + kk, true, ${GLOBAL_K}u);`,
      );
    return out.join('\n    ');
  };
  // relay: the next step's fragments held in n*, stored to this step's half of the tile as
  // fragments (left row-major, right column-major, as loaded), read back for the products.
  // One step of fragments a subgroup, rows 16 + PAD halves long.
  const relayStride = 16 + PAD;
  const relayHalves = subgroups * rowsPerSubgroup * relayStride;
  const relayBase = `sg * ${rowsPerSubgroup * relayStride}u`;
  const relayStores = () => {
    const out: string[] = [];
    for (let i = 0; i < fm; i++)
      out.push(
        `subgroupMatrixStore(&tile, half + ${relayBase} + ${i * 16 * relayStride}u, nl${i}, false, ${relayStride}u);`,
      );
    for (let j = 0; j < fn; j++)
      out.push(
        `subgroupMatrixStore(&tile, half + ${relayBase} + ${(fm + j) * 16 * relayStride}u, nr${j}, true, ${relayStride}u);`,
      );
    return out.join('\n    ');
  };
  const relayLoads = () => {
    const out: string[] = [];
    for (let i = 0; i < fm; i++)
      out.push(
        `let l${i} = subgroupMatrixLoad<${L}>(&tile, half + ${relayBase} + ${i * 16 * relayStride}u, false, ${relayStride}u);`,
      );
    for (let j = 0; j < fn; j++)
      out.push(
        `let r${j} = subgroupMatrixLoad<${R}>(&tile, half + ${relayBase} + ${(fm + j) * 16 * relayStride}u, true, ${relayStride}u);`,
      );
    return out.join('\n    ');
  };
  const products: string[] = [];
  for (let i = 0; i < fm; i++)
    for (let j = 0; j < fn; j++)
      products.push(`acc${i}_${j} = subgroupMatrixMultiplyAccumulate(l${i}, r${j}, acc${i}_${j});`);
  const stores: string[] = [];
  for (let i = 0; i < fm; i++)
    for (let j = 0; j < fn; j++)
      stores.push(
        `subgroupMatrixStore(&dst, (wid * ${subgroups}u + sg) * ${fm * fn * 256}u + ${(i * fn + j) * 256}u, acc${i}_${j}, false, 16u);`,
      );
  const shared = c.probe !== 'registers' && c.probe !== 'global';
  // relay keeps two halves of the tile, each a step of every subgroup's fragments.
  const tileHalvesOf = c.probe === 'relay' ? 2 * relayHalves : tileHalves;
  const globalRows = `let rowA = (wid % ${GLOBAL_ROWS / tileM}u) * ${tileM}u + (sg / ${wn}u) * ${fm * 16}u;
  let rowB = (wid / ${GLOBAL_ROWS / tileM}u % ${GLOBAL_ROWS / tileN}u) * ${tileN}u + (sg % ${wn}u) * ${fn * 16}u;`;
  const body =
    c.probe === 'relay'
      ? `${globalRows}
  var kk = 0u;
  ${globalLoads('var ', (x) => `n${x}`)}
  for (var s = 0u; s < ${steps}u; s++) {
    let half = (s % 2u) * ${relayHalves}u;
    ${relayStores()}
    workgroupBarrier();
    kk = ((s + 1u) * 16u) % ${GLOBAL_K}u;
    ${globalLoads('', (x) => `n${x}`)}
    ${relayLoads()}
    ${products.join('\n    ')}
  }`
      : c.probe === 'global'
        ? `${globalRows}
  for (var s = 0u; s < ${steps}u; s++) {
    let kk = (s * 16u) % ${GLOBAL_K}u;
    ${globalLoads()}
    ${products.join('\n    ')}
  }`
        : c.probe === 'registers'
          ? `${loads(false)}
  for (var s = 0u; s < ${steps}u; s++) {
    ${products.join('\n    ')}
  }`
          : `for (var s = 0u; s < ${steps}u; s++) {
    let kk = (s % ${BK / 16}u) * 16u;
    ${
      c.probe === 'staged'
        ? `if (kk == 0u) {
      workgroupBarrier();
      let at = (tid * 8u) % ${tileHalves - 8}u;
      for (var q = 0u; q < 8u; q++) { tile[at + q] = f16(f32(s + q) * 1e-3); }
      workgroupBarrier();
    }`
        : ''
    }
    ${loads(true)}
    ${products.join('\n    ')}
    ${
      c.probe === 'rescale'
        ? `subgroupMatrixStore(&spill, sg * 256u, acc0_0, false, 16u);
    let scale = exp(-f32(s & 1u) * 1e-3);
    for (var q = 0u; q < 8u; q++) { o[q] = o[q] * scale + spill[sg * 256u + q * 32u + lane]; }`
        : ''
    }
  }`;
  return `enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
diagnostic(off, chromium.subgroup_matrix_uniformity);
@group(0) @binding(0) var<storage, read> src: array<f16>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
${shared ? `var<workgroup> tile: array<f16, ${tileHalvesOf}>;` : ''}
${c.probe === 'rescale' ? `var<workgroup> spill: array<f32, ${subgroups * 256}>;` : ''}
@compute @workgroup_size(${subgroups * 32})
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) w: vec3<u32>,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
  let wid = w.x;
  ${shared ? `for (var i = tid; i < ${tileHalvesOf}u; i += ${subgroups * 32}u) { tile[i] = src[i % 4096u]; }\n  workgroupBarrier();\n  let base = sg * ${rowsPerSubgroup}u * ${stride}u;` : ''}
  ${c.probe === 'rescale' ? 'var o: array<f32, 8>;' : ''}
  ${lines.join('\n  ')}
  ${body}
  ${stores.join('\n  ')}
  ${c.probe === 'rescale' ? 'for (var q = 0u; q < 8u; q++) { dst[(wid * 32u + sg) * 8u + q] += o[q]; }' : ''}
}`;
}

/** FLOPs of one dispatch. */
const flopsOf = (c: ProbeCase, workgroups: number) =>
  workgroups * c.subgroups * c.steps * c.fm * c.fn * 2 * 16 * 16 * 16;

interface ProbeObjects {
  readonly src: GPUBuffer;
  readonly querySet: GPUQuerySet;
  readonly resolve: GPUBuffer;
  readonly read: GPUBuffer;
}

/** Microseconds of one dispatch of `c`'s probe, best of `reps` after one warm-up. */
async function timeProbe(
  device: GPUDevice,
  c: ProbeCase,
  { src, querySet, resolve, read }: ProbeObjects,
  workgroups: number,
  reps: number,
): Promise<number> {
  const dstBytes = Math.max(workgroups * c.subgroups * c.fm * c.fn * 256 * 4, workgroups * 32 * 8 * 4);
  const dst = device.createBuffer({ size: dstBytes, usage: GPUBufferUsage.STORAGE });
  try {
    device.pushErrorScope('validation');
    const module = device.createShaderModule({ code: probeShader(c) });
    const pipeline = await device.createComputePipelineAsync({
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
    });
    const bind = device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: src } },
        { binding: 1, resource: { buffer: dst } },
      ],
    });
    let best = Number.POSITIVE_INFINITY;
    for (let r = 0; r < reps + 1; r++) {
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass({
        timestampWrites: { querySet, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 },
      });
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bind);
      pass.dispatchWorkgroups(workgroups);
      pass.end();
      encoder.resolveQuerySet(querySet, 0, 2, resolve, 0);
      encoder.copyBufferToBuffer(resolve, 0, read, 0, 16);
      device.queue.submit([encoder.finish()]);
      await read.mapAsync(GPUMapMode.READ);
      const [t0, t1] = new BigUint64Array(read.getMappedRange().slice(0));
      read.unmap();
      if (r > 0) best = Math.min(best, Number(t1! - t0!) / 1e3);
    }
    const error = await device.popErrorScope();
    if (error) throw new Error(error.message);
    return best;
  } finally {
    dst.destroy();
  }
}

export async function matrixProbe(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      fragments: { type: 'string', default: '2x2,4x2,4x4' },
      probes: { type: 'string', default: PROBES.join(',') },
      subgroups: { type: 'string', default: '4' },
      steps: { type: 'string', default: '256' },
      workgroups: { type: 'string', default: '1056' },
      reps: { type: 'string', default: '5' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  // Dawn toggles from RAYO_DAWN_ENABLE / RAYO_DAWN_DISABLE (e.g. disable_robustness).
  const gpu = await requestWgpuDevice({ ...wgpuOptionsFromEnvironment(), unsafeApis: true });
  const { device } = gpu;
  console.log(`adapter: ${gpu.adapterInfo?.description ?? 'unknown'}`);
  console.log(`subgroup matrix configurations: ${JSON.stringify(gpu.subgroupMatrixConfigs)}`);
  if (!gpu.features.has('chromium-experimental-subgroup-matrix')) {
    console.error('this adapter has no subgroup matrices');
    return 1;
  }
  const workgroups = Number(values.workgroups);
  const steps = Number(values.steps);
  const subgroups = Number(values.subgroups);
  const reps = Number(values.reps);
  const src = device.createBuffer({
    size: 2 * GLOBAL_ROWS * GLOBAL_K * 2,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
  });
  const halves = new Uint16Array(2 * GLOBAL_ROWS * GLOBAL_K);
  for (let i = 0; i < halves.length; i++) halves[i] = 0x3000 + (i % 512); // small positive f16 values
  device.queue.writeBuffer(src, 0, halves);
  const querySet = device.createQuerySet({ type: 'timestamp', count: 2 });
  const resolve = device.createBuffer({
    size: 16,
    usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
  });
  const read = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const rows: string[] = ['| probe | fragments | TFLOP/s | µs |', '| --- | --- | --- | --- |'];
  for (const probe of values.probes.split(',') as Probe[]) {
    if (!PROBES.includes(probe)) throw new Error(`unknown probe ${probe}`);
    for (const grid of values.fragments.split(',')) {
      const [fm, fn] = grid.split('x').map(Number) as [number, number];
      const c: ProbeCase = { probe, fm, fn, subgroups, steps };
      let best: number;
      try {
        best = await timeProbe(device, c, { src, querySet, resolve, read }, workgroups, reps);
      } catch (error) {
        rows.push(
          `| ${probe} | ${fm}×${fn} | failed: ${String((error as Error).message).split('\n')[0]} | — |`,
        );
        console.log(rows.at(-1));
        continue;
      }
      const tflops = flopsOf(c, workgroups) / (best * 1e-6) / 1e12;
      rows.push(`| ${probe} | ${fm}×${fn} | ${tflops.toFixed(1)} | ${best.toFixed(1)} |`);
      console.log(rows.at(-1));
    }
  }
  console.log(`\n${subgroups} subgroups a workgroup, ${workgroups} workgroups, ${steps} steps\n`);
  console.log(rows.join('\n'));
  return 0;
}
