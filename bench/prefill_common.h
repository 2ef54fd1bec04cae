// bench_prefill's parts and what they share: the model shapes, the flop
// count, the timing helpers, a qsp context of synthetic weights. The program
// is bench_prefill.cu (the qsp rows, --gguf, main), prefill_modes.cu
// (--batch: qsp_prefill_batch; --tp: tensor parallelism) and
// prefill_cublas.cu (the cuBLAS fp16 baseline).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_weights.h"
#include "kernels/launch_profile.h"
#include "qsp/qsp.h"

namespace bench {

struct Shape {
  const char* name;
  uint32_t layers, hidden, ffn, heads, kv_heads, head_dim, vocab;
};
inline const Shape kShapes[] = {
    {"qwen3-0.6b", 28, 1024, 3072, 16, 8, 128, 151936},
    {"qwen3-8b", 36, 4096, 12288, 32, 8, 128, 151936},
};

inline double linear_params(const Shape& s) {
  const double H = s.hidden, Q = double(s.heads) * s.head_dim, KV = double(s.kv_heads) * s.head_dim;
  return s.layers * (H * Q + 2 * H * KV + Q * H + 3 * H * s.ffn);
}
// Causal attention over a chunk of n after `past`: QK^T and PV, 2 flops a MAC.
inline double attn_flops(const Shape& s, double n, double past) {
  const double pairs = n * past + n * (n + 1) / 2;
  return s.layers * 4.0 * s.heads * s.head_dim * pairs;
}
inline double total_flops(const Shape& s, double n, double past) {
  return 2 * linear_params(s) * n + attn_flops(s, n, past) + 2.0 * s.vocab * s.hidden;
}

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline int reps_for(uint32_t n, int reps) { return n >= 4096 ? std::max(3, reps / 3) : reps; }

// --profile-range: the first timed call of each measurement runs inside
// cudaProfilerStart / Stop, so that `ncu --profile-from-start off` sees that
// call's kernels only (a replayed graph's too), not the set-up's or the
// warm-up's (scripts/gpu-profile).
inline bool g_profile_range = false;
void profile_range(bool start);

// --profile: after each measurement, one more call with every kernel launch
// timed by CUDA events (kernels/launch_profile.h; passes eager: QSP_GRAPHS=0
// is set before any context exists), printed per kernel family and grid.
inline bool g_profile = false;
// --refill: time_qsp re-prefills the cached prefix before every timed run
// (the method until 2026-12-07: a decode step right after a whole prompt).
inline bool g_refill = false;
template <class Pass>
void profile_pass(const char* what, Pass&& pass);
void print_profile(const char* what, double wall_ms);

// A CUDA context of shape s, its weights of type bt generated and uploaded
// (generate = false: a second context of the same model, every handle
// already in the weight cache). n_devices / device_mask: qsp_context_params'
// split (0: unsplit).
qsp_context* make_qsp(const Shape& s, const BenchType& bt, uint32_t max_seq, bool generate = true,
                      uint32_t n_devices = 0, uint32_t device_mask = 0);
// Median ms of a prefill of n tokens after `past` (tokens[0, past + n)),
// after a warm-up run: the first `past` prefilled once, then each run from
// the cache truncated back to them (a generation's steady state, as `qsp
// bench --batch 1x1@P` measures; until 2026-12-07 each run re-prefilled
// them, so a decode step was timed right after a whole prompt's burst).
double time_qsp(qsp_context* ctx, uint32_t n, uint32_t past, int reps, const std::vector<int32_t>& tokens);

// --batch SPEC (prefill_modes.cu): one qsp_prefill_batch against the same
// pieces through qsp_prefill; a table row.
void bench_batch(const Shape& s, const BenchType& bt, const std::string& spec, int reps,
                 std::vector<std::string>& table);
// --tp entries (prefill_modes.cu): the model split, every length plus the
// decode step at 2048, against the first entry; table rows.
void bench_tp(const Shape& s, const BenchType& bt, const std::vector<std::string>& tp,
              const std::vector<uint32_t>& lengths, uint32_t max_seq, int reps, const std::vector<int32_t>& tokens,
              std::vector<std::string>& table);

// The same layers with fp16 weights through cuBLAS (prefill_cublas.cu).
class CublasBaseline {
 public:
  CublasBaseline(const Shape& s, uint32_t chunk, uint32_t max_seq);
  ~CublasBaseline();
  // Median ms of a chunk of n tokens after `past`.
  double time(int n, int past, int reps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One call of pass() with its launches timed (print_profile's table).
template <class Pass>
void profile_pass(const char* what, Pass&& pass) {
  if (!g_profile) return;
  qsp::kern::prof::start();
  const double t0 = now_ms();
  pass();
  print_profile(what, now_ms() - t0);
}

}  // namespace bench
