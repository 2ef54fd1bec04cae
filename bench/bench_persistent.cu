// bench_persistent: what a decode step's kernel boundaries cost, and what a
// persistent kernel (one launch a step, a grid barrier between phases) would
// save. A probe for the decision (bench/RESULTS.md, thirty-first session),
// not a model: no qsp code, synthetic phases with the decode step's shape.
//
// A step is, per layer, the six phases of qsp's decode step (one token):
//   QKV GEMV (K = hidden), qk_rope (a block per head), attention (a block
//   per KV head), O GEMV, gate | up GEMV, down GEMV;
// then the LM head GEMV. A GEMV phase streams its Q4_0-sized weights
// (K / 2 bytes of nibbles and K / 32 fp16 scales a row), reads its input
// vector from global memory (written by the phase before), quantizes it to
// int8 in shared memory and writes one float a row: a warp a row at a time,
// four rows in flight, dp4a on the nibbles. The weights do not depend on the
// phase before, so each block loads its first rows before it waits.
//
// Modes, each timed over --reps steps after a warm-up, in one run:
//   copy        one kernel reading every weight byte once (the floor);
//   graph       a kernel a phase in a CUDA graph, with PDL (griddepcontrol:
//               the first rows' weights loaded before the wait; qsp's decode
//               step today) and without, each with empty phases (the bare
//               boundary), with the input only (no weights) and in full;
//   persistent  one kernel a step (a block an SM, all resident), the phases
//               separated by a grid barrier: an atomic count in L2 with an
//               acquire or a relaxed spin, or a flag a block; empty phases,
//               or full with the next phase's first rows loaded before the
//               barrier (or after it).
//
// What it found (thirty-first session, H100; bench/RESULTS.md): a PDL
// boundary in a graph costs ~0.63 us, a grid barrier 1.1-2.6 us, so a
// persistent kernel made of barriers is slower than the graph (3.8 against
// 3.2 us a phase of the 0.6B); a phase's cost is what runs after its wait
// (the input's round trip, the reduction), not the launch.
//
//   bench_persistent [--model 0.6b|8b] [--reps N] [--layers N] [--replicas R[,R...]]
//   --replicas: the graph modes again with each GEMV block reading its input
//   from copy blockIdx % R (the copies past the first are stale: timing only).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int kThreads = 512;  // 16 warps
constexpr int kWarps = kThreads / 32;
constexpr int kRowsInFlight = 4;  // rows a warp loads before it uses them
constexpr int kMaxK = 12288;

enum class Kind : int { kGemv, kRope, kAttn };

struct Phase {
  Kind kind;
  int n, k;            // GEMV: rows, columns; rope: heads; attn: KV heads
  const uint4* w;      // nibbles, row-major, k / 2 bytes a row
  const uint32_t* s;   // fp16 scales, k / 32 a row (as pairs)
  const float* in;     // input vector (k floats), written by the phase before
  float* out;          // n floats (GEMV), 128 a head (rope, attn)
  int replicas;        // --replicas: a GEMV block reads copy blockIdx % replicas of in
  int rep_stride;      // floats between copies (only copy 0 is written: timing only)
};

struct Step {
  Phase* phases;  // device array
  int n_phases;
  unsigned long long* bar;  // grid barrier count
};

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ uint4 ldg_nc(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ float ld_coherent(const float* p) {
  float v;
  asm volatile("ld.global.relaxed.gpu.f32 %0, [%1];\n" : "=f"(v) : "l"(p) : "memory");
  return v;
}

// The barrier: every block adds 1 to *bar, then waits until it reaches
// target (the count never resets within a run: target grows by gridDim.x a
// barrier). __syncthreads before: the block's writes are done; thread 0's
// release add and acquire load order them for the other blocks.
// kRelaxedSpin: spin on relaxed loads, one acquire fence after.
template <bool kRelaxedSpin>
__device__ __forceinline__ void grid_barrier(unsigned long long* bar, unsigned long long target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u64 [%0], 1;\n" ::"l"(bar) : "memory");
    unsigned long long v;
    if (kRelaxedSpin) {
      do {
        asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(bar) : "memory");
      } while (v < target);
      asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    } else {
      do {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(bar) : "memory");
      } while (v < target);
    }
  }
  __syncthreads();
}

// A warp's rows of a GEMV phase: rows warp_global, + total_warps, ...
// Preload: the first kRowsInFlight rows' first 16-byte words of every lane
// (up to 2 a lane: K <= 2048 is a whole row; longer rows stream the rest).
struct Pre {
  uint4 w[kRowsInFlight][2];
  uint32_t s[kRowsInFlight];
};

template <int kWordsPerLane>
__device__ __forceinline__ void preload_rows(const Phase& ph, int row0, int stride, Pre& pre) {
  const int lane = threadIdx.x & 31;
  const int words = ph.k / 32;  // 16-byte words a row
#pragma unroll
  for (int r = 0; r < kRowsInFlight; ++r) {
    const int row = row0 + r * stride;
#pragma unroll
    for (int i = 0; i < kWordsPerLane; ++i) {
      const int wi = lane + 32 * i;
      pre.w[r][i] = row < ph.n && wi < words ? ldg_nc(ph.w + size_t(row) * words + wi) : make_uint4(0, 0, 0, 0);
    }
    pre.s[r] = row < ph.n && lane < ph.k / 64 ? __ldg(ph.s + size_t(row) * (ph.k / 64) + lane) : 0u;
  }
}

__device__ __forceinline__ int dot_word(uint4 w, const int* a) {
  // 32 nibbles against 32 int8 activations (8 words of 4)
  int acc = 0;
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    acc = __dp4a(int(ws[j] & 0x0f0f0f0fu), a[2 * j], acc);
    acc = __dp4a(int((ws[j] >> 4) & 0x0f0f0f0fu), a[2 * j + 1], acc);
  }
  return acc;
}

// Quantize the phase's input (k floats) into shared int8 (one scale).
// --replicas R: block b reads copy b % R, so that R times as many L2 lines
// (and slices) serve the grid's reads of the same vector: whether every
// block reading one hot vector at once is what a phase's input costs.
__device__ __forceinline__ float load_input(Phase ph, int8_t* s_a, float* s_red) {
  ph.in += size_t(blockIdx.x % ph.replicas) * size_t(ph.rep_stride);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < ph.k; i += kThreads) amax = fmaxf(amax, fabsf(ld_coherent(ph.in + i)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) s_red[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, s_red[w]);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = threadIdx.x; i < ph.k; i += kThreads) s_a[i] = int8_t(__float2int_rn(ld_coherent(ph.in + i) * inv));
  __syncthreads();
  return amax / 127.0f;
}

template <int kWordsPerLane>
__device__ __forceinline__ void gemv_rows(const Phase& ph, int row0, int stride, const Pre& pre, const int8_t* s_a,
                                          float a_scale) {
  const int lane = threadIdx.x & 31;
  const int words = ph.k / 32;
  for (int base = row0, g = 0; base < ph.n; base += kRowsInFlight * stride, ++g) {
    Pre cur;
    if (g == 0)
      cur = pre;
    else
      preload_rows<kWordsPerLane>(ph, base, stride, cur);
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
      const int row = base + r * stride;
      int acc = 0;
#pragma unroll
      for (int i = 0; i < kWordsPerLane; ++i) {
        const int wi = lane + 32 * i;
        if (wi < words) acc += dot_word(cur.w[r][i], reinterpret_cast<const int*>(s_a + wi * 32));
      }
      // rows longer than the preloaded words: the rest streamed here
      for (int wi = lane + 32 * kWordsPerLane; wi < words; wi += 32)
        if (row < ph.n) acc += dot_word(ldg_nc(ph.w + size_t(row) * words + wi), reinterpret_cast<const int*>(s_a + wi * 32));
      float f = float(acc) * a_scale * (1.0f + 1e-3f * float(cur.s[r] & 0xff));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) f += __shfl_xor_sync(0xffffffffu, f, o);
      if (lane == 0 && row < ph.n) ph.out[row] = f * 1e-4f;
    }
  }
}

// Words a lane preloads: a whole row up to K = 2048, the first 2048
// columns of a longer one.
__device__ __forceinline__ void preload_any(const Phase& ph, int row0, int stride, Pre& pre) {
  if (ph.k <= 1024)
    preload_rows<1>(ph, row0, stride, pre);
  else
    preload_rows<2>(ph, row0, stride, pre);
}

// The small phases: a block a head reads 128 floats and writes 128 floats.
__device__ __forceinline__ void small_phase(const Phase& ph, int block, int n_blocks) {
  for (int h = block; h < ph.n; h += n_blocks) {
    if (threadIdx.x < 128) {
      const float x = ld_coherent(ph.in + h * 128 + threadIdx.x);
      ph.out[h * 128 + threadIdx.x] = x * 0.5f + 0.25f;
    }
  }
}

__device__ __forceinline__ void run_gemv(const Phase& ph, const Pre& pre, int8_t* s_a, float* s_red) {
  const int warp_global = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int stride = gridDim.x * kWarps;
  const float a_scale = load_input(ph, s_a, s_red);
  if (ph.k <= 1024)
    gemv_rows<1>(ph, warp_global, stride, pre, s_a, a_scale);
  else
    gemv_rows<2>(ph, warp_global, stride, pre, s_a, a_scale);
}

// One phase as its own kernel (graph mode).
__global__ void __launch_bounds__(kThreads, 1) phase_kernel(Phase ph, int level) {
  __shared__ int8_t s_a[kMaxK];
  __shared__ float s_red[kWarps];
  if (level == 0) {
    pdl_wait();
    pdl_launch();
    return;
  }
  if (level == 1) {
    pdl_wait();
    pdl_launch();
    if (ph.kind == Kind::kGemv) {
      const float sc = load_input(ph, s_a, s_red);
      const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
      if ((threadIdx.x & 31) == 0 && row < ph.n) ph.out[row] = sc * float(s_a[row % ph.k]);
    } else {
      small_phase(ph, blockIdx.x, gridDim.x);
    }
    return;
  }
  if (ph.kind == Kind::kGemv) {
    Pre pre;
    const int warp_global = blockIdx.x * kWarps + (threadIdx.x >> 5);
    preload_any(ph, warp_global, gridDim.x * kWarps, pre);
    pdl_wait();
    pdl_launch();
    run_gemv(ph, pre, s_a, s_red);
  } else {
    pdl_wait();
    pdl_launch();
    small_phase(ph, blockIdx.x, gridDim.x);
  }
}

// A whole step in one kernel.
// The flags barrier: block b stores epoch into flags[b] (release); warp 0
// of every block polls all the flags (relaxed) until each holds at least
// epoch, then fences: no atomic, no single hot address.
__device__ __forceinline__ void flag_barrier(unsigned long long* flags, unsigned long long epoch) {
  __syncthreads();
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0)
      asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(flags + blockIdx.x), "l"(epoch) : "memory");
    for (int b = threadIdx.x; b < gridDim.x; b += 32) {
      unsigned long long v;
      do {
        asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(flags + b) : "memory");
      } while (v < epoch);
    }
    __syncwarp();
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  }
  __syncthreads();
}

template <bool kPreload, bool kRelaxedSpin = false, bool kFlags = false>
__global__ void __launch_bounds__(kThreads, 1) step_kernel(const Phase* phases, int n_phases,
                                                           unsigned long long* bar, unsigned long long base,
                                                           int level) {
  __shared__ int8_t s_a[kMaxK];
  __shared__ float s_red[kWarps];
  const int warp_global = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int stride = gridDim.x * kWarps;
  for (int i = 0; i < n_phases; ++i) {
    const Phase ph = phases[i];
    if (level == 0) {
      if (i > 0) {
        if (kFlags)
          flag_barrier(bar + 64, base + (unsigned long long)i);
        else
          grid_barrier<kRelaxedSpin>(bar, base + (unsigned long long)i * gridDim.x);
      }
      continue;
    }
    Pre pre;
    if (ph.kind == Kind::kGemv && kPreload) preload_any(ph, warp_global, stride, pre);
    if (i > 0) {
      if (kFlags)
        flag_barrier(bar + 64, base + (unsigned long long)i);
      else
        grid_barrier<kRelaxedSpin>(bar, base + (unsigned long long)i * gridDim.x);
    }
    if (ph.kind == Kind::kGemv) {
      if (!kPreload) preload_any(ph, warp_global, stride, pre);
      run_gemv(ph, pre, s_a, s_red);
    } else {
      small_phase(ph, blockIdx.x, gridDim.x);
    }
  }
}

// The floor: every weight byte read once.
__global__ void __launch_bounds__(kThreads) copy_kernel(const uint4* w, size_t n_words, unsigned long long* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * kThreads;
  size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + 3 * stride < n_words; i += 4 * stride) {
    const uint4 a = ldg_nc(w + i), b = ldg_nc(w + i + stride), c = ldg_nc(w + i + 2 * stride),
                d = ldg_nc(w + i + 3 * stride);
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < n_words; i += stride) acc ^= ldg_nc(w + i).x;
  if (acc == 0x12345678u) atomicAdd(sink, 1ull);
}

struct Shape {
  const char* name;
  int hidden, heads, kv_heads, ffn, vocab, layers;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model = "0.6b";
  int reps = 50, layers_override = 0;
  std::vector<int> replica_list;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--layers" && i + 1 < argc) layers_override = std::atoi(argv[++i]);
    else if (a == "--replicas" && i + 1 < argc) {
      for (const char* q = argv[++i]; *q;) {
        char* end = nullptr;
        const long v = std::strtol(q, &end, 10);
        if (end == q || v < 1 || v > 64) {
          std::fprintf(stderr, "bench_persistent: --replicas: a list of copy counts 1..64, e.g. 1,4,16\n");
          return 2;
        }
        replica_list.push_back(int(v));
        q = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: bench_persistent [--model 0.6b|8b] [--reps N] [--layers N] [--replicas R,...]\n");
      return 2;
    }
  }
  Shape sh = model == "8b" ? Shape{"qwen3-8b", 4096, 32, 8, 12288, 151936, 36}
                           : Shape{"qwen3-0.6b", 1024, 16, 8, 3072, 151936, 28};
  if (layers_override > 0) sh.layers = layers_override;
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));

  // Phases of one step.
  const int qkv = (sh.heads + 2 * sh.kv_heads) * 128;
  struct Desc {
    Kind kind;
    int n, k;
  };
  std::vector<Desc> descs;
  for (int l = 0; l < sh.layers; ++l) {
    descs.push_back({Kind::kGemv, qkv, sh.hidden});
    descs.push_back({Kind::kRope, sh.heads + sh.kv_heads, 128});
    descs.push_back({Kind::kAttn, sh.heads, 128});
    descs.push_back({Kind::kGemv, sh.hidden, sh.heads * 128});
    descs.push_back({Kind::kGemv, 2 * sh.ffn, sh.hidden});
    descs.push_back({Kind::kGemv, sh.hidden, sh.ffn});
  }
  descs.push_back({Kind::kGemv, sh.vocab, sh.hidden});

  // Weights: every GEMV phase its own (no reuse through L2 across phases).
  size_t w_words = 0, s_words = 0;
  for (const Desc& d : descs)
    if (d.kind == Kind::kGemv) w_words += size_t(d.n) * d.k / 32, s_words += size_t(d.n) * d.k / 64;
  uint4* w = nullptr;
  uint32_t* s = nullptr;
  CHECK(cudaMalloc(&w, w_words * 16));
  CHECK(cudaMalloc(&s, s_words * 4));
  {  // random bytes (a device-side LCG would do; host fill keeps it simple)
    std::vector<uint32_t> h(1 << 22);
    uint32_t x = 12345;
    for (auto& v : h) x = x * 1664525u + 1013904223u, v = x;
    for (size_t off = 0; off < w_words * 16; off += h.size() * 4)
      CHECK(cudaMemcpy(reinterpret_cast<char*>(w) + off, h.data(), std::min(h.size() * 4, w_words * 16 - off),
                       cudaMemcpyHostToDevice));
    for (size_t off = 0; off < s_words * 4; off += h.size() * 4)
      CHECK(cudaMemcpy(reinterpret_cast<char*>(s) + off, h.data(), std::min(h.size() * 4, s_words * 4 - off),
                       cudaMemcpyHostToDevice));
  }
  // Activations: one buffer a phase boundary, large enough for any phase.
  const int act = std::max({sh.vocab, 2 * sh.ffn, qkv, (sh.heads + 2 * sh.kv_heads) * 128});
  int max_rep = 1;
  for (int r : replica_list) max_rep = std::max(max_rep, r);
  float* acts = nullptr;  // two boundaries, each max_rep copies of act floats
  CHECK(cudaMalloc(&acts, sizeof(float) * act * 2 * max_rep));
  {
    std::vector<float> h(size_t(act) * 2 * max_rep);
    for (size_t i = 0; i < h.size(); ++i) h[i] = float(int(i * 2654435761u % 2001) - 1000) * 1e-3f;
    CHECK(cudaMemcpy(acts, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  std::vector<Phase> phases;
  size_t wo = 0, so = 0;
  for (size_t i = 0; i < descs.size(); ++i) {
    const Desc& d = descs[i];
    Phase p{};
    p.kind = d.kind;
    p.n = d.n;
    p.k = d.k;
    p.in = acts + size_t(i & 1) * act * max_rep;
    p.out = acts + size_t((i + 1) & 1) * act * max_rep;
    p.replicas = 1;
    p.rep_stride = act;
    if (d.kind == Kind::kGemv) {
      p.w = w + wo;
      p.s = s + so;
      wo += size_t(d.n) * d.k / 32;
      so += size_t(d.n) * d.k / 64;
    }
    phases.push_back(p);
  }
  Phase* d_phases = nullptr;
  CHECK(cudaMalloc(&d_phases, sizeof(Phase) * phases.size()));
  CHECK(cudaMemcpy(d_phases, phases.data(), sizeof(Phase) * phases.size(), cudaMemcpyHostToDevice));
  unsigned long long* bar = nullptr;
  CHECK(cudaMalloc(&bar, 8192));
  CHECK(cudaMemset(bar, 0, 8192));

  const double bytes = double(w_words) * 16 + double(s_words) * 4;
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  std::printf("shape: %s, %d layers, %zu phases (%d launches a layer in graph mode), weights %.1f MB\n", sh.name,
              sh.layers, phases.size(), 6, bytes / 1e6);

  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto time_it = [&](auto&& fn) {
    for (int i = 0; i < 5; ++i) fn();
    CHECK(cudaStreamSynchronize(st));
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
      CHECK(cudaEventRecord(e0, st));
      fn();
      CHECK(cudaEventRecord(e1, st));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  };

  // copy floor
  unsigned long long* sink = bar + 4;
  const double t_copy = time_it([&] {
    copy_kernel<<<sms * 4, kThreads, 0, st>>>(w, w_words, sink);
    CHECK(cudaGetLastError());
  });
  std::printf("| mode | step (us) | per phase (us) | weights GB/s |\n|---|---|---|---|\n");
  std::printf("| copy (weights only, one kernel) | %.1f | | %.0f |\n", t_copy * 1e3, double(w_words) * 16 / t_copy / 1e6);

  // graphs of a kernel a phase
  auto make_graph = [&](int level, bool pdl, int replicas = 1) {
    cudaGraphExec_t exec = nullptr;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (Phase p : phases) {
      p.replicas = replicas;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(p.kind == Kind::kGemv ? unsigned(sms) : unsigned(p.n));
      cfg.blockDim = dim3(kThreads);
      cfg.stream = st;
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at;
      cfg.numAttrs = pdl ? 1 : 0;
      CHECK(cudaLaunchKernelEx(&cfg, phase_kernel, p, level));
    }
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(st, &g));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));
    return exec;
  };
  const char* level_name[3] = {"empty phases", "input only (no weights)", "full"};
  for (int level = 0; level < 3; ++level)
    for (int pdl = 1; pdl >= 0; --pdl) {
      cudaGraphExec_t exec = make_graph(level, pdl);
      const double t = time_it([&] { CHECK(cudaGraphLaunch(exec, st)); });
      std::printf("| graph, a kernel a phase%s, %s | %.1f | %.2f | %.0f |\n", pdl ? " (PDL)" : "", level_name[level],
                  t * 1e3, t * 1e3 / phases.size(), level == 2 ? bytes / t / 1e6 : 0.0);
      CHECK(cudaGraphExecDestroy(exec));
    }
  for (int r : replica_list)
    for (int level = 1; level < 3; ++level) {
      cudaGraphExec_t exec = make_graph(level, true, r);
      const double t = time_it([&] { CHECK(cudaGraphLaunch(exec, st)); });
      std::printf("| graph (PDL), %s, input from copy block %% %d | %.1f | %.2f | %.0f |\n", level_name[level], r,
                  t * 1e3, t * 1e3 / phases.size(), level == 2 ? bytes / t / 1e6 : 0.0);
      CHECK(cudaGraphExecDestroy(exec));
    }

  // persistent: one block an SM, all resident
  int occ = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, step_kernel<true>, kThreads, 0));
  if (occ < 1) {
    std::printf("persistent kernel does not fit an SM\n");
    return 1;
  }
  unsigned long long base = 0, epoch = 0;
  struct Variant {
    const char* name;
    int level;
    bool pre, relaxed, flags;
  };
  const Variant variants[] = {
      {"atomic count, acquire spin, empty phases", 0, true, false, false},
      {"atomic count, acquire spin, next rows loaded before", 2, true, false, false},
      {"atomic count, acquire spin, no preload", 2, false, false, false},
      {"atomic count, relaxed spin, empty phases", 0, true, true, false},
      {"atomic count, relaxed spin, next rows loaded before", 2, true, true, false},
      {"a flag a block, empty phases", 0, true, false, true},
      {"a flag a block, next rows loaded before", 2, true, false, true},
  };
  for (const Variant& v : variants) {
    const double t = time_it([&] {
      const int np = int(phases.size());
      if (v.flags)
        step_kernel<true, false, true><<<sms, kThreads, 0, st>>>(d_phases, np, bar, epoch, v.level);
      else if (v.relaxed)
        step_kernel<true, true><<<sms, kThreads, 0, st>>>(d_phases, np, bar, base, v.level);
      else if (v.pre)
        step_kernel<true><<<sms, kThreads, 0, st>>>(d_phases, np, bar, base, v.level);
      else
        step_kernel<false><<<sms, kThreads, 0, st>>>(d_phases, np, bar, base, v.level);
      CHECK(cudaGetLastError());
      // the count after a step is base + (phases - 1) * sms, the flags'
      // last epoch base + phases - 1: the next step's targets start there
      if (v.flags)
        epoch += np;
      else
        base += (unsigned long long)(np - 1) * sms;
    });
    std::printf("| persistent, %s | %.1f | %.2f | %.0f |\n", v.name, t * 1e3, t * 1e3 / phases.size(),
                v.level == 0 ? 0.0 : bytes / t / 1e6);
  }
  CHECK(cudaStreamSynchronize(st));
  // Check: the graph and the persistent kernel compute the same last phase.
  std::printf("(phase boundaries a step: %zu; the LM head is the last phase)\n", phases.size() - 1);
  return 0;
}
