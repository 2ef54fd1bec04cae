// kernels/launch_profile.h: per-launch events and their sums (host code; a .cu for the CUDA headers).
#include "kernels/launch_profile.h"

#include <algorithm>
#include <mutex>
#include <tuple>

namespace qsp {
namespace kern {
namespace prof {
namespace {

struct Launch {
  const char* name;
  dim3 grid, block;
  cudaEvent_t before = nullptr, after = nullptr;
};

// Records of this start(); events are kept for the next one (creating two
// per launch would cost more host time than the launch).
struct State {
  std::mutex mu;
  std::vector<Launch> launches;
  std::vector<cudaEvent_t> pool;
  size_t used = 0;

  cudaEvent_t take() {
    if (used == pool.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return nullptr;
      pool.push_back(e);
    }
    return pool[used++];
  }
};

State& state() {
  static State* s = new State;  // never destroyed: launches may come from static destructors' passes
  return *s;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: do not record into it
  }
  return st != cudaStreamCaptureStatusNone;
}

}  // namespace

void start() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.launches.clear();
  s.used = 0;
  g_on.store(true, std::memory_order_relaxed);
}

int begin(const char* name, dim3 grid, dim3 block, cudaStream_t stream) {
  if (!on() || capturing(stream)) return -1;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Launch l{name, grid, block};
  l.before = s.take();
  l.after = s.take();
  if (!l.before || !l.after || cudaEventRecord(l.before, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  s.launches.push_back(l);
  return int(s.launches.size()) - 1;
}

void end(int id, cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (id < 0 || size_t(id) >= s.launches.size()) return;
  if (cudaEventRecord(s.launches[size_t(id)].after, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    s.launches[size_t(id)].after = nullptr;
  }
}

std::vector<Row> stop() {
  g_on.store(false, std::memory_order_relaxed);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<Row> rows;
  if (cudaDeviceSynchronize() != cudaSuccess) {
    (void)cudaGetLastError();
    return rows;
  }
  const auto key = [](const std::string& n, const dim3& g, const dim3& b) {
    return std::make_tuple(n, g.x, g.y, g.z, b.x, b.y, b.z);
  };
  for (const Launch& l : s.launches) {
    float ms = 0.0f;
    if (!l.after || cudaEventElapsedTime(&ms, l.before, l.after) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const Row& r) { return key(r.name, r.grid, r.block) == key(l.name, l.grid, l.block); });
    if (it == rows.end()) {
      rows.push_back(Row{l.name, l.grid, l.block});
      it = rows.end() - 1;
    }
    ++it->launches;
    it->ms += ms;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  s.launches.clear();
  s.used = 0;
  return rows;
}

}  // namespace prof
}  // namespace kern
}  // namespace qsp
