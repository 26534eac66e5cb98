export { ApiError, type ApiErrorType } from './api/apiError.js';
export {
  type CompletionKind,
  type CompletionRequest,
  parseCompletionRequest,
} from './api/completionRequest.js';
export { BatchedEngine, type BatchedEngineOptions, type BatchedSequence } from './engine/batchedEngine.js';
export type {
  DecodeEngine,
  EngineUsage,
  PageUsage,
  SequenceRequest,
  StepResult,
} from './engine/decodeEngine.js';
export { ModelSlotsEngine, type SlotSequence } from './engine/modelSlotsEngine.js';
export { ModelServer, type ModelServerOptions } from './http/modelServer.js';
export type { ServerLimits } from './http/serverLimits.js';
export { type SchedulerGauges, ServerMetrics } from './metrics/serverMetrics.js';
export {
  ScheduledSequence,
  Scheduler,
  type SchedulerLimits,
  type SchedulerObserver,
  type SequenceEnd,
} from './scheduler/scheduler.js';
export { type RefusalReason, SchedulerRefusal, SequenceCancelled } from './scheduler/schedulerErrors.js';
