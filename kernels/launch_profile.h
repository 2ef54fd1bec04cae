// Where a real forward pass spends its time, kernel by kernel, for the
// benchmarks (bench_prefill --profile). ncu replays one kernel at a time
// with the caches flushed, so every kernel that reads its predecessor's
// output from L2 looks slower there than in a pass (bench/RESULTS.md,
// twenty-fourth session), and Nsight Systems does not run on the device
// machine. This records a CUDA event before and after every kernel launch
// of the library (launch_pdl, the split-K cluster launches, the two plain
// launches of add.cu) between start() and stop(), and sums the elapsed
// times per (kernel family, grid, block): the grid tells the matrices of one
// family apart (the Q | K | V GEMM from the down projection).
//
// What it measures: each kernel from the moment the stream reaches it to its
// end, with warm caches. The events between kernels serialize them, so PDL's
// overlap of one kernel's prologue with the previous one's tail is gone:
// the sum exceeds the pass by that overlap. Eager passes only: a launch into
// a stream being captured is not recorded (bench_prefill --profile sets
// QSP_GRAPHS=0 before it makes a context). Off (the default), a launch pays
// one relaxed atomic load.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <string>
#include <vector>

namespace qsp {
namespace kern {
namespace prof {

inline std::atomic<bool> g_on{false};
inline bool on() { return g_on.load(std::memory_order_relaxed); }

// Start recording (clears what an earlier start() recorded).
void start();

struct Row {
  std::string name;  // the kernel family (pdl_name), or "add"
  dim3 grid, block;
  int launches = 0;
  double ms = 0.0;   // summed over its launches
};
// Stop recording, wait for the device, and return one row per (name, grid,
// block), the most time first. Empty if nothing was recorded.
std::vector<Row> stop();

// The launch hooks: the index of the launch's record, or -1 when off or the
// stream is being captured; end() records the launch's second event.
int begin(const char* name, dim3 grid, dim3 block, cudaStream_t stream);
void end(int id, cudaStream_t stream);

// begin() / end() around one launch statement.
class Scope {
 public:
  Scope(const char* name, dim3 grid, dim3 block, cudaStream_t stream)
      : id_(on() ? begin(name, grid, block, stream) : -1), stream_(stream) {}
  ~Scope() {
    if (id_ >= 0) end(id_, stream_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int id_;
  cudaStream_t stream_;
};

}  // namespace prof
}  // namespace kern
}  // namespace qsp
