// NCCL, loaded at run time (dlopen), only when a context spans several CUDA
// devices: the library itself never links it, so it loads and runs where
// NCCL is absent (issue 19), and a context that needs it says so with
// QSP_ERR_UNSUPPORTED naming the library it looked for and why it failed.
//
// Plain C++ with NCCL's types as the ABI has them (ncclComm_t, cudaStream_t
// are pointers, ncclResult_t / ncclDataType_t / ncclRedOp_t are C enums,
// ncclUniqueId a 128-byte struct passed by value), so neither nccl.h nor the
// CUDA headers are needed to build or to test it (tests/test_nccl_lib.cpp
// loads stand-in libraries built from tests/support/fake_nccl.c).
#pragma once

#include <memory>
#include <string>

namespace qsp {

struct NcclUniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};

// ncclDataType_t / ncclRedOp_t values the backend uses (nccl.h, stable since 2.0).
constexpr int kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclSum = 0;

struct NcclLib {
  std::string path;  // what dlopen was given
  int version = 0;   // major * 10000 + minor * 100 + patch
  std::shared_ptr<void> handle;

  int (*get_version)(int* version) = nullptr;
  const char* (*get_error_string)(int result) = nullptr;
  int (*get_unique_id)(NcclUniqueId* id) = nullptr;
  int (*comm_init_rank)(void** comm, int nranks, NcclUniqueId id, int rank) = nullptr;
  int (*comm_init_all)(void** comms, int ndev, const int* devlist) = nullptr;
  int (*comm_destroy)(void* comm) = nullptr;
  int (*all_reduce)(const void* send, void* recv, size_t count, int dtype, int op, void* comm,
                    void* stream) = nullptr;
  int (*all_gather)(const void* send, void* recv, size_t send_count, int dtype, void* comm, void* stream) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;

  // "NCCL 2.23.4 (libnccl.so.2)"
  std::string describe() const;
};

// The oldest NCCL qsp accepts: 2.9, the first whose ncclGetVersion code is
// major * 10000 + minor * 100 + patch (older ones say major * 1000 + ...;
// every entry point above exists since 2.0, but nothing older than 2.9 has
// been tried with qsp).
constexpr int kNcclMinVersion = 20900;

// Loads NCCL from `path` (a name for the loader's search, or a file), resolves
// every entry point above and checks the version. Throws
// Error(QSP_ERR_UNSUPPORTED) naming the path and what failed (dlopen's
// message, the missing symbol, the version). Not cached: each call loads.
NcclLib load_nccl(const std::string& path);

// The process's NCCL: QSP_NCCL_LIBRARY if set, else "libnccl.so.2" (Debian's
// libnccl2, NVIDIA's packages), loaded at the first call and kept (per path;
// a failure is not remembered, so installing NCCL needs no restart).
// Thread-safe; throws as load_nccl does.
const NcclLib& nccl();

}  // namespace qsp
