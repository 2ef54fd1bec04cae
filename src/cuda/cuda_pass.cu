// The CUDA backend, one context's chunk: every layer on every rank's stream,
// the all-reduces, the LM head and its argmax, replayed from a CUDA graph
// for a repeated chunk shape (src/cuda/cuda_backend.h has the design).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "cuda/cuda_backend.h"
#include "kernels/pdl.h"

namespace qsp {
namespace cuda_impl {

void CudaBackend::prefill(const ModelTensors& w, const PrefillChunk& c) {
  QSP_CUDA_CHECK(cudaSetDevice(ranks_[0]->dev));
  for (auto& r : ranks_) {
    int32_t* hs = static_cast<int32_t*>(r->h_small.ptr);
    hs[0] = int32_t(c.past);
    if (c.tokens) std::memcpy(hs + 2, c.tokens, c.n * sizeof(int32_t));
  }
  logits_fresh_ = false;

  // Token chunks replay captured graphs of their shape, one per rank
  // (embeddings come from a caller's pointer per call: always eager). With
  // NCCL, only once a chunk ran eagerly: the communicators connect at
  // their first all-reduce, which allocates, and no allocation may happen
  // under capture; a capture NCCL refuses turns the graphs off.
  if (c.tokens && !local_ranks_ && (!ranks_[0]->comm || nccl_warm_)) {
    const std::vector<cudaGraphExec_t>* g = nullptr;
    try {
      g = graphs_.get({c.n, c.want_logits, short_cache_bound(c) >= 0}, weight_ids(w), streams_, devs_,
                      [&] { enqueue(w, c, /*capturing=*/true); });
    } catch (const Error&) {
      if (!ranks_[0]->comm) throw;
      graphs_.disable();
      cudaGetLastError();
    }
    if (g) {
      for (size_t i = 0; i < ranks_.size(); ++i) {
        on_device(*ranks_[i]);
        QSP_CUDA_CHECK(cudaGraphLaunch((*g)[i], ranks_[i]->stream));
      }
      finish_chunk(c);
      return;
    }
  }
  enqueue(w, c);
  finish_chunk(c);
  nccl_warm_ = true;
}

// A decode step on a cache short enough for the attention's one-launch
// kernel (kern::attention_cluster_keys): the bound on its position that the
// launches may assume, the same for every step of that regime (so one graph
// serves them all); -1 otherwise. Keys the chunk graphs.
int32_t CudaBackend::short_cache_bound(const PrefillChunk& c) const {
  if (c.n != 1) return -1;
  const int32_t keys = kern::attention_cluster_keys(sh_heads_, sh_kv_heads_, int32_t(cfg_.head_dim));
  return int64_t(c.past) + 1 <= keys ? keys - 1 : -1;
}

// Waits for every rank's chunk; ranks on several devices then pick the greedy token.
void CudaBackend::finish_chunk(const PrefillChunk& c) {
  for (auto& r : ranks_) {
    QSP_CUDA_CHECK(cudaSetDevice(r->dev));
    QSP_CUDA_CHECK(cudaStreamSynchronize(r->stream));
    QSP_CUDA_CHECK(cudaGetLastError());
  }
  if (ranks_.size() > 1) QSP_CUDA_CHECK(cudaSetDevice(ranks_[0]->dev));
  if (c.want_logits && ranks_.size() > 1) pick_greedy();
}

// One rank: its logits are the whole vocabulary, copied on demand. Ranks
// on several devices: each slice was copied when the chunk ran
// (pick_greedy).
const float* CudaBackend::logits() {
  if (!logits_fresh_) {
    Rank& r0 = *ranks_[0];
    QSP_CUDA_CHECK(cudaSetDevice(r0.dev));
    QSP_CUDA_CHECK(cudaMemcpyAsync(h_logits_.ptr, r0.logits.ptr, r0.logits.bytes, cudaMemcpyDeviceToHost, r0.stream));
    QSP_CUDA_CHECK(cudaStreamSynchronize(r0.stream));
    logits_fresh_ = true;
  }
  return static_cast<const float*>(h_logits_.ptr);
}

// Enqueues one chunk on every rank's stream (also used while capturing the
// graph: one rank).
void CudaBackend::enqueue(const ModelTensors& w, const PrefillChunk& c, bool capturing) {
  const int32_t n = int32_t(c.n), H = int32_t(cfg_.hidden);
  // The default PDL of a chunk of n tokens on one device (kernels/pdl.h;
  // what was measured: one GPU).
  const kern::PdlPass pdl(ranks_.size() == 1 ? n : 0);
  std::vector<Acts> acts;
  std::vector<KvTarget> kvs;
  for (auto& rp : ranks_) {
    Rank& r = *rp;
    on_device(r);
    int32_t* d_small = as<int32_t>(r.small);
    int32_t* hs = static_cast<int32_t*>(r.h_small.ptr);
    // Position (and tokens) from pinned memory: in a graph these are memcpy
    // nodes reading the same pinned addresses, refilled before each replay.
    if (poison_) poison_scratch(r, c, capturing);
    QSP_CUDA_CHECK(cudaMemcpyAsync(d_small, hs, sizeof(int32_t), cudaMemcpyHostToDevice, r.stream));
    const Acts a = own_acts(r);
    if (c.tokens) {
      QSP_CUDA_CHECK(cudaMemcpyAsync(d_small + 2, hs + 2, c.n * sizeof(int32_t), cudaMemcpyHostToDevice, r.stream));
      QSP_CUDA_CHECK(kern::embed(W(w[kTokenEmbd], r.first), d_small + 2, n, a.x, r.stream));
    } else {
      QSP_CUDA_CHECK(cudaMemcpyAsync(a.x, c.embeddings, size_t(c.n) * H * sizeof(float), cudaMemcpyHostToDevice,
                                     r.stream));
    }
    acts.push_back(a);
    KvTarget kv;
    kv.past = d_small;
    kv.max_past = short_cache_bound(c);
    kvs.push_back(kv);
  }
  enqueue_layers(w, n, acts.data(), kvs.data());
  if (!c.want_logits) return;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = *ranks_[i];
    const Acts& a = acts[i];
    on_device(r);
    QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x + size_t(n - 1) * H, H, V(w[kOutputNorm], r.first), a.xn, 1, H,
                                     cfg_.rms_eps, r.stream));
    float* lg = as<float>(r.logits);
    const int32_t rows = int32_t(r.vocab_end - r.vocab_begin);
    lm_head(w, r, a.xn, 1, lg, rows);
    int32_t* d_argmax = as<int32_t>(r.small) + 1;
    QSP_CUDA_CHECK(kern::argmax(lg, rows, d_argmax, r.stream));
    int32_t* hs = static_cast<int32_t*>(r.h_small.ptr);
    QSP_CUDA_CHECK(cudaMemcpyAsync(hs + 1, d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, r.stream));
    // Ranks on several devices: the gather, each rank's slice into the
    // host logits (pick_greedy compares the ranks' argmaxes).
    if (ranks_.size() > 1)
      QSP_CUDA_CHECK(cudaMemcpyAsync(static_cast<float*>(h_logits_.ptr) + r.vocab_begin, lg,
                                     size_t(rows) * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  }
}

// The argmax across ranks, once their slices arrived (prefill): each
// rank's (lowest id on ties within it), then the best of those, the lower
// rank on ties. NaN never wins; all-NaN logits give token 0.
void CudaBackend::pick_greedy() {
  const float* lg = static_cast<const float*>(h_logits_.ptr);
  int64_t best = -1;
  for (const auto& r : ranks_) {
    const int64_t i = int64_t(r->vocab_begin) + static_cast<const int32_t*>(r->h_small.ptr)[1];
    if (!std::isnan(lg[i]) && (best < 0 || lg[i] > lg[best])) best = i;
  }
  greedy_ = best < 0 ? 0 : int32_t(best);
  logits_fresh_ = true;
}

// Every layer over n tokens already embedded in each rank's acts[i].x
// (the residual stream): per block, each rank's shards in turn, then the
// all-reduce across ranks.
void CudaBackend::enqueue_layers(const ModelTensors& w, int32_t n, const Acts* acts, const KvTarget* kvs) {
  if (tp_overlapped(n, kvs)) {
    enqueue_layers_overlapped(w, n, acts, kvs);
    return;
  }
  const ModelConfig& m = cfg_;
  const int32_t H = int32_t(m.hidden);
  // With norm_in, the Q | K | V and gate | up GEMVs form their input's
  // norm from the residual stream themselves: no rmsnorm launches.
  const bool nin = norm_in(n);
  for (uint32_t l = 0; l < m.n_layers; ++l) {
    const LayerTensors& L = w.layers[l];
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = *ranks_[i];
      const Acts& a = acts[i];
      on_device(r);
      if (!nin) QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, H, V(L[kAttnNorm], r.first), a.xn, n, H, m.rms_eps, r.stream));
      const InNorm attn_norm{a.x, V(L[kAttnNorm], r.first), m.rms_eps};
      for (uint32_t s = r.first; s < r.first + r.count; ++s)
        enqueue_attention(L, l, r, s, n, a, kvs[i], nin ? &attn_norm : nullptr);
    }
    all_reduce(acts, n);
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = *ranks_[i];
      const Acts& a = acts[i];
      on_device(r);
      if (!nin) QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, H, V(L[kFfnNorm], r.first), a.xn, n, H, m.rms_eps, r.stream));
      const InNorm ffn_norm{a.x, V(L[kFfnNorm], r.first), m.rms_eps};
      for (uint32_t s = r.first; s < r.first + r.count; ++s) enqueue_ffn(L, r, s, n, a, nin ? &ffn_norm : nullptr);
    }
    all_reduce(acts, n);
  }
}

// The residual streams of all ranks summed in place (one rank without a
// communicator: nothing to do, its shards added into it).
void CudaBackend::all_reduce(const Acts* acts, int32_t n) {
  if (local_ranks_) {
    local_all_reduce(acts, n);
    return;
  }
  if (ranks_[0]->comm) all_reduce_rows(acts, 0, n, /*comm_stream=*/false);
}

// The layers as two token halves, [0, nA) and [nA, n), each block of each
// half followed by its all-reduce on the rank's comm stream, which overlaps
// the compute stream's next block of the other half:
//   compute: attn(A) attn(B) | ffn(A) ffn(B) | attn(A) ...
//   comm:           AR(A)  AR(B)    AR(A)  AR(B) ...
// A half's next block waits for its own all-reduce only (done[h]); the comm
// stream takes a half's rows once its block is done (ready[h]). Half B runs
// as a chunk at position past + nA, after A's keys and values are in the
// cache (the same stream), exactly as a chunked prompt; the FFN and the
// projections are per token. The two halves use disjoint rows of every
// activation buffer. A graph capture forks the comm streams off and joins
// them back through the same events (the first wait of each half comes
// after a record of this pass). Measured nowhere yet (no machine of several
// GPUs was lent): the point is issue 19's 1.7x on 2 GPUs at 8192 tokens,
// where each all-reduce moves n x hidden floats (134 MB per block at 4096
// tokens of the 8B) while a block computes for a few ms.
void CudaBackend::enqueue_layers_overlapped(const ModelTensors& w, int32_t n, const Acts* acts,
                                            const KvTarget* kvs) {
  const ModelConfig& m = cfg_;
  const int32_t H = int32_t(m.hidden), Q = sh_q_, F = sh_ffn_;
  // Halves on 64-token boundaries (the GEMMs' token tiles).
  const int32_t nA = std::min(n - 1, (n / 2 + 63) / 64 * 64), rows[2] = {nA, n - nA};
  std::vector<Acts> half[2];
  std::vector<KvTarget> kv[2];
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = *ranks_[i];
    on_device(r);
    const Acts& a = acts[i];
    half[0].push_back(a);
    half[1].push_back(Acts{a.x + size_t(nA) * H, a.xn + size_t(nA) * H, a.qkv + size_t(nA) * qkv_ld_,
                           a.q + size_t(nA) * Q, a.att + size_t(nA) * Q, a.act + size_t(nA) * F, a.attn_scratch,
                           a.attn_scratch_bytes});
    kv[0].push_back(kvs[i]);
    KvTarget b = kvs[i];
    int32_t* past_b = as<int32_t>(r.small) + 2 + chunk_;  // [2 + C]: init_rank
    QSP_CUDA_CHECK(kern::add_i32(kvs[i].past, nA, past_b, r.stream));
    b.past = past_b;
    kv[1].push_back(b);
  }
  // Block `ffn` of half h on every rank after that half's last all-reduce
  // (none before the first layer's attention), then the half's all-reduce.
  const auto block = [&](const LayerTensors& L, uint32_t l, bool ffn, int h) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = *ranks_[i];
      const Acts& a = half[h][i];
      on_device(r);
      if (l > 0 || ffn) QSP_CUDA_CHECK(cudaStreamWaitEvent(r.stream, r.done[h].e, 0));
      QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, H, V(L[ffn ? kFfnNorm : kAttnNorm], r.first), a.xn, rows[h], H,
                                       m.rms_eps, r.stream));
      for (uint32_t s = r.first; s < r.first + r.count; ++s) {
        if (ffn)
          enqueue_ffn(L, r, s, rows[h], a);
        else
          enqueue_attention(L, l, r, s, rows[h], a, kv[h][i]);
      }
      QSP_CUDA_CHECK(cudaEventRecord(r.ready[h].e, r.stream));
      QSP_CUDA_CHECK(cudaStreamWaitEvent(r.comm_stream, r.ready[h].e, 0));
    }
    all_reduce_rows(acts, h ? nA : 0, rows[h], /*comm_stream=*/true);
    for (auto& rp : ranks_) {
      on_device(*rp);
      QSP_CUDA_CHECK(cudaEventRecord(rp->done[h].e, rp->comm_stream));
    }
  };
  for (uint32_t l = 0; l < m.n_layers; ++l)
    for (bool ffn : {false, true})
      for (int h = 0; h < 2; ++h) block(w.layers[l], l, ffn, h);
  // The residual complete (the LM head reads its last row) and, under
  // capture, the comm streams joined back.
  for (auto& rp : ranks_) {
    on_device(*rp);
    for (int h = 0; h < 2; ++h) QSP_CUDA_CHECK(cudaStreamWaitEvent(rp->stream, rp->done[h].e, 0));
  }
}

void CudaBackend::all_reduce_rows(const Acts* acts, int32_t row0, int32_t rows, bool comm_stream) {
  const NcclLib& lib = *nccl_;
  const size_t count = size_t(rows) * cfg_.hidden;
  nccl_check(lib.group_start(), "ncclGroupStart");
  int result = 0;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = *ranks_[i];
    float* x = acts[i].x + size_t(row0) * cfg_.hidden;
    const cudaStream_t stream = comm_stream ? r.comm_stream : r.stream;
    const int e = lib.all_reduce(x, x, count, kNcclFloat32, kNcclSum, r.comm, stream);
    if (e != 0 && result == 0) result = e;
  }
  const int end = lib.group_end();
  nccl_check(result ? result : end, "ncclAllReduce");
}

// QSP_TP_LOCAL_RANKS's all-reduce on the one device: rank 0 waits for the
// others, adds their copies into its own in rank order, and every other
// rank waits for that and copies the sum back; rank 0 goes on only once
// those copies are done (its next epilogue writes its copy again).
void CudaBackend::local_all_reduce(const Acts* acts, int32_t n) {
  const size_t count = size_t(n) * cfg_.hidden;
  Rank& r0 = *ranks_[0];
  for (size_t i = 1; i < ranks_.size(); ++i) {
    QSP_CUDA_CHECK(cudaEventRecord(ranks_[i]->reduced.e, ranks_[i]->stream));
    QSP_CUDA_CHECK(cudaStreamWaitEvent(r0.stream, ranks_[i]->reduced.e, 0));
  }
  for (size_t i = 1; i < ranks_.size(); ++i)
    QSP_CUDA_CHECK(kern::add_f32(acts[0].x, acts[i].x, int64_t(count), r0.stream));
  QSP_CUDA_CHECK(cudaEventRecord(r0.reduced.e, r0.stream));
  for (size_t i = 1; i < ranks_.size(); ++i) {
    QSP_CUDA_CHECK(cudaStreamWaitEvent(ranks_[i]->stream, r0.reduced.e, 0));
    QSP_CUDA_CHECK(cudaMemcpyAsync(acts[i].x, acts[0].x, count * sizeof(float), cudaMemcpyDeviceToDevice,
                                   ranks_[i]->stream));
    QSP_CUDA_CHECK(cudaEventRecord(ranks_[i]->reduced.e, ranks_[i]->stream));
    QSP_CUDA_CHECK(cudaStreamWaitEvent(r0.stream, ranks_[i]->reduced.e, 0));
  }
}

// Shard s's heads of layer l, on rank r, over the normed a.xn: QKV,
// QK-norm + RoPE with its KV-cache write, attention, and its columns of wo
// into a.x (sum_epilogue).
void CudaBackend::enqueue_attention(const LayerTensors& L, uint32_t l, Rank& r, uint32_t s, int32_t n,
                                    const Acts& a, const KvTarget& kv, const InNorm* in) {
  const ModelConfig& m = cfg_;
  const int32_t H = int32_t(m.hidden), Q = sh_q_, KV = sh_kv_;
  const cudaStream_t stream = r.stream;
  kern::QkRopeArgs rp;
  rp.qkv = a.qkv;
  rp.ld = qkv_ld_;
  rp.q_norm = V(L[kQNorm], s);
  rp.k_norm = V(L[kKNorm], s);
  rp.q_out = a.q;
  rp.M = n;
  rp.n_heads = sh_heads_;
  rp.n_kv_heads = sh_kv_heads_;
  rp.head_dim = int32_t(m.head_dim);
  rp.eps = m.rms_eps;
  rp.theta = m.rope_theta;
  rp.rope_style = m.rope_style;
  kern::AttnArgs at;
  at.q = a.q;
  at.out = a.att;
  at.M = n;
  at.n_heads = sh_heads_;
  at.n_kv_heads = sh_kv_heads_;
  at.head_dim = int32_t(m.head_dim);
  at.scale = 1.0f / std::sqrt(float(m.head_dim));
  at.scratch = a.attn_scratch;
  at.scratch_bytes = a.attn_scratch_bytes;
  if (kv.seqs) {
    rp.seqs = at.seqs = kv.seqs + size_t(s) * kv.n_seqs;
    rp.token_seq = kv.token_seq;
    rp.layer = at.layer = int32_t(l);
    at.tiles = kv.tiles;
    at.n_tiles = kv.n_tiles;
    at.max_piece = kv.max_piece;
  } else {
    const size_t layer_kv = size_t(sh_kv_heads_) * m.max_seq * m.head_dim;
    const size_t off = (s - r.first) * shard_kv_elems_ + l * layer_kv;
    __half* kc = as<__half>(r.k_cache) + off;
    __half* vc = as<__half>(r.v_cache) + off;
    rp.k_cache = kc;
    rp.v_cache = vc;
    at.k_cache = kc;
    at.v_cache = vc;
    rp.max_seq = at.max_seq = int32_t(m.max_seq);
    rp.past = at.past = kv.past;
    at.max_past = kv.max_past;
  }
  // Q | K | V are adjacent columns of qkv: as few launches as the formats
  // allow, each a run of neighbours of one format (a Q4_K_M file's V is Q6_K
  // in about half the layers: Q | K in one launch, then V; the 2026-12-05
  // profile showed those layers' Q, K and V as three GEMVs, 23 us against 9).
  const kern::DWeight* parts[3] = {&W(L[kWq], s), &W(L[kWk], s), &W(L[kWv], s)};
  const int32_t col[4] = {0, Q, Q + KV, Q + 2 * KV};
  for (int i = 0; i < 3;) {
    int j = i + 1;
    while (j < 3 && parts[j]->fmt == parts[i]->fmt && kern::gemm_row_group_ok(*parts[j - 1]) &&
           int32_t(parts[j - 1]->rows) == col[j] - col[j - 1])
      ++j;
    kern::DWeight cat[2];
    for (int k = i + 1; k < j; ++k) cat[k - i - 1] = *parts[k];
    gemm(r, a.xn, H, n, *parts[i], nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv + col[i], qkv_ld_,
         j > i + 1 ? cat : nullptr, in);
    i = j;
  }
  // A decode step on a short cache may fold qk_rope into its attention
  // launch ($QSP_ATTN_CLUSTER_ROPE=1, kern::attention_fuses_rope).
  if (kern::attention_fuses_rope(at))
    at.rope = &rp;
  else
    QSP_CUDA_CHECK(kern::qk_rope(rp, stream));
  QSP_CUDA_CHECK(kern::attention(at, stream));
  gemm(r, a.att, Q, n, W(L[kWo], s), nullptr, sum_epilogue(r, s), nullptr, a.x, H);
}

// Shard s's FFN features of layer l, on rank r, over the normed a.xn (or,
// in = the residual, normed in the GEMV's prologue): gate | up with SwiGLU
// into a.act, and its columns of w_down into a.x (sum_epilogue).
void CudaBackend::enqueue_ffn(const LayerTensors& L, Rank& r, uint32_t s, int32_t n, const Acts& a,
                              const InNorm* in) {
  const int32_t H = int32_t(cfg_.hidden);
  gemm(r, a.xn, H, n, W(L[kWGate], s), &W(L[kWUp], s), kern::Epilogue::kSwiGLU, a.act, nullptr, sh_ffn_,
       nullptr, in);
  gemm(r, a.act, sh_ffn_, n, W(L[kWDown], s), nullptr, sum_epilogue(r, s), nullptr, a.x, H);
}

// The logits of M normed rows xn on rank r: each of its shards' vocabulary
// rows into its slice of out ([M][ldo], column 0 = the rank's first row).
void CudaBackend::lm_head(const ModelTensors& w, const Rank& r, const __half* xn, int32_t M, float* out,
                          int32_t ldo) {
  const SlotDesc& head = kModelSlots[kLmHead];
  for (uint32_t s = r.first; s < r.first + r.count; ++s)
    gemm(r, xn, int32_t(cfg_.hidden), M, W(w[kLmHead], s), nullptr, kern::Epilogue::kStoreF32, nullptr,
         out + (part_.rows(head, s).begin - r.vocab_begin), ldo);
}

void CudaBackend::poison_scratch(Rank& r, const PrefillChunk& c, bool capturing) {
  for (DeviceBuffer* b : {&r.x, &r.xn, &r.qkv, &r.q, &r.att, &r.act, &r.logits})
    QSP_CUDA_CHECK(cudaMemsetAsync(b->ptr, 0xff, b->bytes, r.stream));
  // A captured graph replays at other positions: only poison KV eagerly.
  if (capturing) return;
  const size_t row = size_t(cfg_.max_seq) * cfg_.head_dim * sizeof(__half);
  const size_t skip = size_t(c.past) * cfg_.head_dim * sizeof(__half);
  const size_t rows = size_t(cfg_.n_layers) * size_t(sh_kv_heads_) * r.count;
  for (DeviceBuffer* b : {&r.k_cache, &r.v_cache})
    QSP_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(b->ptr) + skip, row, 0xff, row - skip, rows, r.stream));
}

// cat: optional, two more weights whose rows follow w's (kern::GemmArgs::wcat).
void CudaBackend::gemm(const Rank& r, const __half* x, int32_t ldx, int32_t M, const kern::DWeight& w,
                       const kern::DWeight* w2, kern::Epilogue ep, __half* out_h, float* out_f, int32_t ldo,
                       const kern::DWeight* cat, const InNorm* in) {
  kern::GemmArgs g;
  g.x = x;
  g.ldx = ldx;
  g.M = M;
  g.w = w;
  if (w2) g.w2 = *w2;
  if (cat) g.wcat[0] = cat[0], g.wcat[1] = cat[1];
  if (in) {
    g.norm_in_x = in->x;
    g.norm_in_ldx = ldx;
    g.norm_in_w = in->w;
    g.norm_in_eps = in->eps;
  }
  g.ep = ep;
  g.out_h = out_h;
  g.out_f = out_f;
  g.ldo = ldo;
  g.i8_stage = r.i8_stage.ptr;
  g.i8_stage_bytes = r.i8_stage.bytes;
  QSP_CUDA_CHECK(kern::gemm(g, r.stream));
}

// The graphs bake in weight pointers: the tensors they use.
std::vector<const void*> CudaBackend::weight_ids(const ModelTensors& w) const {
  std::vector<const void*> ids;
  for (const LayerTensors& L : w.layers)
    for (const TensorRef* t : {&L[kAttnNorm], &L[kWq], &L[kWk], &L[kWv], &L[kQNorm], &L[kKNorm], &L[kWo], &L[kFfnNorm],
                               &L[kWGate], &L[kWUp], &L[kWDown]})
      ids.push_back(t->get());
  ids.push_back(w[kTokenEmbd].get());
  ids.push_back(w[kOutputNorm].get());
  ids.push_back(w[kLmHead].get());
  return ids;
}

}  // namespace cuda_impl
}  // namespace qsp
