/* A stand-in for libnccl.so.2 with NCCL's entry points and ABI, for the
 * loader's tests (tests/test_nccl_lib.cpp): it does nothing but answer
 * ncclGetVersion with $FAKE_NCCL_VERSION (default 22304, i.e. 2.23.4).
 * Built twice: whole, and with FAKE_NCCL_NO_ALLREDUCE (a library missing an
 * entry point). */
#include <stddef.h>
#include <stdlib.h>

typedef struct {
  char internal[128];
} ncclUniqueId;

int ncclGetVersion(int* version) {
  const char* v = getenv("FAKE_NCCL_VERSION");
  if (v && atoi(v) < 0) return 5; /* ncclInvalidUsage */
  *version = v ? atoi(v) : 22304;
  return 0;
}
const char* ncclGetErrorString(int result) { return result ? "invalid usage (fake)" : "no error"; }
int ncclGetUniqueId(ncclUniqueId* id) { return id ? 0 : 4; }
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank) {
  (void)comm, (void)nranks, (void)id, (void)rank;
  return 5;
}
int ncclCommInitAll(void** comms, int ndev, const int* devlist) {
  (void)comms, (void)ndev, (void)devlist;
  return 5;
}
int ncclCommDestroy(void* comm) { return comm ? 0 : 4; }
#ifndef FAKE_NCCL_NO_ALLREDUCE
int ncclAllReduce(const void* send, void* recv, size_t count, int dtype, int op, void* comm, void* stream) {
  (void)send, (void)recv, (void)count, (void)dtype, (void)op, (void)comm, (void)stream;
  return 5;
}
#endif
int ncclAllGather(const void* send, void* recv, size_t count, int dtype, void* comm, void* stream) {
  (void)send, (void)recv, (void)count, (void)dtype, (void)comm, (void)stream;
  return 5;
}
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
