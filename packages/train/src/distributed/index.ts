export {
  DataParallel,
  type DataParallelOptions,
  DEFAULT_BUCKET_BYTES,
  type GradientBucket,
  shardIndices,
  shardRange,
} from './dataParallel.js';
export { MIN_CUT_KERNELS } from './forwardCuts.js';
export { LAUNCH_USAGE, launchCli } from './launchCli.js';
export { LaunchError, type LaunchOptions, launchDataParallel, type RankExit } from './launcher.js';
export {
  joinRendezvous,
  leaveRendezvous,
  RANK_ENV,
  type RankEnvironment,
  rankEnvironment,
  watchPeers,
} from './rendezvous.js';
export { ReplayedDataParallelStep, type ReplayedDataParallelStepOptions } from './replayedStep.js';
export { FLAT_ALIGN, ShardedAdamW, type ShardedAdamWOptions } from './shardedAdamW.js';
export { type DataParallelStepOptions, dataParallelStep } from './step.js';
export { TcpStore, type TcpStoreOptions, TcpStoreServer, type TcpStoreServerOptions } from './tcpStore.js';
