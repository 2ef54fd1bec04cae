// Micro-benchmark of qsp::kern::gemm against cuBLAS (fp16 weights, fp32
// accumulation) on real layer shapes.
//
//   cmake --build build --target bench_gemm    (the GEMM is kernels/gemm*.cu, kernels/gemv.cu)
//   ./bench_gemm [--quick] [--fmt q4|q8|f16|all] [--no-cublas] [--swiglu] [--m LIST] [--sweep] [--probe]
//   ./bench_gemm --waves   (the wgmma kernel's blocks per wave by cluster size, then exit)
//                [--shape NxK[,NxK...]]   (instead of the built-in layer shapes)
//   --sweep: also every wgmma token tile x K split forced (the plan model's data),
//            with the weights per tile and by tensor maps ($QSP_WGMMA_TMA_W);
//            with --swiglu the fused gate | up's too (by tensor maps)
//   --probe: in a build configured with -DQSP_WGMMA_PROBE=ON, where the wgmma
//            kernel's cycles go (waits, decode, epilogue) after each timed line
//
// Method: CUDA events around batches of launches (a batch lasts >= ~200 us,
// so tiny GEMVs are not dominated by event resolution), median of 21
// batches after warm-up. Every launch uses the next of R copies of the
// weights, R chosen so the copies span >= 256 MB: nothing is served from L2
// (50 MB on H100/H200) that would come from HBM in a real forward pass. The
// activations are one buffer (they are L2-resident in a real pass too).
// Columns: TFLOPS = 2*M*N*K / time; W GB/s = weight bytes / time (the
// figure of merit of the small-M GEMV); err = ||ours - cuBLAS|| / ||cuBLAS||
// on the same dequantized weights. For M > 16 a second line times both GEMM
// families forced.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/quant.h"
#include "formats/format.h"
#include "support/rng.h"
#include "kernels/gemm_wgmma.h"
#include "kernels/kernels.h"
#include "kernels/per_device.h"

namespace {

using qsp::kern::Epilogue;
using qsp::kern::WFormat;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void ckb(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}
#define CK(x) ck((x), #x)
#define CKB(x) ckb((x), #x)

using qsp_test::Rng;

// R copies of one buffer in a single allocation, each 256-byte aligned.
struct Rotating {
  uint8_t* base = nullptr;
  size_t stride = 0;
  int copies = 0;
  int next = 0;
  Rotating(const std::vector<uint8_t>& host, size_t span = size_t(256) << 20) {
    stride = (host.size() + 255) / 256 * 256;
    copies = int(std::max<size_t>(2, (span + stride - 1) / stride));
    CK(cudaMalloc(&base, stride * size_t(copies)));
    CK(cudaMemcpy(base, host.data(), host.size(), cudaMemcpyHostToDevice));
    for (int i = 1; i < copies; ++i) CK(cudaMemcpy(base + stride * i, base, host.size(), cudaMemcpyDeviceToDevice));
  }
  ~Rotating() { cudaFree(base); }
  Rotating(const Rotating&) = delete;
  Rotating& operator=(const Rotating&) = delete;
  void* first() const { return base; }
  void* take() {
    void* p = base + stride * size_t(next);
    next = (next + 1) % copies;
    return p;
  }
};

// Median milliseconds of one call of fn().
template <class Fn>
double time_ms(Fn fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  CK(cudaEventRecord(a));
  fn();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float once = 0.0f;
  CK(cudaEventElapsedTime(&once, a, b));
  const int batch = std::max(1, std::min(200, int(std::ceil(0.2 / std::max(once, 1e-4f)))));
  std::vector<double> t;
  for (int r = 0; r < 21; ++r) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < batch; ++i) fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(double(ms) / batch);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Shape {
  int64_t N, K;
  const char* what;
};

double rel_err(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double se = 0.0, sr = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = qsp::fp16_to_fp32(a[i]), y = qsp::fp16_to_fp32(b[i]);
    se += (x - y) * (x - y);
    sr += y * y;
  }
  return std::sqrt(se / std::max(sr, 1e-300));
}

int run(int argc, char** argv) {
  bool quick = false, cublas = true, swiglu = false, sweep = false, probe = false;
  std::string fmt_arg = "q4q8";
  std::vector<int> m_list;
  std::vector<Shape> shape_list;  // --shape: instead of the built-in shapes (one shape per ncu run)
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--quick") quick = true;
    else if (s == "--probe") probe = true;
    else if (s == "--no-cublas") cublas = false;
    else if (s == "--swiglu") swiglu = true;
    else if (s == "--fmt" && i + 1 < argc) fmt_arg = argv[++i];
    else if (s == "--sweep") sweep = true;
    else if (s == "--waves") {
      // The wgmma kernel's blocks per wave by cluster size, as the plan
      // model sees them (one block per SM) and for the 64-token tile at two
      // blocks per SM (bench/RESULTS.md, twenty-second session).
      int dev = 0;
      if (cudaGetDevice(&dev) != cudaSuccess) return 1;
      std::printf("waves: SMs %d | 1/SM ks=2 %d ks=4 %d ks=8 %d | 64-token 2/SM ks=1 %d ks=2 %d ks=4 %d ks=8 %d\n",
                  qsp::kern::sm_count(dev), qsp::kern::wgmma::cluster_wave(dev, 2),
                  qsp::kern::wgmma::cluster_wave(dev, 4), qsp::kern::wgmma::cluster_wave(dev, 8),
                  qsp::kern::wgmma::cluster_wave_dense(dev, 1), qsp::kern::wgmma::cluster_wave_dense(dev, 2),
                  qsp::kern::wgmma::cluster_wave_dense(dev, 4), qsp::kern::wgmma::cluster_wave_dense(dev, 8));
      return 0;
    } else if (s == "--m" && i + 1 < argc) {
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 20)) {
          std::fprintf(stderr, "bench_gemm: --m: a list of token counts, e.g. 17,64,512\n");
          return 2;
        }
        m_list.push_back(int(v));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (s == "--shape" && i + 1 < argc) {
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long long n = std::strtoll(p, &end, 10);
        long long k = 0;
        if (end != p && *end == 'x') {
          const char* q = end + 1;
          k = std::strtoll(q, &end, 10);
          if (end == q) k = 0;
        }
        if (n < 1 || k < 1 || n > (1LL << 20) || k > (1LL << 20) || (*end && *end != ',')) {
          std::fprintf(stderr, "bench_gemm: --shape: a list of NxK, e.g. 4096x4096,4096x14336\n");
          return 2;
        }
        shape_list.push_back({n, k, "--shape"});
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--fmt q4|q8|f16|all|LIST] [--no-cublas] [--swiglu] [--m LIST] [--sweep]\n"
                   "  [--shape NxK[,NxK...]]\n"
                   "  LIST: format names, e.g. q4_0,q4_K,q6_K (every format the kernels decode)\n", argv[0]);
      return 2;
    }
  }
  std::vector<int32_t> dtypes;
  if (fmt_arg == "all" || fmt_arg == "q4q8" || fmt_arg == "q4" || fmt_arg == "q8" || fmt_arg == "f16") {
    if (fmt_arg.find("q4") != std::string::npos || fmt_arg == "all") dtypes.push_back(QSP_DTYPE_Q4_0);
    if (fmt_arg.find("q8") != std::string::npos || fmt_arg == "all") dtypes.push_back(QSP_DTYPE_Q8_0);
    if (fmt_arg.find("f16") != std::string::npos || fmt_arg == "all") dtypes.push_back(QSP_DTYPE_F16);
  } else {
    // A list of format names: every one the registry knows and the kernels decode.
    for (size_t at = 0; at <= fmt_arg.size();) {
      size_t end = fmt_arg.find(',', at);
      if (end == std::string::npos) end = fmt_arg.size();
      const std::string name = fmt_arg.substr(at, end - at);
      int32_t found = -1;
      for (const qsp::fmt::Format* const* f = qsp::fmt::all(); *f; ++f)
        if (name == (*f)->name) found = (*f)->dtype;
      if (found < 0 || !qsp::kern::format_supported(found)) {
        std::fprintf(stderr, "bench_gemm: --fmt %s: not a format the kernels decode\n", name.c_str());
        return 2;
      }
      dtypes.push_back(found);
      at = end + 1;
    }
  }

  int dev = 0, n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  const std::vector<Shape> shapes = !shape_list.empty() ? shape_list
                                    : quick ? std::vector<Shape>{{4096, 4096, "q/o 8B"}, {12288, 4096, "gate 4B"}}
                                          : std::vector<Shape>{{1024, 1024, "0.6B k/v"},
                                                               {3072, 1024, "0.6B up"},
                                                               {1024, 3072, "0.6B down"},
                                                               {4096, 4096, "8B q/o"},
                                                               {12288, 4096, "4B gate"},
                                                               {14336, 4096, "8B gate"},
                                                               {4096, 14336, "8B down"},
                                                               {151936, 1024, "0.6B head"}};
  const std::vector<int> Ms = !m_list.empty() ? m_list
                              : quick         ? std::vector<int>{1, 2048}
                                              : std::vector<int>{1, 16, 128, 512, 2048, 8192};

  cublasHandle_t handle = nullptr;
  if (cublas) CKB(cublasCreate(&handle));

  std::printf("%-10s %-12s %5s %-5s %9s %8s %8s | %9s %8s %7s | %8s\n", "shape", "NxK", "M", "fmt", "ms", "TFLOPS",
              "W GB/s", "cuBLAS ms", "TFLOPS", "ratio", "err");
  for (const Shape& sh : shapes) {
    const int64_t N = sh.N, K = sh.K;
    // One set of fp32 weights per shape, ~N(0, 0.02..0.05) per row.
    std::vector<float> wf(size_t(N) * size_t(K));
    {
      Rng rng(uint64_t(N * 31 + K));
      for (int64_t r = 0; r < N; ++r) {
        const float sigma = 0.02f + 0.03f * rng.uniform();
        for (int64_t i = 0; i < K; ++i) wf[size_t(r) * K + i] = sigma * rng.normal();
      }
    }
    for (int32_t dt : dtypes) {
      const uint64_t rb = qsp::dtype_row_bytes(dt, uint64_t(K));
      std::vector<uint8_t> gguf(size_t(N) * rb);
      for (int64_t r = 0; r < N; ++r) {
        uint8_t* dst = gguf.data() + size_t(r) * rb;
        const float* src = wf.data() + size_t(r) * K;
        qsp::fmt::find(dt)->quantize(src, dst, uint64_t(K));  // the reference quantizer
      }
      const WFormat f = qsp::kern::format_for(dt);
      const char* why = nullptr;
      if (!qsp::kern::gemm_supported(f, N, K, &why)) {
        std::printf("%-10s %6lldx%-5lld unsupported: %s\n", sh.what, (long long)N, (long long)K, why);
        continue;
      }
      std::vector<uint8_t> packed(qsp::kern::dweight_bytes(f, N, K));
      qsp::kern::repack_weight(dt, gguf.data(), N, K, packed.data());
      Rotating wq(packed);
      // cuBLAS gets the same weights dequantized to fp16, [N][K].
      std::unique_ptr<Rotating> wd;
      if (cublas) {
        std::vector<uint8_t> dense(size_t(N) * size_t(K) * 2);
        std::vector<float> row(static_cast<size_t>(K));
        uint16_t* d = reinterpret_cast<uint16_t*>(dense.data());
        for (int64_t r = 0; r < N; ++r) {
          qsp::dequantize_row(dt, gguf.data() + size_t(r) * rb, row.data(), uint64_t(K));
          for (int64_t i = 0; i < K; ++i) d[size_t(r) * K + i] = qsp::fp32_to_fp16(row[size_t(i)]);
        }
        wd.reset(new Rotating(dense));
      }
      const char* fname = qsp_dtype_name(dt);

      for (int M : Ms) {
        if (N * int64_t(M) > (int64_t(1) << 31)) continue;  // the LM head at huge M: not a real case
        std::vector<uint16_t> xh(size_t(M) * size_t(K));
        Rng rng(uint64_t(M) * 7 + 3);
        for (auto& v : xh) v = qsp::fp32_to_fp16(rng.normal());
        __half *x = nullptr, *y = nullptr, *yc = nullptr;
        CK(cudaMalloc(&x, xh.size() * 2));
        CK(cudaMalloc(&y, size_t(M) * size_t(N) * 2));
        CK(cudaMalloc(&yc, size_t(M) * size_t(N) * 2));
        CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));

        qsp::kern::GemmArgs a;
        a.x = x;
        a.ldx = int32_t(K);
        a.M = M;
        a.w.fmt = f;
        a.w.rows = int32_t(N);
        a.w.cols = int32_t(K);
        a.ep = Epilogue::kStoreF16;
        a.out_h = y;
        a.ldo = int32_t(N);
        unsigned long long pr[qsp::kern::wgmma::kProbeSlots];
        const bool probing = probe && qsp::kern::wgmma::probe_take(pr);  // (zeroes the sums)
        const double ms = time_ms([&] {
          a.w.data = wq.take();
          CK(qsp::kern::gemm(a, nullptr));
        });
        if (probing && qsp::kern::wgmma::probe_take(pr) && pr[qsp::kern::wgmma::kProbeWarps] > 0) {
          using namespace qsp::kern::wgmma;
          // Per consumer warp and K chunk (cycles), and per warp / producer thread.
          const double w = double(pr[kProbeWarps]), c = std::max(1.0, double(pr[kProbeChunks]));
          const double p = w / 8;  // producer threads (two consumer warpgroups a block)
          // (full-wait: per chunk after the first; first-wait: per warp, the prologue's)
          std::printf("probe %lldx%lld M=%d: %.0f blocks/launches, %.1f chunks/warp | per chunk: full-wait %.0f, "
                      "decode %.0f, mma-wait %.0f, loop %.0f | per warp: first-wait %.0f, loop %.0f, epilogue %.0f "
                      "(sync %.0f, reduce+store %.0f, split %.1f), block %.0f | producer: empty-wait %.0f, total %.0f\n",
                      (long long)N, (long long)K, M, p, c / w, pr[kProbeFull] / std::max(1.0, c - w),
                      pr[kProbeDecode] / c, pr[kProbeMma] / c, pr[kProbeLoop] / c, pr[kProbeFirst] / w,
                      pr[kProbeLoop] / w, pr[kProbeEpi] / w, pr[kProbeEpiSync] / w, pr[kProbeEpiStore] / w,
                      pr[kProbeSplit] / w, pr[kProbeBlock] / w, pr[kProbeEmpty] / p, pr[kProbeProducer] / p);
        }
        const double flop = 2.0 * M * double(N) * double(K);
        const double wbytes = double(packed.size());

        double cms = 0.0, err = -1.0;
        if (cublas) {
          const float alpha = 1.0f, beta = 0.0f;
          auto call = [&](const void* w, __half* out) {
            CKB(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(N), M, int(K), &alpha, w, CUDA_R_16F, int(K), x,
                             CUDA_R_16F, int(K), &beta, out, CUDA_R_16F, int(N), CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
          };
          cms = time_ms([&] { call(wd->take(), yc); });
          if (int64_t(M) * N <= (int64_t(64) << 20)) {
            a.w.data = wq.first();
            CK(qsp::kern::gemm(a, nullptr));
            call(wd->first(), yc);
            CK(cudaDeviceSynchronize());
            std::vector<uint16_t> h1(size_t(M) * size_t(N)), h2(h1.size());
            CK(cudaMemcpy(h1.data(), y, h1.size() * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h2.data(), yc, h2.size() * 2, cudaMemcpyDeviceToHost));
            err = rel_err(h1, h2);
          }
        }
        char nk[32];
        std::snprintf(nk, sizeof nk, "%lldx%lld", (long long)N, (long long)K);
        std::printf("%-10s %-12s %5d %-5s %9.4f %8.1f %8.0f | %9.4f %8.1f %7.2f | %8.1e\n", sh.what, nk, M, fname, ms,
                    flop / ms * 1e-9, wbytes / ms * 1e-6, cms, cms > 0 ? flop / cms * 1e-9 : 0.0,
                    cms > 0 ? cms / ms : 0.0, err);

        // Milliseconds of gemm() on `base` (`a`, or the fused gate | up with
        // two weights) with `path` forced (and the wgmma tile / K splits); 0
        // where that cannot run.
        const auto forced_on = [&](const qsp::kern::GemmArgs& base, qsp::kern::GemmPath path, int wg_tile,
                                   int wg_splits, qsp::kern::WgmmaWeights wgw, int per_sm) {
          const bool dual = base.ep == Epilogue::kSwiGLU;
          qsp::kern::GemmArgs p = base;
          p.path = path;
          p.wg_tile = wg_tile;
          p.wg_splits = wg_splits;
          p.wgmma_weights = wgw;
          p.wg_per_sm = per_sm;
          p.w.data = wq.first();
          if (dual) p.w2.data = wq.first();
          if (qsp::kern::gemm(p, nullptr) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0.0;
          }
          return time_ms([&] {
            p.w.data = wq.take();
            if (dual) p.w2.data = wq.take();
            CK(qsp::kern::gemm(p, nullptr));
          });
        };
        const auto forced_ms = [&](qsp::kern::GemmPath path, int wg_tile = 0, int wg_splits = 0,
                                   qsp::kern::WgmmaWeights wgw = qsp::kern::WgmmaWeights::kAuto, int per_sm = 0) {
          return forced_on(a, path, wg_tile, wg_splits, wgw, per_sm);
        };
        if (M > 16 && f != WFormat::kF16) {
          // Each kernel family forced (the row above is gemm()'s own pick).
          // wgmma twice: its weights per tile (bulk copies) and by tensor maps
          // (the default; docs/API.md, QSP_WGMMA_TMA_W), each with its plan.
          const double t0 = forced_ms(qsp::kern::GemmPath::kMma),
                       t1 = forced_ms(qsp::kern::GemmPath::kWgmma, 0, 0, qsp::kern::WgmmaWeights::kPerTile),
                       t2 = forced_ms(qsp::kern::GemmPath::kWgmma, 0, 0, qsp::kern::WgmmaWeights::kTensorMaps);
          std::printf("%-10s %-12s %5d %-5s   paths: mma.sync %6.1f TFLOPS, wgmma per tile %6.1f TFLOPS, wgmma tensor-map weights %6.1f\n",
                      sh.what, nk, M, fname, t0 > 0 ? flop / t0 * 1e-9 : 0.0, t1 > 0 ? flop / t1 * 1e-9 : 0.0,
                      t2 > 0 ? flop / t2 * 1e-9 : 0.0);
        }
        if (sweep && M > 16 && f != WFormat::kF16) {
          // Every wgmma token tile x K split forced, TFLOPS (- where it cannot
          // run); a second line with the weights by tensor maps, a third with
          // those and the 64-token tile at two blocks per SM (wg_per_sm).
          for (int mode = 0; mode < 3; ++mode) {
            const auto wgw = mode ? qsp::kern::WgmmaWeights::kTensorMaps : qsp::kern::WgmmaWeights::kPerTile;
            std::printf("%-10s %-12s %5d %-5s   wgmma%s tile/splits:", sh.what, nk, M, fname,
                        mode == 0 ? "" : mode == 1 ? " tma_w" : " tma_w 2/SM");
            for (int bt : {256, 128, 64})
              for (int ks : {1, 2, 4, 8}) {
                if (mode == 2 && bt != 64) continue;
                const double t = forced_ms(qsp::kern::GemmPath::kWgmma, bt, ks, wgw, mode == 2 ? 2 : 0);
                if (t > 0) {
                  std::printf(" %d/%d %.1f", bt, ks, flop / t * 1e-9);
                } else {
                  std::printf(" %d/%d -", bt, ks);
                }
              }
            std::printf("\n");
          }
        }
        if (swiglu && (sh.N == 12288 || sh.N == 14336)) {
          // Gate and up in one launch (two weights, one fp16 output).
          qsp::kern::GemmArgs s = a;
          s.ep = Epilogue::kSwiGLU;
          s.w2 = s.w;
          const double sms = time_ms([&] {
            s.w.data = wq.take();
            s.w2.data = wq.take();
            CK(qsp::kern::gemm(s, nullptr));
          });
          std::printf("%-10s %-12s %5d %-5s %9.4f %8.1f %8.0f |  (SwiGLU: gate + up fused)\n", sh.what, nk, M, fname,
                      sms, 2 * flop / sms * 1e-9, 2 * wbytes / sms * 1e-6);
          if (sweep && M > 16 && f != WFormat::kF16) {
            // The fused gate | up with every wgmma token tile x K split
            // forced (weights by tensor maps), then the 64-token tile at two
            // blocks per SM: the plan's data for the decode step's biggest GEMM.
            for (int per_sm : {1, 2}) {
              std::printf("%-10s %-12s %5d %-5s   SwiGLU wgmma tma_w%s tile/splits:", sh.what, nk, M, fname,
                          per_sm == 2 ? " 2/SM" : "");
              for (int bt : {256, 128, 64})
                for (int ks : {1, 2, 4, 8}) {
                  if (per_sm == 2 && bt != 64) continue;
                  const double t = forced_on(s, qsp::kern::GemmPath::kWgmma, bt, ks,
                                             qsp::kern::WgmmaWeights::kTensorMaps, per_sm == 2 ? 2 : 0);
                  if (t > 0)
                    std::printf(" %d/%d %.1f", bt, ks, 2 * flop / t * 1e-9);
                  else
                    std::printf(" %d/%d -", bt, ks);
                }
              std::printf("\n");
            }
          }
        }
        cudaFree(x);
        cudaFree(y);
        cudaFree(yc);
        std::fflush(stdout);
      }
    }
  }
  if (handle) cublasDestroy(handle);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it comes: a timed-out run keeps them
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
}
