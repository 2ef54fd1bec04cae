// The attention-side device ops against CPU fp64 references on fresh random
// data: causal flash attention (prefill, chunked prefill, decode, split-KV,
// CUDA graph replay at moving positions), QK-norm + RoPE + KV-cache write,
// RMSNorm and argmax.
//
// Every output buffer and the whole KV cache are poisoned with 0xFF bytes
// (NaN in fp16 and fp32) before each run: an element a kernel forgets to
// write stays NaN, and an element it must not touch must still be 0xFFFF.
#include <catch2/catch.hpp>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/quant.h"
#include "gpu_util.h"
#include "kernels/kernels.h"

namespace {

namespace kern = qsp::kern;
using qsp::fp16_to_fp32;
using qsp::fp32_to_fp16;

#define CUDA_REQUIRE(expr)                                                   \
  do {                                                                       \
    const cudaError_t cuda_e_ = (expr);                                      \
    INFO(#expr << " -> " << cudaGetErrorString(cuda_e_));                    \
    REQUIRE(cuda_e_ == cudaSuccess);                                         \
  } while (0)

// Device memory that frees itself.
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) {
    const cudaError_t e = cudaMalloc(&p, n ? n : 1);
    INFO("cudaMalloc(" << n << ") -> " << cudaGetErrorString(e));
    REQUIRE(e == cudaSuccess);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void poison() { CUDA_REQUIRE(cudaMemset(p, 0xff, bytes)); }
  template <class T>
  void upload(const std::vector<T>& v) {
    REQUIRE(v.size() * sizeof(T) <= bytes);
    CUDA_REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> v(bytes / sizeof(T));
    CUDA_REQUIRE(cudaMemcpy(v.data(), p, v.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

void set_past(DevBuf& d_past, int32_t past) {
  CUDA_REQUIRE(cudaMemcpy(d_past.p, &past, sizeof(past), cudaMemcpyHostToDevice));
}

bool h_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
constexpr uint16_t kPoison16 = 0xffff;

// ||got - want||_2 / ||want||_2 over paired samples.
struct RelL2 {
  double num = 0.0, den = 0.0;
  void add(double got, double want) {
    num += (got - want) * (got - want);
    den += want * want;
  }
  double value() const { return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num); }
};

std::vector<float> randn(size_t n, double stddev, std::mt19937& rng, double mean = 0.0) {
  std::normal_distribution<double> d(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = float(d(rng));
  return v;
}

// =============================================================================
// Attention
// =============================================================================

struct AttnCase {
  int head_dim, n_heads, n_kv_heads, M, past, max_seq;
};

std::string describe(const AttnCase& c) {
  std::ostringstream s;
  s << "head_dim " << c.head_dim << ", heads " << c.n_heads << "/" << c.n_kv_heads << ", M " << c.M << ", past "
    << c.past << ", max_seq " << c.max_seq;
  return s.str();
}

// Random fp16 Q and a cache filled at positions 0 .. past+M-1 (the rest
// stays poisoned), plus the fp64 reference for chosen tokens.
struct AttnData {
  AttnCase c;
  std::vector<uint16_t> q, k, v;  // q [M][H][D]; k, v [KVH][max_seq][D], 0xFFFF where unwritten
  std::vector<float> qf, kf, vf;  // the same values widened, for the reference
  AttnData(const AttnCase& cs, std::mt19937& rng) : c(cs) {
    const size_t D = c.head_dim;
    q.resize(size_t(c.M) * c.n_heads * D);
    k.assign(size_t(c.n_kv_heads) * c.max_seq * D, kPoison16);
    v.assign(k.size(), kPoison16);
    // Post-QK-norm scale (~1 per element) with a spread of per-key offsets
    // so that softmax rows range from flat to peaked.
    std::normal_distribution<double> nq(0.0, 1.0), nk(0.0, 1.0), nv(0.0, 1.0), amp(1.0, 0.5);
    for (auto& x : q) x = fp32_to_fp16(float(nq(rng)));
    const int L = c.past + c.M;
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int j = 0; j < L; ++j) {
        const double a = std::fabs(amp(rng)) + 0.25;
        for (size_t d = 0; d < D; ++d) {
          const size_t i = (size_t(h) * c.max_seq + j) * D + d;
          k[i] = fp32_to_fp16(float(a * nk(rng)));
          v[i] = fp32_to_fp16(float(nv(rng)));
        }
      }
    auto widen = [](const std::vector<uint16_t>& h) {
      std::vector<float> f(h.size());
      for (size_t i = 0; i < h.size(); ++i) f[i] = fp16_to_fp32(h[i]);
      return f;
    };
    qf = widen(q);
    kf = widen(k);
    vf = widen(v);
  }
  // out[d] for token m, head h, in fp64 from the fp16 inputs.
  void reference(int m, int h, double scale, std::vector<double>& out) const {
    const int D = c.head_dim, group = c.n_heads / c.n_kv_heads, kvh = h / group;
    const int last = c.past + m;
    std::vector<double> qd(D), s(last + 1);
    for (int d = 0; d < D; ++d) qd[d] = qf[(size_t(m) * c.n_heads + h) * D + d];
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j <= last; ++j) {
      const float* kr = &kf[(size_t(kvh) * c.max_seq + j) * D];
      double dot = 0.0;
      for (int d = 0; d < D; ++d) dot += qd[d] * kr[d];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    double sum = 0.0;
    for (int j = 0; j <= last; ++j) sum += (s[j] = std::exp(s[j] - mx));
    out.assign(D, 0.0);
    for (int j = 0; j <= last; ++j) {
      const float* vr = &vf[(size_t(kvh) * c.max_seq + j) * D];
      const double w = s[j] / sum;
      for (int d = 0; d < D; ++d) out[d] += w * vr[d];
    }
  }
};

// Tokens whose rows are compared with the reference: all for short chunks;
// the first and last few plus random ones for long chunks (every row is
// still checked for being written).
std::vector<int> sample_tokens(int M, std::mt19937& rng) {
  std::set<int> t;
  if (M <= 40) {
    for (int m = 0; m < M; ++m) t.insert(m);
  } else {
    for (int m = 0; m < 6; ++m) t.insert(m), t.insert(M - 1 - m);
    std::uniform_int_distribution<int> u(0, M - 1);
    while (int(t.size()) < 28) t.insert(u(rng));
  }
  return std::vector<int>(t.begin(), t.end());
}

// Device state for one attention shape; run() launches at a given past.
struct AttnRig {
  AttnCase c;
  DevBuf q, k, v, out, past, scratch;
  size_t scratch_bytes;
  AttnRig(const AttnCase& cs, bool with_scratch)
      : c(cs),
        q(size_t(cs.M) * cs.n_heads * cs.head_dim * 2),
        k(size_t(cs.n_kv_heads) * cs.max_seq * cs.head_dim * 2),
        v(size_t(cs.n_kv_heads) * cs.max_seq * cs.head_dim * 2),
        out(size_t(cs.M) * cs.n_heads * cs.head_dim * 2),
        past(sizeof(int32_t)),
        scratch(with_scratch ? std::max<size_t>(kern::attention_scratch_bytes(cs.M, cs.n_heads, cs.head_dim,
                                                                               cs.max_seq),
                                                16)
                             : 16),
        scratch_bytes(with_scratch ? kern::attention_scratch_bytes(cs.M, cs.n_heads, cs.head_dim, cs.max_seq) : 0) {}
  void load(const AttnData& d) {
    q.upload(d.q);
    k.upload(d.k);
    v.upload(d.v);
  }
  kern::AttnArgs args() const {
    kern::AttnArgs a;
    a.q = q.as<__half>();
    a.k_cache = k.as<__half>();
    a.v_cache = v.as<__half>();
    a.out = out.as<__half>();
    a.M = c.M;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.max_seq = c.max_seq;
    a.past = past.as<int32_t>();
    a.scale = 1.0f / std::sqrt(float(c.head_dim));
    a.scratch = scratch_bytes ? scratch.p : nullptr;
    a.scratch_bytes = scratch_bytes;
    return a;
  }
};

// Checks every output element is written and the sampled rows match.
void check_attention(const AttnData& d, const std::vector<uint16_t>& out, std::mt19937& rng) {
  const AttnCase& c = d.c;
  INFO(describe(c));
  size_t nan_count = 0;
  for (uint16_t h : out) nan_count += h_is_nan(h) || (h & 0x7c00) == 0x7c00;
  REQUIRE(nan_count == 0);
  RelL2 err;
  double max_abs = 0.0;
  std::vector<double> ref;
  const double sc = double(1.0f / std::sqrt(float(c.head_dim)));  // the scale the kernel is given
  for (int m : sample_tokens(c.M, rng))
    for (int h = 0; h < c.n_heads; ++h) {
      d.reference(m, h, sc, ref);
      for (int i = 0; i < c.head_dim; ++i) {
        const double got = fp16_to_fp32(out[(size_t(m) * c.n_heads + h) * c.head_dim + i]);
        err.add(got, ref[i]);
        max_abs = std::max(max_abs, std::fabs(got - ref[i]));
      }
    }
  INFO("relative L2 error " << err.value() << ", max abs error " << max_abs);
  CHECK(err.value() < 2e-3);
  CHECK(max_abs < 2e-2);
}

}  // namespace

TEST_CASE("attention matches an fp64 reference: prefill, chunked prefill, decode, GQA", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  REQUIRE(kern::attention_supported(64));
  REQUIRE(kern::attention_supported(128));
  REQUIRE_FALSE(kern::attention_supported(96));
  std::mt19937 rng(1234);
  const int heads[][2] = {{8, 8}, {16, 8}, {32, 8}};  // GQA 1, 2, 4
  for (int D : {64, 128})
    for (const auto& hh : heads)
      for (int M : {1, 3, 17, 100, 513, 2048})
        for (int past : {0, 5, 1000}) {
          const AttnCase c{D, hh[0], hh[1], M, past, past + M + 37};
          AttnData d(c, rng);
          AttnRig rig(c, /*with_scratch=*/true);
          rig.load(d);
          rig.out.poison();
          rig.scratch.poison();
          set_past(rig.past, past);
          CUDA_REQUIRE(kern::attention(rig.args(), nullptr));
          CUDA_REQUIRE(cudaDeviceSynchronize());
          check_attention(d, rig.out.download<uint16_t>(), rng);
        }
}

TEST_CASE("attention without split-KV scratch falls back and stays correct", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(77);
  for (int M : {1, 3, 100}) {
    const AttnCase c{128, 32, 8, M, 1500, 1500 + M + 100};
    AttnData d(c, rng);
    AttnRig rig(c, /*with_scratch=*/false);
    rig.load(d);
    rig.out.poison();
    set_past(rig.past, c.past);
    CUDA_REQUIRE(kern::attention(rig.args(), nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    check_attention(d, rig.out.download<uint16_t>(), rng);
  }
}

// One case with split-KV scratch, outputs and scratch poisoned, vs fp64;
// `path` forces a kernel family. Returns false (nothing run) when a forced
// kWgmma reports itself unsupported, which only a non-Hopper device may do.
static bool run_case(const AttnCase& c, std::mt19937& rng, kern::AttnPath path = kern::AttnPath::kAuto) {
  AttnData d(c, rng);
  AttnRig rig(c, true);
  rig.load(d);
  rig.out.poison();
  rig.scratch.poison();
  set_past(rig.past, c.past);
  kern::AttnArgs a = rig.args();
  a.path = path;
  const cudaError_t e = kern::attention(a, nullptr);
  if (path == kern::AttnPath::kWgmma && e == cudaErrorNotSupported) {
    int dev = 0, major = 0;
    CUDA_REQUIRE(cudaGetDevice(&dev));
    CUDA_REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CHECK((major != 9 || c.head_dim != 128));  // Hopper must run it for head_dim 128
    return false;
  }
  CUDA_REQUIRE(e);
  CUDA_REQUIRE(cudaDeviceSynchronize());
  check_attention(d, rig.out.download<uint16_t>(), rng);
  return true;
}

// Small enough for compute-sanitizer's racecheck (minutes, not hours): each
// tile configuration (kBig, kMid, kSmall with split-KV) once.
TEST_CASE("attention: every tile configuration on small shapes", "[gpu][attention][sanitize]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(31);
  const AttnCase cases[] = {{128, 32, 8, 256, 64, 400}, {128, 32, 8, 40, 100, 200}, {128, 32, 8, 1, 900, 1000},
                            {64, 16, 4, 7, 30, 60}};
  for (const AttnCase& c : cases) run_case(c, rng);
  for (const AttnCase& c : cases) run_case(c, rng, kern::AttnPath::kMma);
  // The sm_90a kernel: a tile crossing the cache's valid end (the poisoned
  // V rows must be zeroed) and a group of 5 (125 useful rows per block).
  if (!run_case({128, 32, 8, 40, 100, 200}, rng, kern::AttnPath::kWgmma))
    std::printf("SKIPPED: wgmma attention (needs sm_90a), mma.sync attention still tested\n");
  run_case({128, 10, 2, 33, 7, 60}, rng, kern::AttnPath::kWgmma);
}

// Both kernel families forced on the prompt lengths, past 0 and a
// cached prefix, max_seq past the end (the poisoned tail), GQA groups
// 4, 5, 8 and 1 (gp = group, 5 packs 125 of 128 rows).
TEST_CASE("attention: wgmma and mma.sync paths, each forced", "[gpu][attention][wgmma]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(2026);
  std::vector<AttnCase> cases;
  for (int M : {1, 3, 17, 100, 513, 2048}) {
    cases.push_back({128, 32, 8, M, 0, M + 37});
    cases.push_back({128, 32, 8, M, 300, 300 + M + 129});
  }
  cases.push_back({128, 40, 8, 700, 50, 800});
  cases.push_back({128, 64, 8, 257, 1000, 1300});
  cases.push_back({128, 8, 8, 300, 0, 300});
  cases.push_back({128, 32, 8, 4096, 4096, 8192});
  bool wg = true;
  for (const AttnCase& c : cases) {
    wg = run_case(c, rng, kern::AttnPath::kWgmma) && wg;
    if (c.M >= 100) run_case(c, rng, kern::AttnPath::kMma);
  }
  if (!wg) std::printf("SKIPPED: wgmma attention (needs sm_90a), mma.sync attention still tested\n");
  // head_dim 64 has no wgmma kernel.
  AttnCase c64{64, 16, 4, 300, 0, 400};
  AttnRig rig(c64, true);
  kern::AttnArgs a = rig.args();
  a.path = kern::AttnPath::kWgmma;
  CHECK(kern::attention(a, nullptr) == cudaErrorNotSupported);
  a.path = static_cast<kern::AttnPath>(7);
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("attention: other GQA groupings (1 KV head, group 5, group 8)", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(99);
  const AttnCase cases[] = {
      {128, 8, 1, 1, 700, 800},   {128, 8, 1, 64, 40, 200},   {64, 10, 2, 3, 300, 400},
      {128, 40, 8, 130, 20, 300}, {128, 64, 8, 1, 4000, 4097}, {64, 32, 1, 33, 0, 40},
  };
  for (const AttnCase& c : cases) run_case(c, rng);
}

TEST_CASE("attention decode step captured once in a CUDA graph is right at every position", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(4242);
  for (int D : {64, 128}) {
    // One cache, filled up to its end; each replay attends to a prefix.
    const int max_seq = 3000;
    AttnCase full{D, 32, 8, 1, max_seq - 1, max_seq};
    AttnData d(full, rng);
    AttnRig rig(full, true);
    rig.load(d);
    cudaStream_t stream = nullptr;
    CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    set_past(rig.past, 0);
    CUDA_REQUIRE(kern::attention(rig.args(), stream));  // warm-up outside the capture
    CUDA_REQUIRE(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const cudaError_t launch = kern::attention(rig.args(), stream);
    CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
    CUDA_REQUIRE(launch);
    CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
    for (int past : {0, 1, 63, 64, 65, 700, 2047, max_seq - 1}) {
      AttnData at = d;
      at.c.past = past;  // reference sees keys 0 .. past
      set_past(rig.past, past);
      rig.out.poison();
      CUDA_REQUIRE(cudaDeviceSynchronize());  // the stream is non-blocking: order the copies first
      CUDA_REQUIRE(cudaGraphLaunch(exec, stream));
      CUDA_REQUIRE(cudaStreamSynchronize(stream));
      INFO("graph replay at past " << past);
      check_attention(at, rig.out.download<uint16_t>(), rng);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

TEST_CASE("attention rejects unsupported arguments", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  AttnRig rig(AttnCase{128, 8, 4, 4, 0, 16}, true);
  kern::AttnArgs a = rig.args();
  a.head_dim = 96;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.n_kv_heads = 3;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.past = nullptr;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.M = 0;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.max_seq = 2;  // fewer slots than the chunk
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
}

// =============================================================================
// QK-norm + RoPE + KV write
// =============================================================================

namespace {

struct RopeCase {
  int head_dim, n_heads, n_kv_heads, M, past, max_seq, style;
  bool norm;
};

void run_rope_case(const RopeCase& c, std::mt19937& rng) {
  std::ostringstream what;
  what << "head_dim " << c.head_dim << ", heads " << c.n_heads << "/" << c.n_kv_heads << ", M " << c.M << ", past "
       << c.past << ", max_seq " << c.max_seq << ", style " << c.style << ", qk-norm " << c.norm;
  INFO(what.str());
  const int D = c.head_dim, Q = c.n_heads * D, KV = c.n_kv_heads * D;
  const int ld = Q + 2 * KV + 4;  // padded rows
  // Raw GEMM output: k heads larger than q heads, as in Qwen3 before norm.
  std::vector<float> qkv(size_t(c.M) * ld);
  std::normal_distribution<double> nq(0.0, 1.5), nk(0.0, 6.0), nv(0.0, 1.0);
  for (int m = 0; m < c.M; ++m)
    for (int i = 0; i < ld; ++i)
      qkv[size_t(m) * ld + i] = float(i < Q ? nq(rng) : i < Q + KV ? nk(rng) : i < Q + 2 * KV ? nv(rng) : 1e30);
  std::vector<float> qn = randn(D, 0.2, rng, 1.0), kn = randn(D, 0.2, rng, 1.0);
  const float eps = 1e-6f, theta = c.head_dim == 64 ? 10000.0f : 1000000.0f;

  DevBuf d_qkv(qkv.size() * 4), d_qn(D * 4), d_kn(D * 4), d_q(size_t(c.M) * Q * 2),
      d_k(size_t(c.n_kv_heads) * c.max_seq * D * 2), d_v(size_t(c.n_kv_heads) * c.max_seq * D * 2), d_past(4);
  d_qkv.upload(qkv);
  d_qn.upload(qn);
  d_kn.upload(kn);
  d_q.poison();
  d_k.poison();
  d_v.poison();
  set_past(d_past, c.past);

  kern::QkRopeArgs a;
  a.qkv = d_qkv.as<float>();
  a.ld = ld;
  a.q_norm = c.norm ? d_qn.as<float>() : nullptr;
  a.k_norm = c.norm ? d_kn.as<float>() : nullptr;
  a.q_out = d_q.as<__half>();
  a.k_cache = d_k.as<__half>();
  a.v_cache = d_v.as<__half>();
  a.M = c.M;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = D;
  a.max_seq = c.max_seq;
  a.past = d_past.as<int32_t>();
  a.eps = eps;
  a.theta = theta;
  a.rope_style = c.style;
  CUDA_REQUIRE(kern::qk_rope(a, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
  const std::vector<uint16_t> gq = d_q.download<uint16_t>(), gk = d_k.download<uint16_t>(),
                              gv = d_v.download<uint16_t>();

  // fp64 reference of one head vector.
  auto ref_vec = [&](const float* x, const float* w, int pos, bool rope, std::vector<double>& y) {
    y.assign(x, x + D);
    if (w) {
      double ss = 0.0;
      for (int i = 0; i < D; ++i) ss += double(x[i]) * x[i];
      const double s = 1.0 / std::sqrt(ss / D + double(eps));
      for (int i = 0; i < D; ++i) y[i] = y[i] * s * w[i];
    }
    if (!rope) return;
    for (int i = 0; i < D / 2; ++i) {
      const double ang = double(pos) * std::pow(double(theta), -2.0 * i / D);
      const int i0 = c.style == QSP_ROPE_NEOX ? i : 2 * i, i1 = c.style == QSP_ROPE_NEOX ? i + D / 2 : 2 * i + 1;
      const double a0 = y[i0], b0 = y[i1];
      y[i0] = a0 * std::cos(ang) - b0 * std::sin(ang);
      y[i1] = a0 * std::sin(ang) + b0 * std::cos(ang);
    }
  };

  RelL2 eq, ek, ev;
  std::vector<double> y;
  for (int m = 0; m < c.M; ++m) {
    const int pos = c.past + m;
    const float* row = &qkv[size_t(m) * ld];
    for (int h = 0; h < c.n_heads; ++h) {
      ref_vec(row + h * D, c.norm ? qn.data() : nullptr, pos, true, y);
      for (int i = 0; i < D; ++i) eq.add(fp16_to_fp32(gq[(size_t(m) * c.n_heads + h) * D + i]), y[i]);
    }
    for (int h = 0; h < c.n_kv_heads; ++h) {
      ref_vec(row + Q + h * D, c.norm ? kn.data() : nullptr, pos, true, y);
      for (int i = 0; i < D; ++i) ek.add(fp16_to_fp32(gk[(size_t(h) * c.max_seq + pos) * D + i]), y[i]);
      ref_vec(row + Q + KV + h * D, nullptr, pos, false, y);
      for (int i = 0; i < D; ++i) ev.add(fp16_to_fp32(gv[(size_t(h) * c.max_seq + pos) * D + i]), y[i]);
    }
  }
  INFO("rel L2: q " << eq.value() << ", k " << ek.value() << ", v " << ev.value());
  CHECK(eq.value() < 1e-3);
  CHECK(ek.value() < 1e-3);
  CHECK(ev.value() < 1e-3);

  // Written: exactly positions past .. past+M-1 of every KV head, and none
  // of them NaN; everything else untouched.
  size_t bad_written = 0, touched = 0;
  for (int h = 0; h < c.n_kv_heads; ++h)
    for (int j = 0; j < c.max_seq; ++j)
      for (int i = 0; i < D; ++i) {
        const size_t idx = (size_t(h) * c.max_seq + j) * D + i;
        const bool in_chunk = j >= c.past && j < c.past + c.M;
        for (const std::vector<uint16_t>* cache : {&gk, &gv}) {
          const uint16_t x = (*cache)[idx];
          if (in_chunk)
            bad_written += h_is_nan(x);
          else
            touched += x != kPoison16;
        }
      }
  size_t q_nan = 0;
  for (uint16_t x : gq) q_nan += h_is_nan(x);
  CHECK(bad_written == 0);
  CHECK(touched == 0);
  CHECK(q_nan == 0);
}

}  // namespace

TEST_CASE("qk_rope matches an fp64 reference and writes exactly the chunk's cache slots", "[gpu][qk_rope]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(555);
  for (int D : {64, 128})
    for (int style : {QSP_ROPE_NEOX, QSP_ROPE_INTERLEAVED})
      for (bool norm : {false, true})
        for (int M : {1, 7, 100})
          for (int past : {0, 5, 1000}) run_rope_case(RopeCase{D, 16, 8, M, past, past + M + 50, style, norm}, rng);
}

TEST_CASE("qk_rope angles stay accurate at long positions", "[gpu][qk_rope]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(556);
  for (int style : {QSP_ROPE_NEOX, QSP_ROPE_INTERLEAVED})
    for (bool norm : {false, true}) {
      run_rope_case(RopeCase{128, 4, 2, 9, 32759, 32768, style, norm}, rng);  // ends at the last slot
      run_rope_case(RopeCase{64, 4, 1, 3, 30000, 30100, style, norm}, rng);
    }
}

TEST_CASE("qk_rope rejects unsupported arguments", "[gpu][qk_rope]") {
  QSP_REQUIRE_GPU();
  DevBuf buf(1 << 20), past(4);
  kern::QkRopeArgs a;
  a.qkv = buf.as<float>();
  a.q_out = a.k_cache = a.v_cache = buf.as<__half>();
  a.past = past.as<int32_t>();
  a.M = 1, a.n_heads = 2, a.n_kv_heads = 1, a.head_dim = 96, a.max_seq = 8, a.ld = 4 * 96;
  CHECK(kern::qk_rope(a, nullptr) == cudaErrorInvalidValue);
  a.head_dim = 64, a.ld = 100;  // ld shorter than q + k + v
  CHECK(kern::qk_rope(a, nullptr) == cudaErrorInvalidValue);
  a.ld = 256, a.rope_style = 7;
  CHECK(kern::qk_rope(a, nullptr) == cudaErrorInvalidValue);
}

// =============================================================================
// RMSNorm
// =============================================================================

TEST_CASE("rmsnorm_f16 matches an fp64 reference (vector and scalar paths)", "[gpu][rmsnorm]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(31337);
  struct Case {
    int M, dim, pad;
  };
  // pad % 4 != 0 or dim % 4 != 0 takes the scalar path; dim > 8192 too.
  const Case cases[] = {{1, 64, 0},    {5, 4096, 4},  {33, 5120, 0}, {3, 1000, 4}, {7, 1022, 2},
                        {2, 4096, 3},  {4, 9000, 8},  {1, 8192, 0},  {64, 2048, 4}, {2, 3, 1}};
  for (const Case& c : cases) {
    INFO("M " << c.M << ", dim " << c.dim << ", ldx " << c.dim + c.pad);
    const int ldx = c.dim + c.pad;
    // A residual stream with a few large outliers per row.
    std::vector<float> x = randn(size_t(c.M) * ldx, 2.0, rng);
    for (int m = 0; m < c.M; ++m) x[size_t(m) * ldx + (m * 37) % c.dim] = 60.0f;
    const std::vector<float> w = randn(c.dim, 0.1, rng, 1.0);
    DevBuf dx(x.size() * 4), dw(w.size() * 4), dy((size_t(c.M) * c.dim + 64) * 2);
    dx.upload(x);
    dw.upload(w);
    dy.poison();
    const float eps = 1e-5f;
    CUDA_REQUIRE(kern::rmsnorm_f16(dx.as<float>(), ldx, dw.as<float>(), dy.as<__half>(), c.M, c.dim, eps, nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::vector<uint16_t> y = dy.download<uint16_t>();
    RelL2 err;
    for (int m = 0; m < c.M; ++m) {
      double ss = 0.0;
      for (int i = 0; i < c.dim; ++i) ss += double(x[size_t(m) * ldx + i]) * x[size_t(m) * ldx + i];
      const double s = 1.0 / std::sqrt(ss / c.dim + double(eps));
      for (int i = 0; i < c.dim; ++i) err.add(fp16_to_fp32(y[size_t(m) * c.dim + i]), x[size_t(m) * ldx + i] * s * w[i]);
    }
    size_t past_end_touched = 0;
    for (size_t i = size_t(c.M) * c.dim; i < y.size(); ++i) past_end_touched += y[i] != kPoison16;
    INFO("relative L2 error " << err.value());
    CHECK(err.value() < 1e-3);
    CHECK(past_end_touched == 0);
  }
}

// =============================================================================
// Argmax
// =============================================================================

namespace {

int32_t gpu_argmax(const std::vector<float>& v, size_t offset_floats = 0) {
  DevBuf d((v.size() + offset_floats) * 4), out(4);
  CUDA_REQUIRE(cudaMemcpy(d.as<float>() + offset_floats, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  out.poison();
  CUDA_REQUIRE(kern::argmax(d.as<float>() + offset_floats, int32_t(v.size()), out.as<int32_t>(), nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
  return out.download<int32_t>()[0];
}

int32_t cpu_argmax(const std::vector<float>& v) {
  int32_t best = -1;
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = int32_t(i);
  return best < 0 ? 0 : best;
}

}  // namespace

TEST_CASE("argmax: lowest index of the maximum, NaN never wins", "[gpu][argmax]") {
  QSP_REQUIRE_GPU();
  std::mt19937 rng(2024);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 2, 5, 1000, 4097, 151936, 200003}) {
    std::vector<float> v = randn(size_t(n), 3.0, rng);
    INFO("n " << n);
    CHECK(gpu_argmax(v) == cpu_argmax(v));
    CHECK(gpu_argmax(v, 1) == cpu_argmax(v));  // unaligned: scalar path
    if (n >= 5) {
      // Ties: the lower index wins, wherever the two sit.
      std::uniform_int_distribution<int> u(0, n - 1);
      int a = u(rng), b = u(rng);
      if (a == b) b = (a + 1) % n;
      if (a > b) std::swap(a, b);
      v[a] = v[b] = 100.0f;
      CHECK(gpu_argmax(v) == a);
      v[n - 1] = 100.0f;  // a third one at the very end (the tail)
      CHECK(gpu_argmax(v) == a);
      // NaN larger-looking neighbours and NaN at index 0 never win.
      v[0] = nan;
      v[a == 0 ? 1 : 0] = nan;
      for (int i = 0; i < n; i += 97) v[i] = nan;
      CHECK(gpu_argmax(v) == cpu_argmax(v));
      v[n / 2] = inf;
      CHECK(gpu_argmax(v) == cpu_argmax(v));
    }
  }
  CHECK(gpu_argmax(std::vector<float>(10, nan)) == 0);          // all NaN
  CHECK(gpu_argmax(std::vector<float>(151936, nan)) == 0);
  CHECK(gpu_argmax(std::vector<float>(9, -inf)) == 0);          // all -inf: the first
  CHECK(gpu_argmax({nan, -inf, -inf, nan}) == 1);               // -inf beats NaN
  CHECK(gpu_argmax({-5.0f, -5.0f, -7.0f}) == 0);
  std::vector<float> last(151936, -1.0f);
  last.back() = 0.0f;
  CHECK(gpu_argmax(last) == 151935);
  DevBuf out(4);
  CHECK(kern::argmax(nullptr, 10, out.as<int32_t>(), nullptr) == cudaErrorInvalidValue);
}
