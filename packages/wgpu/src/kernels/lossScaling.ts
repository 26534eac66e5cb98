import { updateLossScale } from '@rayo/core';
import { wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { ShaderModule } from '../wgsl/module.js';

// GradScaler.update on the device: one invocation reads the norm of the
// scaled gradients and moves the scale, its count of finite steps and the
// optimizer's step number, so that a recorded step replays with no readback.

const LOSS_SCALE_PARAMS = paramLayout([
  ['growthFactor', 'f32'],
  ['backoffFactor', 'f32'],
  ['growthInterval', 'i32'],
] as const);

function lossScaleShader(withStep: boolean): ShaderSource {
  return {
    key: `optimizer/updateLossScale${withStep ? '/step' : ''}`,
    kernel: 'updateLossScale',
    code: () => {
      const module = new ShaderModule().params(LOSS_SCALE_PARAMS);
      module.storage('gradNorm', 'f32', 'read');
      module.storage('scale', 'f32', 'read_write');
      module.storage('growth', 'i32', 'read_write');
      if (withStep) module.storage('step', 'i32', 'read_write');
      return module.build(
        undefined,
        1,
        `  // Exponent bits all ones: inf or NaN (tested on the bits, since WGSL lets a compiler assume floats are finite).
  let finite = (bitcast<u32>(gradNorm[0]) & 0x7f800000u) != 0x7f800000u;
  if (!finite) {
    scale[0] = scale[0] * params.backoffFactor;
    growth[0] = 0;
  } else if (growth[0] + 1 >= params.growthInterval) {
    let grown = scale[0] * params.growthFactor;
    // A scale that would overflow stays where it is (the count restarts all the same, as in PyTorch).
    if ((bitcast<u32>(grown) & 0x7f800000u) != 0x7f800000u) { scale[0] = grown; }
    growth[0] = 0;
  } else {
    growth[0] = growth[0] + 1;
  }${withStep ? '\n  if (finite) { step[0] = step[0] + 1; }' : ''}`,
      );
    },
  };
}

export const lossScaleKernel = wgpuKernel(updateLossScale, (encoder, { inputs, attrs }) => {
  const [gradNorm, scale, growth, step] = inputs;
  encoder.dispatch({
    shader: lossScaleShader(step !== undefined),
    buffers: [gradNorm!, scale!, growth!, ...(step ? [step] : [])],
    params: {
      layout: LOSS_SCALE_PARAMS,
      values: {
        growthFactor: attrs.growthFactor,
        backoffFactor: attrs.backoffFactor,
        growthInterval: attrs.growthInterval,
      },
    },
    workgroups: [1, 1, 1],
  });
});
