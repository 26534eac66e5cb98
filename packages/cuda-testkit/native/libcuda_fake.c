/*
 * A stand-in for libcuda with the driver API's C signatures, so that the koffi
 * binding (argument types, out-parameters, the JIT option arrays and the
 * kernelParams pointer table) is exercised natively on machines without a
 * GPU. Device memory is host memory. Built and loaded by libcuda.test.ts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *handle;

static int current_set = 0;
static void *current_ctx = 0;
static uint64_t fake_handles = 0x1000;

/* The last launch, for the test to read back. */
static unsigned int last_dims[7];
static void *last_stream = 0;
static int expected_count = 0;
static int expected_sizes[64];
static unsigned char last_values[64 * 8];
static uint64_t last_pointers[64];
static int last_capture_mode = -1;
static unsigned long long last_instantiate_flags = 99;
static unsigned int last_memset_value = 0;

CUresult cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }
CUresult cuDeviceGetCount(int *count) { *count = 2; return 0; }
CUresult cuDeviceGet(int *device, int ordinal) {
  if (ordinal < 0 || ordinal > 1) return 101;
  *device = 10 + ordinal;
  return 0;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
  snprintf(name, (size_t)len, "Fake GPU %d", dev);
  return 0;
}
CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
  *value = attribute * 1000 + dev;
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  (void)dev;
  *bytes = (size_t)80 << 30; /* beyond 32 bits on purpose */
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  *ctx = (void *)(uintptr_t)(0xC0DE0000u + (unsigned)dev);
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; current_set = 1; return 0; }
CUresult cuCtxSynchronize(void) { return current_set ? 0 : 201; }

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned int n, int *options, void **values) {
  char *error_log = 0, *info_log = 0;
  size_t error_size = 0, info_size = 0;
  for (unsigned int i = 0; i < n; i++) {
    switch (options[i]) {
      case 3: info_log = (char *)values[i]; break;
      case 4: info_size = (size_t)(uintptr_t)values[i]; break;
      case 5: error_log = (char *)values[i]; break;
      case 6: error_size = (size_t)(uintptr_t)values[i]; break;
      default: return 1;
    }
  }
  if (strstr((const char *)image, "BROKEN")) {
    if (error_log && error_size) snprintf(error_log, error_size, "ptxas application ptx input, line 3; error: BROKEN (%zu)", error_size);
    return 218;
  }
  if (info_log && info_size) snprintf(info_log, info_size, "info: %zu bytes of PTX", strlen((const char *)image));
  *module = (void *)(uintptr_t)(fake_handles += 0x10);
  return 0;
}
CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
  if (!module) return 400;
  if (strcmp(name, "missing") == 0) return 500;
  *fn = (void *)(uintptr_t)(0xF000 + strlen(name));
  return 0;
}
CUresult cuModuleUnload(void *module) { return module ? 0 : 400; }
CUresult cuFuncSetAttribute(void *fn, int attribute, int value) { return fn && attribute == 8 && value > 0 ? 0 : 1; }

CUresult cuMemAlloc_v2(uint64_t *ptr, size_t bytes) {
  if (bytes > ((size_t)1 << 40)) return 2;
  void *p = calloc(1, bytes);
  if (!p) return 2;
  *ptr = (uint64_t)(uintptr_t)p;
  return 0;
}
CUresult cuMemFree_v2(uint64_t ptr) { free((void *)(uintptr_t)ptr); return 0; }
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  *free_bytes = (size_t)70 << 30;
  *total = (size_t)80 << 30;
  return 0;
}
CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) { memcpy((void *)(uintptr_t)dst, src, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) { memcpy(dst, (void *)(uintptr_t)src, n); return 0; }
CUresult cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
  memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *stream) {
  last_stream = stream;
  return cuMemcpyHtoD_v2(dst, src, n);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *stream) {
  last_stream = stream;
  return cuMemcpyDtoH_v2(dst, src, n);
}
CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *stream) {
  last_stream = stream;
  return cuMemcpyDtoD_v2(dst, src, n);
}
CUresult cuMemsetD32_v2(uint64_t dst, unsigned int value, size_t n) {
  unsigned int *p = (unsigned int *)(uintptr_t)dst;
  for (size_t i = 0; i < n; i++) p[i] = value;
  last_memset_value = value;
  return 0;
}
CUresult cuMemsetD32Async(uint64_t dst, unsigned int value, size_t n, void *stream) {
  last_stream = stream;
  return cuMemsetD32_v2(dst, value, n);
}

CUresult cuStreamCreate(void **stream, unsigned int flags) {
  *stream = (void *)(uintptr_t)(0x5000 + flags);
  return 0;
}
CUresult cuStreamDestroy_v2(void *stream) { return stream ? 0 : 400; }
CUresult cuStreamSynchronize(void *stream) { last_stream = stream; return 0; }
CUresult cuStreamQuery(void *stream) { last_stream = stream; return 0; }
CUresult cuEventCreate(void **event, unsigned int flags) {
  *event = (void *)(uintptr_t)(0xE000 + flags + (fake_handles += 0x10));
  return 0;
}
CUresult cuEventRecord(void *event, void *stream) { last_stream = stream; return event ? 0 : 400; }
CUresult cuEventSynchronize(void *event) { return event ? 0 : 400; }
CUresult cuEventQuery(void *event) { return event ? 0 : 400; }
/* Only the original symbol, as older drivers export: the binding must fall back to it. */
CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
  if (!start || !end) return 400;
  *ms = 1.5f;
  return 0;
}
CUresult cuEventDestroy_v2(void *event) { return event ? 0 : 400; }
CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) { last_stream = stream; return event && flags == 0 ? 0 : 400; }

void fake_expect_params(int count, const int *sizes) {
  expected_count = count;
  for (int i = 0; i < count && i < 64; i++) expected_sizes[i] = sizes[i];
}
CUresult cuLaunchKernel(void *fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, void *stream, void **params, void **extra) {
  if (!fn || extra) return 1;
  last_dims[0] = gx; last_dims[1] = gy; last_dims[2] = gz;
  last_dims[3] = bx; last_dims[4] = by; last_dims[5] = bz;
  last_dims[6] = shared;
  last_stream = stream;
  memset(last_values, 0, sizeof last_values);
  for (int i = 0; i < expected_count; i++) {
    last_pointers[i] = (uint64_t)(uintptr_t)params[i];
    memcpy(last_values + 8 * i, params[i], (size_t)expected_sizes[i]);
  }
  return 0;
}
void fake_last_launch(unsigned int *dims, unsigned char *values, uint64_t *pointers) {
  memcpy(dims, last_dims, sizeof last_dims);
  memcpy(values, last_values, (size_t)expected_count * 8);
  memcpy(pointers, last_pointers, (size_t)expected_count * 8);
}
uint64_t fake_last_stream(void) { return (uint64_t)(uintptr_t)last_stream; }
uint64_t fake_current_context(void) { return (uint64_t)(uintptr_t)current_ctx; }
int fake_last_capture_mode(void) { return last_capture_mode; }
unsigned long long fake_last_instantiate_flags(void) { return last_instantiate_flags; }
unsigned int fake_last_memset_value(void) { return last_memset_value; }

CUresult cuStreamBeginCapture_v2(void *stream, int mode) { last_stream = stream; last_capture_mode = mode; return 0; }
CUresult cuStreamEndCapture(void *stream, void **graph) {
  last_stream = stream;
  *graph = (void *)(uintptr_t)0x6000;
  return 0;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
  if (graph != (void *)(uintptr_t)0x6000) return 400;
  last_instantiate_flags = flags;
  *exec = (void *)(uintptr_t)0x7000;
  return 0;
}
CUresult cuGraphLaunch(void *exec, void *stream) { last_stream = stream; return exec == (void *)(uintptr_t)0x7000 ? 0 : 400; }
CUresult cuGraphExecDestroy(void *exec) { return exec ? 0 : 400; }
CUresult cuGraphDestroy(void *graph) { return graph ? 0 : 400; }

CUresult cuGetErrorName(CUresult code, const char **name) {
  switch (code) {
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 218: *name = "CUDA_ERROR_INVALID_PTX"; return 0;
    default: *name = 0; return 1;
  }
}
CUresult cuGetErrorString(CUresult code, const char **text) {
  switch (code) {
    case 2: *text = "out of memory"; return 0;
    case 218: *text = "a PTX JIT compilation failed"; return 0;
    default: *text = 0; return 1;
  }
}

/*
 * A tiled tensor map: 0 unless the map is 64-byte aligned and the arrays are
 * readable; writes back dtype, rank, address, the dims, strides (rank - 1),
 * box, element strides and the four enums as 64-bit words, so that the test
 * sees every argument as it arrived.
 */
CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned int rank, void *address, const uint64_t *dims,
                                const uint64_t *strides, const unsigned int *box, const unsigned int *element_strides,
                                int interleave, int swizzle, int l2, int oob) {
  if (((uintptr_t)map & 63) != 0) return 1;
  if (rank < 1 || rank > 5) return 1;
  uint64_t *out = (uint64_t *)map;
  memset(out, 0, 128);
  out[0] = (uint64_t)dtype;
  out[1] = rank;
  out[2] = (uint64_t)(uintptr_t)address;
  out[3] = dims[rank - 1];
  out[4] = rank > 1 ? strides[rank - 2] : 0;
  out[5] = box[0];
  out[6] = box[rank - 1];
  out[7] = element_strides[rank - 1];
  out[8] = ((uint64_t)interleave << 48) | ((uint64_t)swizzle << 32) | ((uint64_t)l2 << 16) | (uint64_t)oob;
  out[9] = dims[0];
  return 0;
}
