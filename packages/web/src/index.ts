export { TextModelWorker, type WorkerGeneration, type WorkerLoadCall } from './client.js';
export { type CachedModel, type CachedOpenerOptions, MODEL_CACHE_FOLDER, ModelCache } from './modelCache.js';
export type { OpfsDirectory, OpfsFileHandle, OpfsWritable } from './opfs.js';
export {
  OpfsPreparedWeights,
  PREPARED_DATA,
  PREPARED_INDEX,
  PreparedDataError,
} from './preparedStore.js';
export type * from './protocol.js';
export { type ServeTextModelOptions, serveTextModel } from './server.js';
