import {
  PART_CHECKSUM_BLOCK_BYTES,
  PART_CHECKSUM_LANES,
  PART_CHECKSUM_PRIME,
  partChecksumBlocks,
  partChecksumOfBlocks,
  RayoError,
} from '@rayo/core';
import type { GPUBuffer, GPUComputePipeline, GPUDevice } from './webgpuTypes.js';

// Core's part checksum (`partChecksumReference`) of byte ranges already on
// the device: a model cache's prepared weights are checked where they land,
// so that the host only reads and copies them. One workgroup per 64 KiB
// block: its threads stage a tile of words in workgroup memory, 32 of them
// run the 32 lanes over it (word i of the block into lane i mod 32), and
// thread 0 folds the lanes into the block's word. The host chains the
// blocks' words (a few thousand for a model). A part larger than one
// binding is bound window by window, each a whole number of blocks.

const TILE_WORDS = 2048;
const WORKGROUP = 256;
const BLOCK_WORDS = PART_CHECKSUM_BLOCK_BYTES / 4;
/** Bytes of one dispatch's uniforms (the usual minUniformBufferOffsetAlignment). */
const PARAMS_STRIDE = 256;

const SHADER = /* wgsl */ `
struct Params { words: u32, window_bytes: u32, first_block: u32 }
@group(0) @binding(0) var<storage, read> data: array<u32>;
@group(0) @binding(1) var<storage, read_write> blocks: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;
var<workgroup> tile: array<u32, ${TILE_WORDS}>;
var<workgroup> lanes: array<u32, ${PART_CHECKSUM_LANES}>;
const PRIME = ${PART_CHECKSUM_PRIME}u;

@compute @workgroup_size(${WORKGROUP})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) block: vec3<u32>) {
  let start = block.x * ${BLOCK_WORDS}u;
  let to = min(start + ${BLOCK_WORDS}u, params.words);
  var s = 0u;
  if (t < ${PART_CHECKSUM_LANES}u) { s = (0x811c9dc5u ^ t) * PRIME; }
  for (var at = start; at < to; at += ${TILE_WORDS}u) {
    let n = min(${TILE_WORDS}u, to - at);
    for (var i = t; i < n; i += ${WORKGROUP}u) { tile[i] = data[at + i]; }
    workgroupBarrier();
    if (t < ${PART_CHECKSUM_LANES}u) {
      for (var i = t; i < n; i += ${PART_CHECKSUM_LANES}u) { s = (s ^ tile[i]) * PRIME; }
    }
    workgroupBarrier();
  }
  if (t < ${PART_CHECKSUM_LANES}u) { lanes[t] = s; }
  workgroupBarrier();
  if (t != 0u) { return; }
  let byte_end = min(start * 4u + ${PART_CHECKSUM_BLOCK_BYTES}u, params.window_bytes);
  let tail = byte_end - to * 4u;
  var first = lanes[0];
  if (tail > 0u) {
    let word = data[to];
    for (var b = 0u; b < tail; b++) { first = (first ^ ((word >> (8u * b)) & 255u)) * PRIME; }
  }
  var h = (byte_end - start * 4u) ^ (first * 3u);
  for (var j = 1u; j < ${PART_CHECKSUM_LANES}u; j++) { h = h ^ (lanes[j] * (2u * j + 3u)); }
  blocks[params.first_block + block.x] = (h ^ (h >> 15u)) * 0x2c1b3c6du;
}
`;

/** A byte range on the device: `bytes` from `offset` of `buffer`. */
export interface DeviceRange {
  readonly buffer: GPUBuffer;
  readonly offset: number;
  readonly bytes: number;
}

const pipelines = new WeakMap<GPUDevice, GPUComputePipeline>();

function pipelineOf(device: GPUDevice): GPUComputePipeline {
  let pipeline = pipelines.get(device);
  if (!pipeline) {
    const module = device.createShaderModule({ label: 'rayo part checksums', code: SHADER });
    pipeline = device.createComputePipeline({
      label: 'rayo part checksums',
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
    });
    pipelines.set(device, pipeline);
  }
  return pipeline;
}

/** One dispatch: a window of one part, a whole number of blocks within one binding. */
interface Window {
  readonly buffer: GPUBuffer;
  readonly offset: number;
  /** Bytes of the window that belong to the part. */
  readonly bytes: number;
  /** Where its first block's word goes. */
  readonly firstBlock: number;
}

function windowsOf(ranges: readonly DeviceRange[], maxBindingBytes: number, align: number): Window[] {
  // Whole blocks, at most one binding and one dispatch's workgroups.
  const windowBytes =
    Math.min(Math.floor(maxBindingBytes / PART_CHECKSUM_BLOCK_BYTES), 65535) * PART_CHECKSUM_BLOCK_BYTES;
  if (windowBytes === 0) {
    throw new RayoError('a storage binding is smaller than one checksum block', {
      operation: 'partChecksums',
      argument: 'maxBindingBytes',
      expected: `at least ${PART_CHECKSUM_BLOCK_BYTES}`,
      actual: String(maxBindingBytes),
    });
  }
  const windows: Window[] = [];
  let firstBlock = 0;
  ranges.forEach((range, slot) => {
    if (range.offset % align !== 0) {
      throw new RayoError('a part to checksum does not start where a storage binding may', {
        operation: 'partChecksums',
        argument: `parts[${slot}]`,
        expected: `an offset that is a multiple of ${align} (minStorageBufferOffsetAlignment)`,
        actual: String(range.offset),
      });
    }
    for (let start = 0; start < range.bytes; start += windowBytes) {
      const bytes = Math.min(windowBytes, range.bytes - start);
      windows.push({ buffer: range.buffer, offset: range.offset + start, bytes, firstBlock });
      firstBlock += partChecksumBlocks(bytes);
    }
  });
  return windows;
}

/**
 * The checksums (core's `partChecksumReference`) of byte ranges on `device`,
 * computed there: one submission after everything submitted before, one
 * readback. Each range starts at a multiple of the device's
 * `minStorageBufferOffsetAlignment`; its buffer holds its bytes rounded up to
 * whole words.
 */
export async function devicePartChecksums(
  device: GPUDevice,
  ranges: readonly DeviceRange[],
  maxBindingBytes: number,
): Promise<Uint32Array> {
  const results = new Uint32Array(ranges.length);
  const windows = windowsOf(ranges, maxBindingBytes, device.limits.minStorageBufferOffsetAlignment);
  const blockCount = ranges.reduce((n, r) => n + partChecksumBlocks(r.bytes), 0);
  const blockWords = blockCount > 0 ? await hashBlocks(device, windows, blockCount) : new Uint32Array(0);
  let at = 0;
  for (const [i, range] of ranges.entries()) {
    const n = partChecksumBlocks(range.bytes);
    results[i] = partChecksumOfBlocks(blockWords.subarray(at, at + n), range.bytes);
    at += n;
  }
  return results;
}

/** The words of every block of `windows`, in order: one submission, one readback. */
async function hashBlocks(
  device: GPUDevice,
  windows: readonly Window[],
  blockCount: number,
): Promise<Uint32Array> {
  const pipeline = pipelineOf(device);
  const blocksBytes = blockCount * 4;
  const blocks = device.createBuffer({
    label: 'rayo part checksums: blocks',
    size: blocksBytes,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
  });
  const params = device.createBuffer({
    label: 'rayo part checksums: params',
    size: windows.length * PARAMS_STRIDE,
    usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
  });
  const readback = device.createBuffer({
    label: 'rayo part checksums: readback',
    size: blocksBytes,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  try {
    const words = new Uint32Array((windows.length * PARAMS_STRIDE) / 4);
    windows.forEach((w, k) => {
      const at = (k * PARAMS_STRIDE) / 4;
      words[at] = Math.floor(w.bytes / 4);
      words[at + 1] = w.bytes;
      words[at + 2] = w.firstBlock;
    });
    device.pushErrorScope('validation');
    device.queue.writeBuffer(params, 0, words);
    const encoder = device.createCommandEncoder({ label: 'rayo part checksums' });
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    const layout = pipeline.getBindGroupLayout(0);
    windows.forEach((w, k) => {
      pass.setBindGroup(
        0,
        device.createBindGroup({
          layout,
          entries: [
            {
              binding: 0,
              resource: { buffer: w.buffer, offset: w.offset, size: Math.ceil(w.bytes / 4) * 4 },
            },
            { binding: 1, resource: { buffer: blocks } },
            { binding: 2, resource: { buffer: params, offset: k * PARAMS_STRIDE, size: 16 } },
          ],
        }),
      );
      pass.dispatchWorkgroups(partChecksumBlocks(w.bytes));
    });
    pass.end();
    encoder.copyBufferToBuffer(blocks, 0, readback, 0, blocksBytes);
    device.queue.submit([encoder.finish()]);
    const invalid = await device.popErrorScope();
    if (invalid) {
      throw new RayoError('the device refused the part checksums', {
        operation: 'partChecksums',
        argument: 'parts',
        expected: 'a valid checksum pass',
        actual: invalid.message,
      });
    }
    await readback.mapAsync(GPUMapMode.READ);
    const result = new Uint32Array(readback.getMappedRange().slice(0));
    readback.unmap();
    return result;
  } finally {
    blocks.destroy();
    params.destroy();
    readback.destroy();
  }
}
