export {
  type LibNccl,
  libNccl,
  loadLibNccl,
  NCCL_DATA_TYPE,
  NCCL_RED_OP,
  NCCL_RESULT,
  NCCL_UNIQUE_ID_BYTES,
  type NcclOut,
  type NcclResult,
} from './libnccl.js';
export { NcclCommunicator, type NcclCommunicatorOptions } from './ncclCommunicator.js';
