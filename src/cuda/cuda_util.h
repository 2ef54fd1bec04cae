// The CUDA backend's host-side building blocks (src/cuda/cuda_backend.h and
// its three files): CUDA errors as qsp::Error, device and pinned buffers that
// free themselves (with the test-only device-memory cap), a weight tensor in
// the kernels' layout, and the per-device workspace of batched passes.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "engine/backend.h"
#include "kernels/kernels.h"

namespace qsp {
namespace cuda_impl {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so the context stays usable
  if (e == cudaErrorMemoryAllocation)
    throw Error(QSP_ERR_DEVICE_OUT_OF_MEMORY, strprintf("out of device memory: %s", what));
  throw Error(QSP_ERR_DEVICE, strprintf("CUDA error in %s: %s", what, cudaGetErrorString(e)));
}

#define QSP_CUDA_CHECK(expr)                     \
  do {                                           \
    cudaError_t qsp_e_ = (expr);                 \
    if (qsp_e_ != cudaSuccess) throw_cuda(qsp_e_, #expr); \
  } while (0)

// Fault injection for the tests: QSP_DEVICE_MEMORY_LIMIT=<bytes> caps what
// the CUDA backend holds at once (weights, KV caches, scratch, all contexts),
// so "out of device memory" at any allocation can be provoked on a big GPU.
// Read at every allocation, so a test can lower and raise it between calls.
inline std::atomic<uint64_t> g_device_bytes{0};

inline bool over_cap(size_t n) {
  const char* cap = std::getenv("QSP_DEVICE_MEMORY_LIMIT");
  if (!cap || !*cap) return false;
  return g_device_bytes.load() + n > std::strtoull(cap, nullptr, 10);
}

// Device memory that frees itself.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  void alloc(size_t n, const char* what) {
    release();
    if (over_cap(n)) throw_cuda(cudaErrorMemoryAllocation, what);
    cudaError_t e = cudaMalloc(&ptr, n ? n : 1);
    if (e != cudaSuccess) {
      ptr = nullptr;
      throw_cuda(e, what);
    }
    bytes = n;
    g_device_bytes += n;
  }
  void release() {
    if (!ptr) return;
    cudaFree(ptr);
    g_device_bytes -= bytes;
    ptr = nullptr;
    bytes = 0;
  }
};

template <class T>
T* as(const DeviceBuffer& b) { return static_cast<T*>(b.ptr); }

// Pinned host memory that frees itself.
struct PinnedBuffer {
  void* ptr = nullptr;
  ~PinnedBuffer() {
    if (ptr) cudaFreeHost(ptr);
  }
  void alloc(size_t n, const char* what) {
    if (ptr) cudaFreeHost(ptr);
    ptr = nullptr;
    cudaError_t e = cudaMallocHost(&ptr, n ? n : 1);
    if (e != cudaSuccess) {
      ptr = nullptr;
      if (e == cudaErrorMemoryAllocation) throw Error(QSP_ERR_OUT_OF_MEMORY, strprintf("pinned host memory: %s", what));
      throw_cuda(e, what);
    }
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() {
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
};

// A tensor on the device: one piece, or, for a slot a sharded backend cuts
// (Partition), a piece per shard holding that shard's rows / columns as a
// matrix of its own (so every kernel sees an ordinary weight); a context
// spanning devices also keeps a replicated slot as a piece per device.
class CudaTensor : public Tensor {
 public:
  struct Piece {
    int dev = 0;
    DeviceBuffer buf;
    kern::DWeight w;             // matrices
    const float* vec = nullptr;  // vectors (fp32)
  };
  CudaTensor(const TensorMeta& m, uint32_t n_pieces) : Tensor(m), n_pieces_(n_pieces), pieces_(new Piece[n_pieces]) {}
  ~CudaTensor() override {
    int prev = -1;
    cudaGetDevice(&prev);
    for (uint32_t i = 0; i < n_pieces_; ++i) {
      if (!pieces_[i].buf.ptr) continue;
      cudaSetDevice(pieces_[i].dev);
      pieces_[i].buf.release();
    }
    if (prev >= 0) cudaSetDevice(prev);
  }
  uint32_t n_pieces() const { return n_pieces_; }
  Piece& piece(uint32_t i) { return pieces_[i]; }
  // Shard s's piece: its own, or the one every shard shares.
  const Piece& shard(uint32_t s) const { return pieces_[n_pieces_ == 1 ? 0 : s]; }

 private:
  uint32_t n_pieces_;
  std::unique_ptr<Piece[]> pieces_;
};

inline const CudaTensor& cu(const TensorRef& t) { return static_cast<const CudaTensor&>(*t); }
// Shard s's weight of a matrix slot (the whole matrix for an unsplit one).
inline const kern::DWeight& W(const TensorRef& t, uint32_t s = 0) { return cu(t).shard(s).w; }
// Shard s's copy of a norm vector (nullptr for a slot the model lacks).
inline const float* V(const TensorRef& t, uint32_t s = 0) { return t ? cu(t).shard(s).vec : nullptr; }

// The activations and metadata of batched passes (qsp_prefill_batch), one set
// per device, shared by every context that leads a batch there: a server may
// lead with any of its contexts, and per-context buffers of up to
// kCudaChunk tokens each would multiply. Grown on demand, freed with the
// last context that used it; a pass holds `mu` from its first copy to its
// final synchronize.
struct BatchSpace {
  explicit BatchSpace(int device) : dev(device) {}
  ~BatchSpace() {
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(dev);
    for (DeviceBuffer* b : {&x, &xn, &qkv, &q, &att, &act, &logits, &meta}) b->release();
    if (prev >= 0) cudaSetDevice(prev);
  }
  // b holds at least n bytes afterwards (contents lost when it grows).
  static void ensure(DeviceBuffer& b, size_t n, const char* what) {
    if (b.bytes < n) b.alloc(n, what);
  }

  const int dev;
  std::mutex mu;
  DeviceBuffer x, xn, qkv, q, att, act, logits, meta;
  PinnedBuffer h_meta;
  size_t h_meta_bytes = 0;
};

inline std::shared_ptr<BatchSpace> batch_space(int dev) {
  static std::mutex mu;
  static std::vector<std::weak_ptr<BatchSpace>> spaces;
  std::lock_guard<std::mutex> lock(mu);
  if (spaces.size() <= size_t(dev)) spaces.resize(size_t(dev) + 1);
  std::shared_ptr<BatchSpace> sp = spaces[size_t(dev)].lock();
  if (!sp) {
    sp = std::make_shared<BatchSpace>(dev);
    spaces[size_t(dev)] = sp;
  }
  return sp;
}

}  // namespace cuda_impl
}  // namespace qsp
