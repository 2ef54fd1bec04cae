// The CUDA backend: the whole prefill on one device, one stream per context,
// no host round trip inside a chunk. The layer is
//
//   rmsnorm_f16 -> gemm(wq|wk|wv -> qkv fp32) -> qk_rope (+KV write)
//   -> attention (one launch, whole chunk) -> gemm(wo, += residual)
//   -> rmsnorm_f16 -> gemm(gate, up; SwiGLU epilogue) -> gemm(down, += residual)
//
// and after the last layer: rmsnorm of the last token -> LM-head GEMV -> argmax.
// Positions reach the kernels through a device int (`d_past_`), so the decode
// step (one token) is captured once in a CUDA graph and replayed at every
// position.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "common/quant.h"
#include "engine/backend.h"
#include "kernels/kernels.h"

namespace qsp {
namespace {

[[noreturn]] void throw_cuda(cudaError_t e, const char* what) {
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
std::atomic<uint64_t> g_device_bytes{0};

bool over_cap(size_t n) {
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

class CudaTensor : public Tensor {
 public:
  CudaTensor(const TensorMeta& m, int device) : Tensor(m), device_(device) {}
  ~CudaTensor() override {
    if (buf.ptr) {
      int prev = -1;
      cudaGetDevice(&prev);
      cudaSetDevice(device_);
      buf.release();
      if (prev >= 0) cudaSetDevice(prev);
    }
  }
  DeviceBuffer buf;
  kern::DWeight w;           // matrices
  const float* vec = nullptr;  // vectors (fp32)

 private:
  int device_;
};

const CudaTensor& cu(const TensorRef& t) { return static_cast<const CudaTensor&>(*t); }
const kern::DWeight& W(const TensorRef& t) { return cu(t).w; }
const float* V(const TensorRef& t) { return t ? cu(t).vec : nullptr; }

// Tokens per chunk: bounds the activation scratch (about 90 KB per token for
// an 8B-shaped model); longer prompts are split by the engine, attention
// reads the earlier chunks from the KV cache.
constexpr uint32_t kCudaChunk = 4096;

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelConfig& cfg, int device) : cfg_(cfg), dev_(device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      cudaGetLastError();
      throw Error(QSP_ERR_NO_DEVICE, e != cudaSuccess ? strprintf("no usable CUDA device: %s", cudaGetErrorString(e))
                                                     : std::string("no CUDA device present"));
    }
    QSP_FAIL_IF(device >= count, QSP_ERR_NO_DEVICE, "device_index %d, but only %d CUDA device(s)", device, count);
    QSP_CUDA_CHECK(cudaSetDevice(dev_));
    QSP_CUDA_CHECK(cudaGetDeviceProperties(&prop_, dev_));
    QSP_FAIL_IF(prop_.major < 8, QSP_ERR_UNSUPPORTED, "%s is compute capability %d.%d; qsp needs 8.0 or newer",
                prop_.name, prop_.major, prop_.minor);
    QSP_FAIL_IF(!kern::attention_supported(int32_t(cfg.head_dim)), QSP_ERR_UNSUPPORTED,
                "the CUDA backend supports head_dim 64 and 128, not %u", cfg.head_dim);
    QSP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_holder_.s, cudaStreamNonBlocking));
    stream_ = stream_holder_.s;

    chunk_ = std::min(kCudaChunk, cfg.max_seq);
    const size_t C = chunk_, H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), F = cfg.ffn;
    qkv_ld_ = int32_t(Q + 2 * KV);
    const size_t kv_elems = size_t(cfg.n_layers) * cfg.n_kv_heads * cfg.max_seq * cfg.head_dim;
    k_cache_.alloc(kv_elems * sizeof(__half), "KV cache (keys)");
    v_cache_.alloc(kv_elems * sizeof(__half), "KV cache (values)");
    x_.alloc(C * H * sizeof(float), "residual stream");
    xn_.alloc(C * H * sizeof(__half), "normed activations");
    qkv_.alloc(C * qkv_ld_ * sizeof(float), "qkv");
    q_.alloc(C * Q * sizeof(__half), "queries");
    att_.alloc(C * Q * sizeof(__half), "attention output");
    act_.alloc(C * F * sizeof(__half), "SwiGLU output");
    logits_.alloc(size_t(cfg.vocab) * sizeof(float), "logits");
    small_.alloc((2 + C) * sizeof(int32_t), "positions/tokens");
    attn_scratch_bytes_ = kern::attention_scratch_bytes(int32_t(C), int32_t(cfg.n_heads), int32_t(cfg.head_dim),
                                                        int32_t(cfg.max_seq));
    if (attn_scratch_bytes_) attn_scratch_.alloc(attn_scratch_bytes_, "attention scratch");
    h_small_.alloc((2 + C) * sizeof(int32_t), "positions/tokens");
    h_logits_.alloc(size_t(cfg.vocab) * sizeof(float), "logits");
    // Test aid: NaN-fill scratch, logits and the KV slots a chunk is about to
    // write, so that an element a kernel forgets shows up as NaN in the tests.
    const char* poison = std::getenv("QSP_POISON");
    poison_ = poison && *poison && std::strcmp(poison, "0") != 0;
  }

  ~CudaBackend() override {
    cudaSetDevice(dev_);
    cudaStreamSynchronize(stream_);
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  }

  int32_t kind() const override { return QSP_BACKEND_CUDA; }
  int32_t device() const override { return dev_; }
  std::string device_name() const override { return prop_.name; }
  int32_t n_threads() const override { return 1; }
  uint64_t kv_bytes() const override { return k_cache_.bytes + v_cache_.bytes; }
  uint64_t scratch_bytes() const override {
    return x_.bytes + xn_.bytes + qkv_.bytes + q_.bytes + att_.bytes + act_.bytes + logits_.bytes + small_.bytes +
           attn_scratch_.bytes;
  }
  uint32_t max_chunk() const override { return chunk_; }

  void check_supported(const TensorMeta& m, const char* slot) const override {
    if (m.role == TensorRole::kVector) return;
    QSP_FAIL_IF(!kern::format_supported(m.dtype), QSP_ERR_UNSUPPORTED, "%s: the CUDA backend has no kernels for %s weights yet", slot,
                fmt::name(m.dtype));
    const char* why = nullptr;
    QSP_FAIL_IF(!kern::gemm_supported(kern::format_for(m.dtype), int64_t(m.rows), int64_t(m.cols), &why),
                QSP_ERR_UNSUPPORTED, "%s: the CUDA GEMM does not support %s %llux%llu: %s", slot,
                fmt::name(m.dtype), (unsigned long long)m.rows, (unsigned long long)m.cols, why ? why : "");
  }

  std::unique_ptr<Tensor> upload(const TensorMeta& m, const void* data) override {
    QSP_CUDA_CHECK(cudaSetDevice(dev_));
    std::unique_ptr<CudaTensor> t(new CudaTensor(m, dev_));
    std::vector<uint8_t> host;
    if (m.role == TensorRole::kVector) {
      host.resize(m.cols * sizeof(float));
      fmt::dequantize_row(m.dtype, data, reinterpret_cast<float*>(host.data()), m.cols);
    } else {
      const kern::WFormat f = kern::format_for(m.dtype);
      host.resize(kern::dweight_bytes(f, int64_t(m.rows), int64_t(m.cols)));
      kern::repack_weight(m.dtype, data, int64_t(m.rows), int64_t(m.cols), host.data());
      t->w.fmt = f;
      t->w.rows = int32_t(m.rows);
      t->w.cols = int32_t(m.cols);
    }
    t->buf.alloc(host.size(), "weight upload");
    QSP_CUDA_CHECK(cudaMemcpyAsync(t->buf.ptr, host.data(), host.size(), cudaMemcpyHostToDevice, stream_));
    QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    t->stored_bytes = host.size();
    if (m.role == TensorRole::kVector) {
      t->vec = static_cast<const float*>(t->buf.ptr);
    } else {
      t->w.data = t->buf.ptr;
    }
    return std::unique_ptr<Tensor>(t.release());
  }

  void prefill(const ModelTensors& w, const PrefillChunk& c) override {
    QSP_CUDA_CHECK(cudaSetDevice(dev_));
    int32_t* hs = static_cast<int32_t*>(h_small_.ptr);
    hs[0] = int32_t(c.past);
    if (c.tokens) std::memcpy(hs + 2, c.tokens, c.n * sizeof(int32_t));
    logits_fresh_ = false;

    const bool decode = c.n == 1 && c.tokens && c.want_logits;
    if (decode && use_graph_) {
      if (graph_exec_ && !same_weights(w)) {
        cudaGraphExecDestroy(graph_exec_);
        graph_exec_ = nullptr;
      }
      if (!graph_exec_) capture_decode(w, c);
      if (graph_exec_) {
        QSP_CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_));
        QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return;
      }
    }
    enqueue(w, c);
    QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    QSP_CUDA_CHECK(cudaGetLastError());
  }

  const float* logits() override {
    if (!logits_fresh_) {
      QSP_CUDA_CHECK(cudaSetDevice(dev_));
      QSP_CUDA_CHECK(cudaMemcpyAsync(h_logits_.ptr, logits_.ptr, logits_.bytes, cudaMemcpyDeviceToHost, stream_));
      QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
      logits_fresh_ = true;
    }
    return static_cast<const float*>(h_logits_.ptr);
  }

  int32_t greedy_token() override { return static_cast<const int32_t*>(h_small_.ptr)[1]; }

 private:
  // Enqueues one chunk on the stream (also used while capturing the graph).
  void enqueue(const ModelTensors& w, const PrefillChunk& c, bool capturing = false) {
    const ModelConfig& m = cfg_;
    const int32_t n = int32_t(c.n), H = int32_t(m.hidden), Q = int32_t(m.q_dim()), KV = int32_t(m.kv_dim()),
                  F = int32_t(m.ffn);
    int32_t* d_small = as<int32_t>(small_);
    int32_t* d_past = d_small;
    int32_t* d_argmax = d_small + 1;
    int32_t* d_tokens = d_small + 2;
    int32_t* hs = static_cast<int32_t*>(h_small_.ptr);
    // Position (and tokens) from pinned memory: in a graph these are memcpy
    // nodes reading the same pinned addresses, refilled before each replay.
    if (poison_) poison_scratch(c, capturing);
    QSP_CUDA_CHECK(cudaMemcpyAsync(d_past, hs, sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    float* x = as<float>(x_);
    if (c.tokens) {
      QSP_CUDA_CHECK(cudaMemcpyAsync(d_tokens, hs + 2, c.n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
      QSP_CUDA_CHECK(kern::embed(W(w[kTokenEmbd]), d_tokens, n, x, stream_));
    } else {
      QSP_CUDA_CHECK(cudaMemcpyAsync(x, c.embeddings, size_t(c.n) * H * sizeof(float), cudaMemcpyHostToDevice,
                                     stream_));
    }
    __half* xn = as<__half>(xn_);
    float* qkv = as<float>(qkv_);
    const size_t layer_kv = size_t(m.n_kv_heads) * m.max_seq * m.head_dim;
    for (uint32_t l = 0; l < m.n_layers; ++l) {
      const LayerTensors& L = w.layers[l];
      __half* kc = as<__half>(k_cache_) + l * layer_kv;
      __half* vc = as<__half>(v_cache_) + l * layer_kv;

      QSP_CUDA_CHECK(kern::rmsnorm_f16(x, H, V(L[kAttnNorm]), xn, n, H, m.rms_eps, stream_));
      {
        // Q | K | V are adjacent columns of qkv: one launch where the formats allow.
        const kern::DWeight &wq = W(L[kWq]), &wk = W(L[kWk]), &wv = W(L[kWv]);
        const bool grouped = kern::gemm_row_group_ok(wq) && kern::gemm_row_group_ok(wk) && wk.fmt == wq.fmt &&
                             wv.fmt == wq.fmt && int64_t(wq.rows) == Q && int64_t(wk.rows) == KV;
        if (grouped) {
          const kern::DWeight cat[2] = {wk, wv};
          gemm(xn, H, n, wq, nullptr, kern::Epilogue::kStoreF32, nullptr, qkv, qkv_ld_, cat);
        } else {
          gemm(xn, H, n, wq, nullptr, kern::Epilogue::kStoreF32, nullptr, qkv, qkv_ld_);
          gemm(xn, H, n, wk, nullptr, kern::Epilogue::kStoreF32, nullptr, qkv + Q, qkv_ld_);
          gemm(xn, H, n, wv, nullptr, kern::Epilogue::kStoreF32, nullptr, qkv + Q + KV, qkv_ld_);
        }
      }

      kern::QkRopeArgs r;
      r.qkv = qkv;
      r.ld = qkv_ld_;
      r.q_norm = V(L[kQNorm]);
      r.k_norm = V(L[kKNorm]);
      r.q_out = as<__half>(q_);
      r.k_cache = kc;
      r.v_cache = vc;
      r.M = n;
      r.n_heads = int32_t(m.n_heads);
      r.n_kv_heads = int32_t(m.n_kv_heads);
      r.head_dim = int32_t(m.head_dim);
      r.max_seq = int32_t(m.max_seq);
      r.past = d_past;
      r.eps = m.rms_eps;
      r.theta = m.rope_theta;
      r.rope_style = m.rope_style;
      QSP_CUDA_CHECK(kern::qk_rope(r, stream_));

      kern::AttnArgs a;
      a.q = as<__half>(q_);
      a.k_cache = kc;
      a.v_cache = vc;
      a.out = as<__half>(att_);
      a.M = n;
      a.n_heads = int32_t(m.n_heads);
      a.n_kv_heads = int32_t(m.n_kv_heads);
      a.head_dim = int32_t(m.head_dim);
      a.max_seq = int32_t(m.max_seq);
      a.past = d_past;
      a.scale = 1.0f / std::sqrt(float(m.head_dim));
      a.scratch = attn_scratch_.ptr;
      a.scratch_bytes = attn_scratch_bytes_;
      QSP_CUDA_CHECK(kern::attention(a, stream_));

      gemm(as<__half>(att_), Q, n, W(L[kWo]), nullptr, kern::Epilogue::kAddF32, nullptr, x, H);
      QSP_CUDA_CHECK(kern::rmsnorm_f16(x, H, V(L[kFfnNorm]), xn, n, H, m.rms_eps, stream_));
      gemm(xn, H, n, W(L[kWGate]), &W(L[kWUp]), kern::Epilogue::kSwiGLU, as<__half>(act_), nullptr, F);
      gemm(as<__half>(act_), F, n, W(L[kWDown]), nullptr, kern::Epilogue::kAddF32, nullptr, x, H);
    }
    if (!c.want_logits) return;
    QSP_CUDA_CHECK(kern::rmsnorm_f16(x + size_t(n - 1) * H, H, V(w[kOutputNorm]), xn, 1, H, m.rms_eps, stream_));
    gemm(xn, H, 1, W(w[kLmHead]), nullptr, kern::Epilogue::kStoreF32, nullptr, as<float>(logits_), int32_t(m.vocab));
    QSP_CUDA_CHECK(kern::argmax(as<float>(logits_), int32_t(m.vocab), d_argmax, stream_));
    QSP_CUDA_CHECK(cudaMemcpyAsync(hs + 1, d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  }

  void poison_scratch(const PrefillChunk& c, bool capturing) {
    for (DeviceBuffer* b : {&x_, &xn_, &qkv_, &q_, &att_, &act_, &logits_})
      QSP_CUDA_CHECK(cudaMemsetAsync(b->ptr, 0xff, b->bytes, stream_));
    // A captured graph replays at other positions: only poison KV eagerly.
    if (capturing) return;
    const size_t row = size_t(cfg_.max_seq) * cfg_.head_dim * sizeof(__half);
    const size_t skip = size_t(c.past) * cfg_.head_dim * sizeof(__half);
    for (DeviceBuffer* b : {&k_cache_, &v_cache_})
      QSP_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(b->ptr) + skip, row, 0xff, row - skip,
                                       size_t(cfg_.n_layers) * cfg_.n_kv_heads, stream_));
  }

  // cat: optional, two more weights whose rows follow w's (kern::GemmArgs::wcat).
  void gemm(const __half* x, int32_t ldx, int32_t M, const kern::DWeight& w, const kern::DWeight* w2,
            kern::Epilogue ep, __half* out_h, float* out_f, int32_t ldo, const kern::DWeight* cat = nullptr) {
    kern::GemmArgs g;
    g.x = x;
    g.ldx = ldx;
    g.M = M;
    g.w = w;
    if (w2) g.w2 = *w2;
    if (cat) g.wcat[0] = cat[0], g.wcat[1] = cat[1];
    g.ep = ep;
    g.out_h = out_h;
    g.out_f = out_f;
    g.ldo = ldo;
    QSP_CUDA_CHECK(kern::gemm(g, stream_));
  }

  // The decode graph bakes in weight pointers: remember which tensors it used.
  std::vector<const Tensor*> weight_ids(const ModelTensors& w) const {
    std::vector<const Tensor*> ids;
    for (const LayerTensors& L : w.layers)
      for (const TensorRef* t : {&L[kAttnNorm], &L[kWq], &L[kWk], &L[kWv], &L[kQNorm], &L[kKNorm], &L[kWo], &L[kFfnNorm],
                                 &L[kWGate], &L[kWUp], &L[kWDown]})
        ids.push_back(t->get());
    ids.push_back(w[kTokenEmbd].get());
    ids.push_back(w[kOutputNorm].get());
    ids.push_back(w[kLmHead].get());
    return ids;
  }
  bool same_weights(const ModelTensors& w) const { return weight_ids(w) == graph_weights_; }

  void capture_decode(const ModelTensors& w, const PrefillChunk& c) {
    cudaGraph_t graph = nullptr;
    QSP_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(w, c, /*capturing=*/true);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    QSP_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaError_t e = cudaGraphInstantiate(&graph_exec_, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      // Run eagerly from now on rather than fail the user's decode step.
      cudaGetLastError();
      graph_exec_ = nullptr;
      use_graph_ = false;
      return;
    }
    graph_weights_ = weight_ids(w);
  }

  ModelConfig cfg_;
  int dev_;
  cudaDeviceProp prop_{};
  Stream stream_holder_;  // declared before the buffers: destroyed after them
  cudaStream_t stream_ = nullptr;
  uint32_t chunk_ = 0;
  int32_t qkv_ld_ = 0;
  DeviceBuffer k_cache_, v_cache_;  // [layer][kv_head][max_seq][head_dim] fp16
  DeviceBuffer x_, xn_, qkv_, q_, att_, act_, logits_, small_, attn_scratch_;
  size_t attn_scratch_bytes_ = 0;
  PinnedBuffer h_small_;  // [0] past, [1] argmax, [2..] tokens
  PinnedBuffer h_logits_;
  bool logits_fresh_ = false;
  bool use_graph_ = true;
  bool poison_ = false;
  cudaGraphExec_t graph_exec_ = nullptr;
  std::vector<const Tensor*> graph_weights_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, int32_t device_index) {
  return std::unique_ptr<Backend>(new CudaBackend(cfg, device_index));
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace qsp
