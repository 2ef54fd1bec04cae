// The CUDA backend, set-up: devices, ranks and their buffers, NCCL, and the
// weight upload (src/cuda/cuda_backend.h has the design).
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/error.h"
#include "formats/format.h"

namespace qsp {
namespace cuda_impl {

// devices: the device of each shard of `part` (all one device, or one
// device per shard: engine/context.cpp).
CudaBackend::CudaBackend(const ModelConfig& cfg, const Partition& part, const std::vector<int32_t>& devices)
    : cfg_(cfg),
      part_(part),
      n_sh_(part.size()),
      sh_heads_(int32_t(part.heads(0).size())),
      sh_kv_heads_(int32_t(part.kv_heads(0).size())),
      sh_q_(int32_t(part.range(Dim::kQDim, 0).size())),
      sh_kv_(int32_t(part.range(Dim::kKVDim, 0).size())),
      sh_ffn_(int32_t(part.range(Dim::kFfn, 0).size())) {
  QSP_FAIL_IF(devices.size() != n_sh_, QSP_ERR_INTERNAL, "%zu devices for %u shards", devices.size(), n_sh_);
  const bool one_device = std::all_of(devices.begin(), devices.end(), [&](int32_t d) { return d == devices[0]; });
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw Error(QSP_ERR_NO_DEVICE, e != cudaSuccess ? strprintf("no usable CUDA device: %s", cudaGetErrorString(e))
                                                   : std::string("no CUDA device present"));
  }
  for (int32_t d : devices)
    QSP_FAIL_IF(d >= count, QSP_ERR_NO_DEVICE, "device_index %d, but only %d CUDA device(s)", d, count);
  QSP_FAIL_IF(!kern::attention_supported(int32_t(cfg.head_dim)), QSP_ERR_UNSUPPORTED,
              "the CUDA backend supports head_dim 64 and 128, not %u", cfg.head_dim);
  poison_ = env_flag("QSP_POISON");
  norm_in_ = env_not_off("QSP_NORM_IN");
  // QSP_GRAPHS=0: every chunk and batched pass eager (a diagnostic: what the
  // graphs save, or cost).
  if (const char* g = std::getenv("QSP_GRAPHS"); g && std::strcmp(g, "0") == 0) {
    graphs_.disable();
    batch_graphs_.disable();
  }

  chunk_ = std::min(kCudaChunk, cfg.max_seq);
  // Every shard holds as many heads / KV heads / features as the others
  // (Partition); a rank's buffers serve its shards in turn.
  qkv_ld_ = int32_t(sh_q_ + 2 * sh_kv_);
  shard_kv_elems_ = size_t(cfg.n_layers) * size_t(sh_kv_heads_) * cfg.max_seq * cfg.head_dim;
  const SlotDesc& head = kModelSlots[kLmHead];
  local_ranks_ = one_device && n_sh_ > 1 && env_flag("QSP_TP_LOCAL_RANKS");
  const bool rank_per_shard = !one_device || local_ranks_;
  const uint32_t n_ranks = rank_per_shard ? n_sh_ : 1;
  for (uint32_t i = 0; i < n_ranks; ++i) {
    ranks_.emplace_back(new Rank);
    Rank& r = *ranks_.back();
    r.dev = devices[i];
    r.first = rank_per_shard ? i : 0;
    r.count = rank_per_shard ? 1 : n_sh_;
    r.vocab_begin = part.rows(head, r.first).begin;
    r.vocab_end = part.rows(head, r.first + r.count - 1).end;
    init_rank(r);
    streams_.push_back(r.stream);
    devs_.push_back(r.dev);
  }
  if (local_ranks_) {
    for (auto& r : ranks_) QSP_CUDA_CHECK(cudaEventCreateWithFlags(&r->reduced.e, cudaEventDisableTiming));
  } else if (n_ranks > 1 || env_flag("QSP_NCCL_ONE_RANK")) {
    init_nccl();
  }
  reduce_ = local_ranks_ || ranks_[0]->comm != nullptr;
  // The overlapped all-reduces (tp_overlapped): their streams and events.
  const bool ov_set = std::getenv("QSP_TP_OVERLAP") != nullptr;
  tp_overlap_ = ranks_[0]->comm != nullptr && (ov_set ? env_flag("QSP_TP_OVERLAP") : n_ranks > 1);
  if (tp_overlap_) {
    for (auto& r : ranks_) {
      QSP_CUDA_CHECK(cudaSetDevice(r->dev));
      QSP_CUDA_CHECK(cudaStreamCreateWithFlags(&r->comm_stream_holder.s, cudaStreamNonBlocking));
      r->comm_stream = r->comm_stream_holder.s;
      for (int h = 0; h < 2; ++h) {
        QSP_CUDA_CHECK(cudaEventCreateWithFlags(&r->ready[h].e, cudaEventDisableTiming));
        QSP_CUDA_CHECK(cudaEventCreateWithFlags(&r->done[h].e, cudaEventDisableTiming));
      }
    }
    QSP_CUDA_CHECK(cudaSetDevice(ranks_[0]->dev));
  }
  h_logits_.alloc(size_t(cfg.vocab) * sizeof(float), "logits");
}

CudaBackend::~CudaBackend() {
  for (auto& r : ranks_) {
    cudaSetDevice(r->dev);
    cudaStreamSynchronize(r->stream);
  }
  graphs_.drop();
  batch_graphs_.drop();
  for (auto& r : ranks_)
    if (r->comm) nccl_->comm_destroy(r->comm);
  log_upload_stats();
  // Each rank's stream and memory freed on its own device.
  for (auto& r : ranks_) {
    cudaSetDevice(r->dev);
    r.reset();
  }
}

std::string CudaBackend::device_name() const {
  const std::string name = ranks_[0]->prop.name;
  if (n_sh_ == 1) return name;
  if (ranks_.size() == 1) return strprintf("%s (%u shards)", name.c_str(), n_sh_);
  std::string list;
  for (const auto& r : ranks_) list += (list.empty() ? "" : ", ") + std::to_string(r->dev);
  return strprintf("%s (%u shards on devices %s)", name.c_str(), n_sh_, list.c_str());
}

uint64_t CudaBackend::kv_bytes() const {
  uint64_t b = 0;
  for (const auto& r : ranks_) b += r->k_cache.bytes + r->v_cache.bytes;
  return b;
}

uint64_t CudaBackend::scratch_bytes() const {
  uint64_t b = 0;
  for (const auto& r : ranks_)
    b += r->x.bytes + r->xn.bytes + r->qkv.bytes + r->q.bytes + r->att.bytes + r->act.bytes + r->logits.bytes +
         r->small.bytes + r->attn_scratch.bytes + r->i8_stage.bytes;
  return b;
}

void CudaBackend::check_supported(const TensorMeta& m, const SlotDesc& slot, const char* where) const {
  if (m.role == TensorRole::kVector) return;
  QSP_FAIL_IF(!kern::format_supported(m.dtype), QSP_ERR_UNSUPPORTED,
              "%s: the CUDA backend has no kernels for %s weights yet", where, fmt::name(m.dtype));
  // Each shard's piece is a matrix of its own.
  const uint32_t cuts = slot.split == Split::kNone ? 1 : n_sh_;
  for (uint32_t s = 0; s < cuts; ++s) {
    const uint64_t rows = part_.rows(slot, s).size(), cols = part_.cols(slot, s).size();
    const char* why = nullptr;
    QSP_FAIL_IF(!kern::gemm_supported(kern::format_for(m.dtype), int64_t(rows), int64_t(cols), &why),
                QSP_ERR_UNSUPPORTED, "%s: the CUDA GEMM does not support %s %llux%llu%s: %s", where,
                fmt::name(m.dtype), (unsigned long long)rows, (unsigned long long)cols,
                cuts > 1 ? strprintf(" (shard %u of %u)", s, n_sh_).c_str() : "", why ? why : "");
  }
}

// The plain tensor (0) where this context keeps a slot as one piece on its
// one device; else a variant per form: the shard count and the side cut,
// and for a context spanning devices the devices too (every slot is then
// a piece per device).
uint64_t CudaBackend::cache_variant(const SlotDesc& slot) const {
  if (pieces(slot) == 1) return 0;
  uint64_t mask = 0;
  if (ranks_.size() > 1)
    for (const auto& r : ranks_) mask |= uint64_t(1) << r->dev;
  return mask << 32 | uint64_t(n_sh_) << 8 | uint64_t(slot.split);
}

// Matrices: repacked into pinned staging slots by all cores, piece by
// piece, each piece's copy overlapping the next piece's repack
// (staged_upload); without staging (pinned memory refused, say) the whole
// matrix is repacked into pageable memory and copied at once. A slot the
// shards cut: each shard's rows / columns as a matrix of its own, on its
// rank's device; a replicated slot of a context spanning devices: a copy
// per device. Vectors: fp32 at once. Returns once the copies are
// complete, so any stream may use the tensor.
std::unique_ptr<Tensor> CudaBackend::upload(const TensorMeta& m, const SlotDesc& slot, const void* data) {
  const auto start = std::chrono::steady_clock::now();
  const uint32_t n = pieces(slot);
  std::unique_ptr<CudaTensor> t(new CudaTensor(m, n));
  if (m.role == TensorRole::kVector) {
    std::vector<float> host(m.cols);
    fmt::dequantize_row(m.dtype, data, host.data(), m.cols);
    for (uint32_t i = 0; i < n; ++i) {
      Rank& r = rank_of(i);
      CudaTensor::Piece& p = t->piece(i);
      QSP_CUDA_CHECK(cudaSetDevice(r.dev));
      p.dev = r.dev;
      p.buf.alloc(host.size() * sizeof(float), "weight upload");
      QSP_CUDA_CHECK(cudaMemcpyAsync(p.buf.ptr, host.data(), p.buf.bytes, cudaMemcpyHostToDevice, r.stream));
      QSP_CUDA_CHECK(cudaStreamSynchronize(r.stream));
      t->stored_bytes += p.buf.bytes;
      p.vec = static_cast<const float*>(p.buf.ptr);
    }
    return std::unique_ptr<Tensor>(t.release());
  }
  std::vector<uint8_t> scratch;  // a shard's columns, gathered row by row
  for (uint32_t i = 0; i < n; ++i) {
    TensorMeta pm = m;
    const void* pd = data;
    if (slot.split != Split::kNone) {
      const Partition::Piece p = part_.cut(slot, i, m.dtype, data, scratch);
      pm.rows = p.rows;
      pm.cols = p.cols;
      pm.bytes = p.bytes;
      pd = p.data;
    }
    upload_matrix(pm, pd, rank_of(i), t->piece(i));
    t->stored_bytes += t->piece(i).buf.bytes;
  }
  upload_stats_.total_s += seconds_since(start);
  return std::unique_ptr<Tensor>(t.release());
}

void CudaBackend::init_rank(Rank& r) {
  QSP_CUDA_CHECK(cudaSetDevice(r.dev));
  QSP_CUDA_CHECK(cudaGetDeviceProperties(&r.prop, r.dev));
  QSP_FAIL_IF(r.prop.major < 8, QSP_ERR_UNSUPPORTED,
              "%s (device %d) is compute capability %d.%d; qsp needs 8.0 or newer", r.prop.name, r.dev, r.prop.major,
              r.prop.minor);
  QSP_CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream_holder.s, cudaStreamNonBlocking));
  r.stream = r.stream_holder.s;
  const ModelConfig& cfg = cfg_;
  const size_t C = chunk_, H = cfg.hidden, Q = size_t(sh_q_), F = size_t(sh_ffn_);
  const size_t kv_elems = shard_kv_elems_ * r.count;
  r.k_cache.alloc(kv_elems * sizeof(__half), "KV cache (keys)");
  r.v_cache.alloc(kv_elems * sizeof(__half), "KV cache (values)");
  r.x.alloc(C * H * sizeof(float), "residual stream");
  r.xn.alloc(C * H * sizeof(__half), "normed activations");
  r.qkv.alloc(C * size_t(qkv_ld_) * sizeof(float), "qkv");
  r.q.alloc(C * Q * sizeof(__half), "queries");
  r.att.alloc(C * Q * sizeof(__half), "attention output");
  r.act.alloc(C * F * sizeof(__half), "SwiGLU output");
  r.logits.alloc(size_t(r.vocab_end - r.vocab_begin) * sizeof(float), "logits");
  // [0] past, [1] argmax, [2 .. 2 + C) tokens, [2 + C] the second token
  // half's past (tp_overlapped).
  r.small.alloc((3 + C) * sizeof(int32_t), "positions/tokens");
  r.attn_scratch_bytes = kern::attention_scratch_bytes(int32_t(C), sh_heads_, int32_t(cfg.head_dim),
                                                       int32_t(cfg.max_seq));
  if (r.attn_scratch_bytes) r.attn_scratch.alloc(r.attn_scratch_bytes, "attention scratch");
  r.i8_stage.alloc(kern::gemm_i8_stage_bytes(int64_t(std::max({H, Q, F}))), "integer GEMV activations");
  r.h_small.alloc((2 + C) * sizeof(int32_t), "positions/tokens");
}

// A communicator per rank (ncclCommInitAll: one process drives them all).
// QSP_NCCL_ONE_RANK=1 (a test aid) gives one rank a communicator too, so
// that the all-reduce path runs on a machine with one GPU.
void CudaBackend::init_nccl() {
  nccl_ = &nccl();  // throws QSP_ERR_UNSUPPORTED naming what is missing
  std::vector<int> devs;
  for (const auto& r : ranks_) devs.push_back(r->dev);
  std::vector<void*> comms(ranks_.size(), nullptr);
  nccl_check(nccl_->comm_init_all(comms.data(), int(devs.size()), devs.data()), "ncclCommInitAll");
  for (size_t i = 0; i < ranks_.size(); ++i) ranks_[i]->comm = comms[i];
}

void CudaBackend::nccl_check(int result, const char* what) const {
  if (result == 0) return;
  const char* why = nccl_->get_error_string(result);
  throw Error(QSP_ERR_DEVICE, strprintf("NCCL error in %s: %s (%d)", what, why ? why : "unknown", result));
}

// One matrix (a whole tensor or a shard's piece) into p on rank r's
// device, in the kernels' layout.
void CudaBackend::upload_matrix(const TensorMeta& m, const void* data, Rank& r, CudaTensor::Piece& p) {
  QSP_CUDA_CHECK(cudaSetDevice(r.dev));
  const kern::WFormat f = kern::format_for(m.dtype);
  const size_t bytes = kern::dweight_bytes(f, int64_t(m.rows), int64_t(m.cols));
  p.dev = r.dev;
  p.w.fmt = f;
  p.w.rows = int32_t(m.rows);
  p.w.cols = int32_t(m.cols);
  const auto alloc_start = std::chrono::steady_clock::now();
  p.buf.alloc(bytes, "weight upload");
  upload_stats_.alloc_s += seconds_since(alloc_start);
  if (ensure_staging(r) &&
      staged_upload(*r.staging, r.stream, m, data, f, static_cast<uint8_t*>(p.buf.ptr), upload_stats_)) {
    ++upload_stats_.staged;
  } else {
    std::vector<uint8_t> host(bytes);
    const auto repack_start = std::chrono::steady_clock::now();
    kern::repack_weight(m.dtype, data, int64_t(m.rows), int64_t(m.cols), host.data());
    upload_stats_.repack_s += seconds_since(repack_start);
    QSP_CUDA_CHECK(cudaMemcpyAsync(p.buf.ptr, host.data(), bytes, cudaMemcpyHostToDevice, r.stream));
    QSP_CUDA_CHECK(cudaStreamSynchronize(r.stream));
  }
  p.w.data = p.buf.ptr;
  ++upload_stats_.tensors;
  upload_stats_.bytes_in += m.bytes;
  upload_stats_.bytes_out += bytes;
}

void CudaBackend::log_upload_stats() noexcept {
  const Rank& r0 = *ranks_[0];
  log_upload(upload_stats_, r0.staging ? r0.staging->pool->size() : 1);
}

}  // namespace cuda_impl

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, const Partition& part,
                                           const std::vector<int32_t>& devices) {
  return std::unique_ptr<Backend>(new cuda_impl::CudaBackend(cfg, part, devices));
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_built() { return true; }

}  // namespace qsp
