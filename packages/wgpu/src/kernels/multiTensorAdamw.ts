import {
  ADAMW_MOMENT_CONSTANTS,
  adamwMomentConstants,
  FLOAT,
  MULTI_ADAMW_FIXED,
  multiTensorAdamw,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { gridFor, linearWorkgroup, wgpuKernel } from '../kernel.js';
import { type ParamLayout, type ParamType, paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { bindingType, halfFunctions, loadScalar, type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { WG } from './common.js';
import { EXPM1 } from './inPlaceUpdate.js';

// WebGPU has no pointers: each tensor's param, grad, m and v are four storage
// bindings, so one dispatch updates as many tensors as the device's
// maxStorageBuffersPerShaderStage leaves room for (after the device step, lr
// and norm, and the loss scale), at most MULTI_SLOTS. Workgroup w updates chunk w − first of the
// tensor whose range of workgroups holds w; the shader has one loop per
// tensor, since a binding cannot be chosen at run time.

/** Elements per workgroup. */
export const MULTI_CHUNK = 4 * WG;
/** Most tensors per dispatch, wherever the binding limit is higher: keeps the shader small. */
export const MULTI_SLOTS = 64;

const MULTI_CONSTANTS = [...ADAMW_MOMENT_CONSTANTS, 'step', 'lr', 'maxNorm', 'clipEps'] as const;

/** Which per-step values the shader reads from device tensors. */
export interface MultiAdamwDevice {
  readonly step: boolean;
  readonly lr: boolean;
  readonly norm: boolean;
  /** The gradients carry a loss scale (read from a device tensor): unscaled in the clip factor, the step skipped on a non-finite norm. */
  readonly lossScale?: boolean;
}

/** Storage bindings beside the tensors': the device step, lr, norm and loss scale that are given. */
function extraBindings(device: MultiAdamwDevice): number {
  return Number(device.step) + Number(device.lr) + Number(device.norm) + Number(device.lossScale ?? false);
}

/** Tensors per dispatch on a device with `maxStorageBuffers` storage bindings per stage. */
export function multiAdamwSlots(maxStorageBuffers: number, device: MultiAdamwDevice): number {
  return Math.min(MULTI_SLOTS, Math.floor((maxStorageBuffers - extraBindings(device)) / 4));
}

const multiLayouts = new Map<number, ParamLayout<string>>();

/** The constants, the workgroup count, then each tensor's size, first workgroup and weight decay. */
function multiLayout(slots: number): ParamLayout<string> {
  let layout = multiLayouts.get(slots);
  if (!layout) {
    const fields: [string, ParamType][] = [
      ...MULTI_CONSTANTS.map((name): [string, ParamType] => [name, 'f32']),
    ];
    fields.push(['workgroups', 'u32']);
    for (let s = 0; s < slots; s++) fields.push([`n${s}`, 'u32'], [`first${s}`, 'u32'], [`wd${s}`, 'f32']);
    layout = paramLayout(fields);
    multiLayouts.set(slots, layout);
  }
  return layout;
}

/**
 * WGSL of `scale`, what each gradient is multiplied by: min(1, maxNorm /
 * (norm + clipEps)), without dividing by a zero norm + clipEps; with
 * `unscale`, the norm is the scaled gradients' and both the norm and the
 * factor are divided by the loss scale.
 */
function clipFactor(unscale: boolean): string {
  const denom = unscale
    ? `let unscale = 1.0 / lossScaleAt[0];
  let denom = normAt[0] * unscale + params.clipEps;`
    : 'let denom = normAt[0] + params.clipEps;';
  return `${denom}
  let scale = select(1.0, params.maxNorm / denom, denom > params.maxNorm)${unscale ? ' * unscale' : ''};`;
}

/** `grad`: how every gradient is stored (one dtype for all); halves are widened as read. */
export function multiAdamwShader(
  slots: number,
  device: MultiAdamwDevice,
  grad: Storage = 'f32',
): ShaderSource {
  const unscale = device.norm && device.lossScale === true;
  const at = `${device.step ? '/step-at' : ''}${device.lr ? '/lr-at' : ''}${device.norm ? '/clip' : ''}${unscale ? '/unscale' : ''}`;
  const extra: [string, 'i32' | 'f32'][] = [];
  if (device.step) extra.push(['stepAt', 'i32']);
  if (device.lr) extra.push(['lrAt', 'f32']);
  if (device.norm) extra.push(['normAt', 'f32']);
  if (unscale) extra.push(['lossScaleAt', 'f32']);
  const tensors = Array.from({ length: slots }, (_, s) => s);
  return {
    key: `optimizer/multiTensorAdamw/slots${slots}/wg${WG}${at}${grad === 'f32' ? '' : `/grad-${grad}`}`,
    kernel: 'multiTensorAdamw',
    code: () => {
      const module = new ShaderModule().params(multiLayout(slots));
      for (const s of tensors) {
        module.storage(`p${s}`, 'f32', 'read_write');
        module.storage(`g${s}`, bindingType(grad, false), 'read');
        module.storage(`m${s}`, 'f32', 'read_write');
        module.storage(`v${s}`, 'f32', 'read_write');
      }
      for (const [name, type] of extra) module.storage(name, type, 'read');
      module.declare(EXPM1);
      module.declare(halfFunctions(grad));
      return module.build(
        undefined,
        WG,
        `  let w = ${linearWorkgroup};
  if (w >= params.workgroups) { return; }
  // The last tensor whose first workgroup is at most w.
  var slot = 0u;
  var first = params.first0;
  var n = params.n0;
  var wd = params.wd0;
${tensors
  .slice(1)
  .map(
    (s) =>
      `  if (w >= params.first${s}) { slot = ${s}u; first = params.first${s}; n = params.n${s}; wd = params.wd${s}; }`,
  )
  .join('\n')}
${
  unscale
    ? `  // Exponent bits all ones: the norm is inf or NaN (some gradient overflowed), and the step is skipped.
  // Tested on the bits, since WGSL lets a compiler assume floats are finite.
  if ((bitcast<u32>(normAt[0]) & 0x7f800000u) == 0x7f800000u) { return; }
`
    : ''
}  let t = ${device.step ? 'f32(stepAt[0])' : 'params.step'};
  let lr = ${device.lr ? 'lrAt[0]' : 'params.lr'};
  let stepSize = lr / -expm1(t * params.logBeta1);
  let rootCorrection = 1.0 / sqrt(-expm1(t * params.logBeta2));
  let decay = 1.0 - lr * wd;
  ${device.norm ? clipFactor(unscale) : ''}
  let start = (w - first) * ${MULTI_CHUNK}u;
  let end = min(n, start + ${MULTI_CHUNK}u);
  switch slot {
${tensors
  .map(
    (s) => `    case ${s}u: {
      for (var i = start + lid.x; i < end; i += ${WG}u) {
        let g = ${loadScalar(grad, `g${s}`, 'i')}${device.norm ? ' * scale' : ''};
        let m = params.beta1 * m${s}[i] + params.oneMinusBeta1 * g;
        let v = params.beta2 * v${s}[i] + params.oneMinusBeta2 * g * g;
        m${s}[i] = m;
        v${s}[i] = v;
        p${s}[i] = p${s}[i] * decay - stepSize * m / (sqrt(v) * rootCorrection + params.eps);
      }
    }`,
  )
  .join('\n')}
    default: {}
  }`,
      );
    },
  };
}

export const multiAdamwKernel = wgpuKernel(
  multiTensorAdamw,
  (encoder, { inputs, attrs }) => {
    const [stepAt, lrAt, normAt, lossScaleAt] = inputs;
    const device = {
      step: stepAt !== undefined,
      lr: lrAt !== undefined,
      norm: normAt !== undefined,
      lossScale: lossScaleAt !== undefined,
    };
    const maxBuffers = encoder.limits.maxStorageBuffersPerShaderStage;
    const slots = multiAdamwSlots(maxBuffers, device);
    if (slots < 1) {
      throw new UnsupportedOnBackendError('the device binds too few storage buffers per shader stage', {
        operation: 'multiTensorAdamw',
        argument: 'tensors',
        expected: `maxStorageBuffersPerShaderStage >= ${4 + extraBindings(device)}`,
        actual: String(maxBuffers),
      });
    }
    const { weightDecay } = attrs;
    const base: Record<string, number> = {
      ...adamwMomentConstants(attrs),
      step: attrs.step,
      lr: attrs.lr,
      maxNorm: attrs.maxNorm,
      clipEps: attrs.clipEps,
    };
    const tensors = inputs.slice(MULTI_ADAMW_FIXED).map((t) => t!);
    const grad = storageOf(tensors[1]?.dtype ?? 'f32');
    // Empty tensors have nothing to update and cannot be bound.
    const live = Array.from({ length: tensors.length / 4 }, (_, j) => j).filter(
      (j) => tensors[4 * j]!.size > 0,
    );
    const dispatches = Math.ceil(live.length / slots);
    // As even as possible, so that one pipeline serves every dispatch.
    const per = Math.ceil(live.length / Math.max(1, dispatches));
    for (let from = 0; from < live.length; from += per) {
      const group = live.slice(from, from + per);
      const values = { ...base };
      let workgroups = 0;
      group.forEach((j, s) => {
        values[`n${s}`] = tensors[4 * j]!.size;
        values[`first${s}`] = workgroups;
        values[`wd${s}`] = weightDecay.length === 1 ? weightDecay[0]! : weightDecay[j]!;
        workgroups += Math.ceil(tensors[4 * j]!.size / MULTI_CHUNK);
      });
      values.workgroups = workgroups;
      encoder.dispatch({
        shader: multiAdamwShader(group.length, device, grad),
        buffers: [
          ...group.flatMap((j) => tensors.slice(4 * j, 4 * j + 4)),
          ...[stepAt, lrAt, normAt, lossScaleAt].filter((t) => t !== undefined),
        ],
        params: { layout: multiLayout(group.length), values },
        workgroups: gridFor(workgroups, encoder.limits),
      });
    }
  },
  { dtypes: FLOAT },
);
