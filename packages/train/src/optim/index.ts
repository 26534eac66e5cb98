export { AdamW, type AdamWOptions, type DeviceClip, type DeviceLossScale } from './adamw.js';
export { type ClipOptions, clipGradNorm, gradNorm, NO_CLIP } from './clip.js';
export { LossScaler, type LossScalerOptions } from './lossScaler.js';
export { type HostTensor, Optimizer, type ParameterList, type StoredState } from './optimizer.js';
export { constantLr, type LrSchedule, type WarmupCosineOptions, warmupCosine } from './schedule.js';
export { SGD, type SgdOptions } from './sgd.js';
