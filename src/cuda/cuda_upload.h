// The CUDA backend's weight upload through pinned staging (used by
// src/cuda/cuda_backend.cu): a matrix is repacked into the kernels' layout piece by
// piece on all cores (kern::repack_weight_tiles), into a few pinned slots
// shared by the contexts of a device, each piece's asynchronous copy
// overlapping the next piece's repack.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "cpu/thread_pool.h"
#include "cuda/cuda_util.h"
#include "engine/backend.h"
#include "kernels/kernels.h"

namespace qsp {
namespace cuda_impl {

// Weight upload: pinned staging slots a matrix is repacked into, piece by
// piece, on all cores, each piece copied while the next is repacked.
constexpr int kStagingSlots = 3;
constexpr size_t kStagingSlotBytes = size_t(16) << 20;

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The upload's staging, one per device, shared by the contexts that upload
// there (as BatchSpace is: many contexts must not each hold threads and
// pinned memory): the repack threads and kStagingSlots pinned slots, each
// with the event recorded after its last copy. Made at the first matrix
// upload on the device, freed with the last context that used it; an upload
// holds `mu` from its first piece to its final synchronize.
struct UploadStaging {
  struct Slot {
    cudaEvent_t done = nullptr;
    bool in_flight = false;
  };
  std::mutex mu;
  std::unique_ptr<ThreadPool> pool;
  void* host = nullptr;  // kStagingSlots x kStagingSlotBytes, pinned
  Slot slots[kStagingSlots];
  int next = 0;
  int dev = 0;

  UploadStaging() = default;
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;
  ~UploadStaging() {
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(dev);
    for (Slot& sl : slots)
      if (sl.done) cudaEventDestroy(sl.done);
    if (host) cudaFreeHost(host);
    if (prev >= 0) cudaSetDevice(prev);
  }
};

// Device dev's staging (the current device), made if need be; nullptr when
// threads or pinned memory are refused (the caller uploads unstaged).
inline std::shared_ptr<UploadStaging> upload_staging(int dev) {
  static std::mutex mu;
  static std::vector<std::weak_ptr<UploadStaging>> stagings;
  std::lock_guard<std::mutex> lock(mu);
  if (stagings.size() <= size_t(dev)) stagings.resize(size_t(dev) + 1);
  std::shared_ptr<UploadStaging> st = stagings[size_t(dev)].lock();
  if (st) return st;
  try {
    st = std::make_shared<UploadStaging>();
    st->dev = dev;
    const unsigned hw = std::thread::hardware_concurrency();
    st->pool.reset(new ThreadPool(int(std::max(1u, hw))));
  } catch (...) {
    return nullptr;
  }
  bool ok = cudaHostAlloc(&st->host, kStagingSlots * kStagingSlotBytes, cudaHostAllocDefault) == cudaSuccess;
  if (!ok) st->host = nullptr;
  for (UploadStaging::Slot& sl : st->slots)
    if (ok && cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming) != cudaSuccess) {
      sl.done = nullptr;
      ok = false;
    }
  if (!ok) {
    cudaGetLastError();
    return nullptr;
  }
  stagings[size_t(dev)] = st;
  return st;
}

// What upload() spent its time on (log_upload).
struct UploadStats {
  uint64_t tensors = 0, staged = 0, pieces = 0;
  double bytes_in = 0, bytes_out = 0;
  double total_s = 0, alloc_s = 0, repack_s = 0, wait_s = 0, sync_s = 0;
};

// Repacks matrix m into the device buffer dst through the staging slots:
// pieces of 16-row tiles (kern::repack_weight_tiles), each split over the
// repack threads, then its two byte ranges (units, side data) copied
// asynchronously; a slot is refilled only after its previous copy
// completed (its event). Pieces shrink towards the end of the matrix so
// the last copy, the only one nothing overlaps, is short. False, having
// done nothing, when a tile does not fit a slot.
inline bool staged_upload(UploadStaging& st, cudaStream_t stream, const TensorMeta& m, const void* data,
                          kern::WFormat f, uint8_t* dst, UploadStats& stats) {
  const int64_t rows = int64_t(m.rows), cols = int64_t(m.cols), nt = kern::dweight_tile_count(rows);
  const kern::TileSpan first = kern::dweight_tiles(f, rows, cols, 0, 1);
  const size_t per_tile = first.units_bytes + first.side_bytes;
  if (nt == 0 || per_tile == 0 || per_tile > kStagingSlotBytes) return false;
  const int64_t max_tiles = int64_t(kStagingSlotBytes / per_tile), min_tiles = std::max<int64_t>(1, max_tiles / 8);
  const int32_t dtype = m.dtype;
  std::lock_guard<std::mutex> lock(st.mu);
  try {
    for (int64_t t0 = 0; t0 < nt;) {
      // Half of what is left, within [min_tiles, max_tiles]; the rest too
      // when less than min_tiles would remain.
      const int64_t left = nt - t0;
      int64_t n = std::min(max_tiles, std::max(min_tiles, (left + 1) / 2));
      if (left - n < min_tiles) n = std::min(left, max_tiles);
      const kern::TileSpan sp = kern::dweight_tiles(f, rows, cols, t0, t0 + n);
      UploadStaging::Slot& sl = st.slots[st.next];
      uint8_t* hu = static_cast<uint8_t*>(st.host) + size_t(st.next) * kStagingSlotBytes;
      uint8_t* hs = hu + sp.units_bytes;
      st.next = (st.next + 1) % kStagingSlots;
      if (sl.in_flight) {
        const auto wait_start = std::chrono::steady_clock::now();
        sl.in_flight = false;
        QSP_CUDA_CHECK(cudaEventSynchronize(sl.done));
        stats.wait_s += seconds_since(wait_start);
      }
      const auto repack_start = std::chrono::steady_clock::now();
      st.pool->parallel_for(n, [&](int64_t a, int64_t b) {
        const kern::TileSpan q = kern::dweight_tiles(f, rows, cols, t0 + a, t0 + b);
        kern::repack_weight_tiles(dtype, data, rows, cols, t0 + a, t0 + b, hu + (q.units_off - sp.units_off),
                                  hs + (q.side_off - sp.side_off));
      });
      stats.repack_s += seconds_since(repack_start);
      QSP_CUDA_CHECK(cudaMemcpyAsync(dst + sp.units_off, hu, sp.units_bytes, cudaMemcpyHostToDevice, stream));
      if (sp.side_bytes)
        QSP_CUDA_CHECK(cudaMemcpyAsync(dst + sp.side_off, hs, sp.side_bytes, cudaMemcpyHostToDevice, stream));
      QSP_CUDA_CHECK(cudaEventRecord(sl.done, stream));
      sl.in_flight = true;
      ++stats.pieces;
      t0 += n;
    }
    const auto sync_start = std::chrono::steady_clock::now();
    QSP_CUDA_CHECK(cudaStreamSynchronize(stream));
    stats.sync_s += seconds_since(sync_start);
  } catch (...) {
    // No copy may still read the slots or write dst (freed by the caller).
    cudaStreamSynchronize(stream);
    cudaGetLastError();
    for (UploadStaging::Slot& sl : st.slots) sl.in_flight = false;
    throw;
  }
  for (UploadStaging::Slot& sl : st.slots) sl.in_flight = false;
  return true;
}

// The account of a backend's uploads (bench/bench_upload prints it), once,
// when the backend goes: QSP_LOG_DEBUG to the process-wide sink.
inline void log_upload(const UploadStats& u, int threads) noexcept {
  if (!u.tensors) return;
  try {
    log_global(QSP_LOG_DEBUG,
               strprintf("CUDA upload: %llu tensors, %.1f MB in, %.1f MB on the device, %.3f s in upload() "
                         "(device allocation %.3f s, repack %.3f s on %d threads, waiting for staging %.3f s, "
                         "final copies %.3f s); %llu staged in %llu pieces, %llu unstaged",
                         (unsigned long long)u.tensors, u.bytes_in / 1e6, u.bytes_out / 1e6, u.total_s, u.alloc_s,
                         u.repack_s, threads, u.wait_s, u.sync_s,
                         (unsigned long long)u.staged, (unsigned long long)u.pieces,
                         (unsigned long long)(u.tensors - u.staged)));
  } catch (...) {
    // a debug line lost to a failed allocation
  }
}

}  // namespace cuda_impl
}  // namespace qsp
