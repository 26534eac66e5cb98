/*
 * A stand-in for libnccl with NCCL's C signatures, so that the koffi binding
 * (the unique id passed by value, the ncclConfig_t layout, out-parameters,
 * pointers and size_t counts) is exercised natively on machines without a
 * GPU. Every call appends a line to a log that the test reads back through
 * fake_nccl_log(). Built and loaded by libnccl.test.ts.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
} ncclConfig_v21400;
typedef void *ncclComm_t;

#define COMM ((void *)0xc0ffee)
static char log_text[4096];
static char last_error[128];
static int async_polls = 0;

static void note(const char *line) {
  strncat(log_text, line, sizeof(log_text) - strlen(log_text) - 2);
  strcat(log_text, "\n");
}

const char *fake_nccl_log(void) { return log_text; }

int ncclGetVersion(int *version) { *version = 22304; return 0; }

int ncclGetUniqueId(ncclUniqueId *id) {
  for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 3 + 1);
  return 0;
}

int ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_v21400 *config) {
  char line[256];
  int valid = config->size == sizeof(ncclConfig_v21400) && config->magic == 0xcafebeef &&
              config->version == 21400 && config->cgaClusterSize == INT_MIN && config->minCTAs == INT_MIN &&
              config->maxCTAs == INT_MIN && config->netName == NULL;
  snprintf(line, sizeof line, "init nranks=%d rank=%d id[0]=%d id[127]=%d blocking=%d config=%s", nranks, rank,
           (unsigned char)id.internal[0], (unsigned char)id.internal[127], config->blocking, valid ? "ok" : "bad");
  note(line);
  if (!valid) return 4;
  *comm = COMM;
  return 7;
}

int ncclCommGetAsyncError(ncclComm_t comm, int *result) {
  if (comm != COMM) return 4;
  *result = async_polls++ == 0 ? 7 : 0;
  return 0;
}

static int collective(const char *name, const void *send, void *recv, size_t count, int dtype, int extra,
                      ncclComm_t comm, void *stream) {
  char line[256];
  snprintf(line, sizeof line, "%s send=%p recv=%p count=%zu dtype=%d extra=%d comm=%p stream=%p", name, send, recv,
           count, dtype, extra, comm, stream);
  note(line);
  if (count == 0) {
    snprintf(last_error, sizeof last_error, "%s: count must be positive", name);
    return 4;
  }
  return comm == COMM ? 0 : 4;
}

int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  return collective("allReduce", s, r, n, t, op, c, st);
}
int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, void *st) {
  return collective("broadcast", s, r, n, t, root, c, st);
}
int ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, void *st) {
  return collective("allGather", s, r, n, t, -1, c, st);
}
int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  return collective("reduceScatter", s, r, n, t, op, c, st);
}
int ncclGroupStart(void) { note("groupStart"); return 0; }
int ncclGroupEnd(void) { note("groupEnd"); return 0; }
int ncclCommAbort(ncclComm_t c) { note("abort"); return c == COMM ? 0 : 4; }
int ncclCommFinalize(ncclComm_t c) { note("finalize"); return c == COMM ? 0 : 4; }
int ncclCommDestroy(ncclComm_t c) { note("destroy"); return c == COMM ? 0 : 4; }
const char *ncclGetErrorString(int result) { return result == 4 ? "invalid argument" : "other"; }
const char *ncclGetLastError(ncclComm_t c) { (void)c; return last_error; }
