// The CUDA backend: the whole prefill on the GPU, one stream per context and
// device, no host round trip inside a chunk. The layer is
//
//   rmsnorm_f16 -> gemm(wq|wk|wv -> qkv fp32) -> qk_rope (+KV write)
//   -> attention (one launch, whole chunk) -> gemm(wo, += residual)
//   -> rmsnorm_f16 -> gemm(gate, up; SwiGLU epilogue) -> gemm(down, += residual)
//
// and after the last layer: rmsnorm of the last token -> LM-head GEMV -> argmax.
// Positions reach the kernels through a device int (`d_past`), and no
// launch's grid depends on the position, so a chunk of n tokens captured once
// in a CUDA graph replays at every position (src/cuda/chunk_graphs.h).
//
// Tensor parallelism (engine/partition.h). The work is done by ranks, one
// per device, each with its own stream, activations and part of the KV
// cache, running its shards in turn:
//
// - every shard on one device: one rank runs all the shards. Each shard's
//   cut weights are matrices of their own (its rows of wq / wk / wv /
//   w_gate / w_up, its columns of wo / w_down, cut at upload), its heads use
//   its own part of the KV cache, and its wo / w_down products add into the
//   residual stream: the local sum in place of the all-reduce.
// - a shard per device: a rank per shard; rank 0's wo / w_down add into its
//   residual stream, the others' overwrite theirs, and one in-place NCCL
//   all-reduce of the residual per block leaves x + the sum of the products
//   on every device. The host enqueues every rank's work layer by layer (or
//   launches a captured graph per rank) and waits once at the end.
//
// The LM head's shards write their slices of the logits; the greedy token is
// the best of the ranks' argmaxes (one rank: one argmax over all of them).
//
// Test aid, QSP_TP_LOCAL_RANKS=1: every shard on one device still gets a
// rank of its own (own stream, buffers, KV part, weight copies), and the
// all-reduce is done on that device (rank 0 adds the others' residual copies
// in rank order, kern::add_f32, and every rank copies the sum back): the
// multi-device path, NCCL aside, runs on a machine with one GPU, and gives
// the one-rank shard mode's sums in the same order, so the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "common/quant.h"
#include "engine/backend.h"
#include "engine/partition.h"
#include "formats/format.h"
#include "kernels/kernels.h"
#include "cuda/chunk_graphs.h"
#include "cuda/cuda_upload.h"
#include "cuda/cuda_util.h"
#include "cuda/nccl_lib.h"

namespace qsp {
namespace {

// Tokens per chunk: bounds the activation scratch (about 90 KB per token for
// an 8B-shaped model); longer prompts are split by the engine, attention
// reads the earlier chunks from the KV cache.
constexpr uint32_t kCudaChunk = 4096;

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

class CudaBackend final : public Backend {
 public:
  // devices: the device of each shard of `part` (all one device, or one
  // device per shard: engine/context.cpp).
  CudaBackend(const ModelConfig& cfg, const Partition& part, const std::vector<int32_t>& devices)
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
    h_logits_.alloc(size_t(cfg.vocab) * sizeof(float), "logits");
  }

  ~CudaBackend() override {
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

  int32_t kind() const override { return QSP_BACKEND_CUDA; }
  int32_t device() const override { return ranks_[0]->dev; }
  std::string device_name() const override {
    const std::string name = ranks_[0]->prop.name;
    if (n_sh_ == 1) return name;
    if (ranks_.size() == 1) return strprintf("%s (%u shards)", name.c_str(), n_sh_);
    std::string list;
    for (const auto& r : ranks_) list += (list.empty() ? "" : ", ") + std::to_string(r->dev);
    return strprintf("%s (%u shards on devices %s)", name.c_str(), n_sh_, list.c_str());
  }
  int32_t n_threads() const override { return 1; }
  uint64_t kv_bytes() const override {
    uint64_t b = 0;
    for (const auto& r : ranks_) b += r->k_cache.bytes + r->v_cache.bytes;
    return b;
  }
  uint64_t scratch_bytes() const override {
    uint64_t b = 0;
    for (const auto& r : ranks_)
      b += r->x.bytes + r->xn.bytes + r->qkv.bytes + r->q.bytes + r->att.bytes + r->act.bytes + r->logits.bytes +
           r->small.bytes + r->attn_scratch.bytes;
    return b;
  }
  uint32_t max_chunk() const override { return chunk_; }

  void check_supported(const TensorMeta& m, const SlotDesc& slot, const char* where) const override {
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
  uint64_t cache_variant(const SlotDesc& slot) const override {
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
  std::unique_ptr<Tensor> upload(const TensorMeta& m, const SlotDesc& slot, const void* data) override {
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

  void prefill(const ModelTensors& w, const PrefillChunk& c) override {
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
        g = graphs_.get({c.n, c.want_logits}, weight_ids(w), streams_, devs_,
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

  // Waits for every rank's chunk; ranks on several devices then pick the greedy token.
  void finish_chunk(const PrefillChunk& c) {
    for (auto& r : ranks_) {
      QSP_CUDA_CHECK(cudaSetDevice(r->dev));
      QSP_CUDA_CHECK(cudaStreamSynchronize(r->stream));
      QSP_CUDA_CHECK(cudaGetLastError());
    }
    if (ranks_.size() > 1) QSP_CUDA_CHECK(cudaSetDevice(ranks_[0]->dev));
    if (c.want_logits && ranks_.size() > 1) pick_greedy();
  }

  // Tokens one batched pass holds: the batch space grows to this at most.
  uint32_t max_batch_tokens() const override { return kCudaChunk; }

  // One pass over the pieces of several contexts: the projections, norms and
  // the LM head run once over all their tokens; QK-norm/RoPE and attention
  // take each token's piece from a table (kern::SeqDesc, one per shard), so
  // every piece writes and reads only its own context's cache; the last
  // token of each piece that wants logits gets them (one GEMM over those
  // rows per shard) and its argmax, delivered to the owning context. Every
  // rank runs the pass over all the tokens in its device's batch space, with
  // the all-reduces of a single chunk.
  bool prefill_batch(const ModelTensors& w, const std::vector<BatchPiece>& pieces) override {
    // Ranks sharing a device would share its one batch space: one by one.
    if (local_ranks_) return false;
    const ModelConfig& m = cfg_;
    const uint32_t S = uint32_t(pieces.size()), n_ranks = uint32_t(ranks_.size());
    std::vector<CudaBackend*> owner(S);
    for (uint32_t i = 0; i < S; ++i) {
      owner[i] = dynamic_cast<CudaBackend*>(pieces[i].owner);
      bool same = owner[i] && owner[i]->ranks_.size() == n_ranks && owner[i]->n_sh_ == n_sh_;
      for (uint32_t r = 0; same && r < n_ranks; ++r) same = owner[i]->ranks_[r]->dev == ranks_[r]->dev;
      QSP_FAIL_IF(!same, QSP_ERR_INTERNAL, "batched pass: a piece of other devices");
    }
    // Token pieces first, so that one embedding launch covers them all.
    std::vector<uint32_t> order;
    for (int pass = 0; pass < 2; ++pass)
      for (uint32_t i = 0; i < S; ++i)
        if ((pieces[i].chunk.tokens != nullptr) == (pass == 0)) order.push_back(i);

    uint32_t T = 0, T_tok = 0, R = 0, max_piece = 0;
    for (uint32_t i : order) {
      const PrefillChunk& c = pieces[i].chunk;
      T += c.n;
      if (c.tokens) T_tok += c.n;
      if (c.want_logits) ++R;
      max_piece = std::max(max_piece, c.n);
    }
    QSP_FAIL_IF(T == 0 || T > kCudaChunk, QSP_ERR_INTERNAL, "batched pass of %u tokens", T);
    const int32_t tile =
        kern::attention_batch_tile_tokens(int32_t(max_piece), sh_heads_, sh_kv_heads_, int32_t(m.head_dim));

    // The pass's metadata, host side: pieces (a table per shard: its part of
    // each owner's cache), tokens, the piece of each token, the rows that
    // want logits, attention's query tiles.
    std::vector<kern::SeqDesc> seqs(size_t(S) * n_sh_);
    std::vector<int32_t> tokens, token_seq, rows;
    std::vector<int2> tiles;
    std::vector<uint32_t> row_owner;  // piece index of each logits row
    tokens.reserve(T_tok);
    token_seq.reserve(T);
    uint32_t start = 0;
    for (uint32_t k = 0; k < S; ++k) {
      const uint32_t i = order[k];
      const PrefillChunk& c = pieces[i].chunk;
      for (uint32_t sh = 0; sh < n_sh_; ++sh) {
        // The owner's part of its cache for shard sh, on that shard's rank
        // (its max_seq, not necessarily this context's).
        const Rank& o = *owner[i]->ranks_[n_ranks == 1 ? 0 : sh];
        kern::SeqDesc& d = seqs[size_t(sh) * S + k];
        d.k_cache = as<__half>(o.k_cache) + (sh - o.first) * owner[i]->shard_kv_elems_;
        d.v_cache = as<__half>(o.v_cache) + (sh - o.first) * owner[i]->shard_kv_elems_;
        d.max_seq = int32_t(owner[i]->cfg_.max_seq);
        d.past = int32_t(c.past);
        d.start = int32_t(start);
        d.n = int32_t(c.n);
      }
      if (c.tokens) tokens.insert(tokens.end(), c.tokens, c.tokens + c.n);
      token_seq.insert(token_seq.end(), c.n, int32_t(k));
      for (uint32_t t0 = 0; t0 < c.n; t0 += uint32_t(tile)) tiles.push_back(make_int2(int32_t(k), int32_t(t0)));
      if (c.want_logits) {
        rows.push_back(int32_t(start + c.n - 1));
        row_owner.push_back(i);
      }
      start += c.n;
    }
    // The tiles that see the most keys first, so they do not trail the wave.
    std::stable_sort(tiles.begin(), tiles.end(), [&](int2 a, int2 b) {
      return seqs[a.x].past + a.y > seqs[b.x].past + b.y;
    });

    // One copy of all the metadata per device: [seqs | tiles | tokens |
    // token_seq | rows], each 16-byte aligned; the argmax results come back
    // after it.
    size_t off = 0;
    const auto place = [&](size_t bytes) {
      const size_t at = off;
      off += (bytes + 15) / 16 * 16;
      return at;
    };
    const size_t o_seqs = place(seqs.size() * sizeof(kern::SeqDesc)), o_tiles = place(tiles.size() * sizeof(int2)),
                 o_tokens = place(tokens.size() * sizeof(int32_t)), o_tseq = place(T * sizeof(int32_t)),
                 o_rows = place(rows.size() * sizeof(int32_t));
    const size_t up_bytes = off;
    const size_t o_argmax = place(rows.size() * sizeof(int32_t));

    // Each device's batch space, locked in rank order (every context that
    // spans these devices lists them in the same, ascending, order), with
    // the metadata in its pinned buffer.
    if (batch_spaces_.size() != n_ranks) batch_spaces_.assign(n_ranks, nullptr);
    std::vector<std::unique_lock<std::mutex>> locks;
    std::vector<char*> h_meta(n_ranks), d_meta(n_ranks);
    const size_t H = m.hidden, Q = m.q_dim(), F = m.ffn;
    for (uint32_t ri = 0; ri < n_ranks; ++ri) {
      Rank& r = *ranks_[ri];
      QSP_CUDA_CHECK(cudaSetDevice(r.dev));
      if (!batch_spaces_[ri]) batch_spaces_[ri] = batch_space(r.dev);
      BatchSpace& space = *batch_spaces_[ri];
      locks.emplace_back(space.mu);
      BatchSpace::ensure(space.x, T * H * sizeof(float), "batch residual stream");
      BatchSpace::ensure(space.xn, T * std::max(H, Q) * sizeof(__half), "batch normed activations");
      BatchSpace::ensure(space.qkv, T * size_t(qkv_ld_) * sizeof(float), "batch qkv");
      BatchSpace::ensure(space.q, T * Q * sizeof(__half), "batch queries");
      BatchSpace::ensure(space.att, T * Q * sizeof(__half), "batch attention output");
      BatchSpace::ensure(space.act, T * F * sizeof(__half), "batch SwiGLU output");
      BatchSpace::ensure(space.logits, std::max<size_t>(R, 1) * m.vocab * sizeof(float), "batch logits");
      BatchSpace::ensure(space.meta, off, "batch metadata");
      if (space.h_meta_bytes < off) {
        space.h_meta.alloc(off, "batch metadata");
        space.h_meta_bytes = off;
      }
      char* h = h_meta[ri] = static_cast<char*>(space.h_meta.ptr);
      d_meta[ri] = static_cast<char*>(space.meta.ptr);
      std::memcpy(h + o_seqs, seqs.data(), seqs.size() * sizeof(kern::SeqDesc));
      std::memcpy(h + o_tiles, tiles.data(), tiles.size() * sizeof(int2));
      std::memcpy(h + o_tokens, tokens.data(), tokens.size() * sizeof(int32_t));
      std::memcpy(h + o_tseq, token_seq.data(), T * sizeof(int32_t));
      std::memcpy(h + o_rows, rows.data(), rows.size() * sizeof(int32_t));
    }
    if (n_ranks > 1) QSP_CUDA_CHECK(cudaSetDevice(ranks_[0]->dev));

    // The pass, from the metadata's copy to the argmaxes' (also what a batch
    // graph captures: it reads the metadata from h_meta when it runs).
    const auto enqueue_pass = [&] {
      std::vector<Acts> acts(n_ranks);
      std::vector<KvTarget> kvs(n_ranks);
      for (uint32_t ri = 0; ri < n_ranks; ++ri) {
        Rank& r = *ranks_[ri];
        BatchSpace& space = *batch_spaces_[ri];
        char* d = d_meta[ri];
        on_device(r);
        QSP_CUDA_CHECK(cudaMemcpyAsync(d, h_meta[ri], up_bytes, cudaMemcpyHostToDevice, r.stream));
        const Acts& a = acts[ri] = Acts{as<float>(space.x),   as<__half>(space.xn),  as<float>(space.qkv),
                                        as<__half>(space.q),   as<__half>(space.att), as<__half>(space.act),
                                        nullptr,               0};
        if (T_tok)
          QSP_CUDA_CHECK(kern::embed(W(w[kTokenEmbd], r.first), reinterpret_cast<const int32_t*>(d + o_tokens),
                                     int32_t(T_tok), a.x, r.stream));
        for (uint32_t k = 0; k < S; ++k) {
          const PrefillChunk& c = pieces[order[k]].chunk;
          if (!c.tokens)
            QSP_CUDA_CHECK(cudaMemcpyAsync(a.x + size_t(seqs[k].start) * H, c.embeddings,
                                           size_t(c.n) * H * sizeof(float), cudaMemcpyHostToDevice, r.stream));
        }
        KvTarget& kv = kvs[ri];
        kv.seqs = reinterpret_cast<const kern::SeqDesc*>(d + o_seqs);
        kv.n_seqs = int32_t(S);
        kv.token_seq = reinterpret_cast<const int32_t*>(d + o_tseq);
        kv.tiles = reinterpret_cast<const int2*>(d + o_tiles);
        kv.n_tiles = int32_t(tiles.size());
        kv.max_piece = int32_t(max_piece);
      }
      enqueue_layers(w, int32_t(T), acts.data(), kvs.data());

      for (uint32_t ri = 0; R > 0 && ri < n_ranks; ++ri) {
        Rank& r = *ranks_[ri];
        on_device(r);
        const Acts& a = acts[ri];
        char* d = d_meta[ri];
        const int32_t rank_rows = int32_t(r.vocab_end - r.vocab_begin);
        float* lg = as<float>(batch_spaces_[ri]->logits);
        int32_t* d_argmax = reinterpret_cast<int32_t*>(d + o_argmax);
        QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, int32_t(H), V(w[kOutputNorm], r.first), a.xn, int32_t(R), int32_t(H),
                                         m.rms_eps, r.stream, reinterpret_cast<const int32_t*>(d + o_rows)));
        lm_head(w, r, a.xn, int32_t(R), lg, rank_rows);
        QSP_CUDA_CHECK(kern::argmax_rows(lg, rank_rows, int64_t(rank_rows), int32_t(R), d_argmax, r.stream));
        for (uint32_t k = 0; k < R; ++k) {
          const float* row = lg + size_t(k) * size_t(rank_rows);
          QSP_CUDA_CHECK(cudaMemcpyAsync(logits_receiver(*owner[row_owner[k]], r), row,
                                         size_t(rank_rows) * sizeof(float),
                                         n_ranks == 1 ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost, r.stream));
        }
        QSP_CUDA_CHECK(
            cudaMemcpyAsync(h_meta[ri] + o_argmax, d_argmax, R * sizeof(int32_t), cudaMemcpyDeviceToHost, r.stream));
      }
    };
    // A repeated batch shape (a server's decode steps) replays its graphs;
    // pieces given as embeddings (a caller's pointers) always run eagerly,
    // and with NCCL only once the communicators are connected.
    const std::vector<cudaGraphExec_t>* g = nullptr;
    if (T_tok == T && (!ranks_[0]->comm || nccl_warm_)) {
      BatchKey key;
      key.shape = {int64_t(T), int64_t(S), int64_t(tiles.size()), int64_t(R), int64_t(max_piece), int64_t(tile),
                   int64_t(off)};
      for (uint32_t ri = 0; ri < n_ranks; ++ri) {
        const BatchSpace& sp = *batch_spaces_[ri];
        for (const DeviceBuffer* b : {&sp.x, &sp.xn, &sp.qkv, &sp.q, &sp.att, &sp.act, &sp.logits, &sp.meta})
          key.buffers.push_back(b->ptr);
        key.buffers.push_back(sp.h_meta.ptr);
        for (uint32_t k = 0; k < R; ++k) key.buffers.push_back(logits_receiver(*owner[row_owner[k]], *ranks_[ri]));
      }
      try {
        g = batch_graphs_.get(key, weight_ids(w), streams_, devs_, enqueue_pass);
      } catch (const Error&) {
        if (!ranks_[0]->comm) throw;
        batch_graphs_.disable();
        cudaGetLastError();
      }
    }
    if (g) {
      for (uint32_t ri = 0; ri < n_ranks; ++ri) {
        on_device(*ranks_[ri]);
        QSP_CUDA_CHECK(cudaGraphLaunch((*g)[ri], ranks_[ri]->stream));
      }
    } else {
      enqueue_pass();
    }
    for (CudaBackend* o : owner) o->logits_fresh_ = false;
    for (auto& r : ranks_) {
      QSP_CUDA_CHECK(cudaSetDevice(r->dev));
      QSP_CUDA_CHECK(cudaStreamSynchronize(r->stream));
      QSP_CUDA_CHECK(cudaGetLastError());
    }
    for (uint32_t k = 0; k < R; ++k) {
      CudaBackend& o = *owner[row_owner[k]];
      if (n_ranks == 1) {
        static_cast<int32_t*>(o.ranks_[0]->h_small.ptr)[1] = reinterpret_cast<const int32_t*>(h_meta[0] + o_argmax)[k];
        continue;
      }
      // The argmax across ranks, as pick_greedy.
      const float* lg = static_cast<const float*>(o.h_logits_.ptr);
      int64_t best = -1;
      for (uint32_t ri = 0; ri < n_ranks; ++ri) {
        const int64_t i =
            int64_t(ranks_[ri]->vocab_begin) + reinterpret_cast<const int32_t*>(h_meta[ri] + o_argmax)[k];
        if (!std::isnan(lg[i]) && (best < 0 || lg[i] > lg[best])) best = i;
      }
      o.greedy_ = best < 0 ? 0 : int32_t(best);
      o.logits_fresh_ = true;
    }
    nccl_warm_ = true;
    return true;
  }

  // One rank: its logits are the whole vocabulary, copied on demand. Ranks
  // on several devices: each slice was copied when the chunk ran
  // (pick_greedy).
  const float* logits() override {
    if (!logits_fresh_) {
      Rank& r0 = *ranks_[0];
      QSP_CUDA_CHECK(cudaSetDevice(r0.dev));
      QSP_CUDA_CHECK(cudaMemcpyAsync(h_logits_.ptr, r0.logits.ptr, r0.logits.bytes, cudaMemcpyDeviceToHost, r0.stream));
      QSP_CUDA_CHECK(cudaStreamSynchronize(r0.stream));
      logits_fresh_ = true;
    }
    return static_cast<const float*>(h_logits_.ptr);
  }

  int32_t greedy_token() override {
    return ranks_.size() == 1 ? static_cast<const int32_t*>(ranks_[0]->h_small.ptr)[1] : greedy_;
  }

 private:
  // What one device does for this context: its shards [first, first +
  // count), run in turn, on its stream, with its activations and its part
  // of the KV cache ([its shard][layer][the shard's KV head][max_seq]
  // [head_dim] fp16), and its LM-head rows [vocab_begin, vocab_end).
  struct Rank {
    int dev = 0;
    uint32_t first = 0, count = 1;
    uint64_t vocab_begin = 0, vocab_end = 0;
    cudaDeviceProp prop{};
    Stream stream_holder;  // declared before the buffers: destroyed after them
    cudaStream_t stream = nullptr;
    DeviceBuffer k_cache, v_cache;
    DeviceBuffer x, xn, qkv, q, att, act, logits, small, attn_scratch;
    size_t attn_scratch_bytes = 0;
    PinnedBuffer h_small;  // [0] past, [1] argmax (of its logits), [2..] tokens
    void* comm = nullptr;  // its NCCL communicator (contexts spanning devices)
    // QSP_TP_LOCAL_RANKS: recorded when its part of a block is done (and on
    // rank 0 when the sum is). Destroyed before the stream (declared after it).
    struct Event {
      cudaEvent_t e = nullptr;
      ~Event() {
        if (e) cudaEventDestroy(e);
      }
    } reduced;
    // Weight upload (ensure_staging): released after the destructor
    // synchronized the stream (every upload synchronizes before it returns).
    std::shared_ptr<UploadStaging> staging;
    bool staging_failed = false;
  };

  void init_rank(Rank& r) {
    QSP_CUDA_CHECK(cudaSetDevice(r.dev));
    QSP_CUDA_CHECK(cudaGetDeviceProperties(&r.prop, r.dev));
    QSP_FAIL_IF(r.prop.major < 8, QSP_ERR_UNSUPPORTED, "%s (device %d) is compute capability %d.%d; qsp needs 8.0 or newer",
                r.prop.name, r.dev, r.prop.major, r.prop.minor);
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
    r.small.alloc((2 + C) * sizeof(int32_t), "positions/tokens");
    r.attn_scratch_bytes = kern::attention_scratch_bytes(int32_t(C), sh_heads_, int32_t(cfg.head_dim),
                                                         int32_t(cfg.max_seq));
    if (r.attn_scratch_bytes) r.attn_scratch.alloc(r.attn_scratch_bytes, "attention scratch");
    r.h_small.alloc((2 + C) * sizeof(int32_t), "positions/tokens");
  }

  // A communicator per rank (ncclCommInitAll: one process drives them all).
  // QSP_NCCL_ONE_RANK=1 (a test aid) gives one rank a communicator too, so
  // that the all-reduce path runs on a machine with one GPU.
  void init_nccl() {
    nccl_ = &nccl();  // throws QSP_ERR_UNSUPPORTED naming what is missing
    std::vector<int> devs;
    for (const auto& r : ranks_) devs.push_back(r->dev);
    std::vector<void*> comms(ranks_.size(), nullptr);
    nccl_check(nccl_->comm_init_all(comms.data(), int(devs.size()), devs.data()), "ncclCommInitAll");
    for (size_t i = 0; i < ranks_.size(); ++i) ranks_[i]->comm = comms[i];
  }

  void nccl_check(int result, const char* what) const {
    if (result == 0) return;
    const char* why = nccl_->get_error_string(result);
    throw Error(QSP_ERR_DEVICE, strprintf("NCCL error in %s: %s (%d)", what, why ? why : "unknown", result));
  }

  // Where rank r's slice of a logits row for context o goes in a batched
  // pass: o's device logits (one rank; copied to the host on demand), or
  // o's host logits at the slice (ranks on several devices: the gather).
  static void* logits_receiver(CudaBackend& o, const Rank& r) {
    if (o.ranks_.size() == 1) return o.ranks_[0]->logits.ptr;
    return static_cast<float*>(o.h_logits_.ptr) + r.vocab_begin;
  }

  // Makes rank r's device current for the launches that follow: a no-op
  // with one rank, whose device prefill() made current (so nothing but
  // stream work happens while a graph is being captured).
  void on_device(const Rank& r) const {
    if (ranks_.size() > 1) QSP_CUDA_CHECK(cudaSetDevice(r.dev));
  }

  // Rank that holds piece i of a slot's tensor (pieces()).
  Rank& rank_of(uint32_t piece) { return ranks_.size() == 1 ? *ranks_[0] : *ranks_[piece]; }

  // The activation buffers a chunk runs in: a rank's own, or the device's
  // batch space.
  struct Acts {
    float* x;
    __half* xn;
    float* qkv;
    __half* q;
    __half* att;
    __half* act;
    void* attn_scratch;
    size_t attn_scratch_bytes;
  };
  static Acts own_acts(const Rank& r) {
    return Acts{as<float>(r.x),   as<__half>(r.xn),  as<float>(r.qkv), as<__half>(r.q),
                as<__half>(r.att), as<__half>(r.act), r.attn_scratch.ptr, r.attn_scratch_bytes};
  }

  // Where a chunk's keys and values go and which keys its queries see: a
  // rank's cache from position *past (a device int), or, in a batched pass,
  // each piece's own cache (kern::SeqDesc).
  struct KvTarget {
    const int32_t* past = nullptr;          // single context
    const kern::SeqDesc* seqs = nullptr;    // batched pass: pieces (n_seqs per shard),
    int32_t n_seqs = 0;
    const int32_t* token_seq = nullptr;     //   the piece of each token,
    const int2* tiles = nullptr;            //   attention's query tiles
    int32_t n_tiles = 0;
    int32_t max_piece = 0;
  };

  // Enqueues one chunk on every rank's stream (also used while capturing the
  // graph: one rank).
  void enqueue(const ModelTensors& w, const PrefillChunk& c, bool capturing = false) {
    const int32_t n = int32_t(c.n), H = int32_t(cfg_.hidden);
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
  void pick_greedy() {
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
  void enqueue_layers(const ModelTensors& w, int32_t n, const Acts* acts, const KvTarget* kvs) {
    const ModelConfig& m = cfg_;
    const int32_t H = int32_t(m.hidden);
    for (uint32_t l = 0; l < m.n_layers; ++l) {
      const LayerTensors& L = w.layers[l];
      for (size_t i = 0; i < ranks_.size(); ++i) {
        Rank& r = *ranks_[i];
        const Acts& a = acts[i];
        on_device(r);
        QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, H, V(L[kAttnNorm], r.first), a.xn, n, H, m.rms_eps, r.stream));
        for (uint32_t s = r.first; s < r.first + r.count; ++s) enqueue_attention(L, l, r, s, n, a, kvs[i]);
      }
      all_reduce(acts, n);
      for (size_t i = 0; i < ranks_.size(); ++i) {
        Rank& r = *ranks_[i];
        const Acts& a = acts[i];
        on_device(r);
        QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, H, V(L[kFfnNorm], r.first), a.xn, n, H, m.rms_eps, r.stream));
        for (uint32_t s = r.first; s < r.first + r.count; ++s) {
          gemm(r.stream, a.xn, H, n, W(L[kWGate], s), &W(L[kWUp], s), kern::Epilogue::kSwiGLU, a.act, nullptr,
               sh_ffn_);
          gemm(r.stream, a.act, sh_ffn_, n, W(L[kWDown], s), nullptr, sum_epilogue(r, s), nullptr, a.x, H);
        }
      }
      all_reduce(acts, n);
    }
  }

  // How shard s of rank r puts its wo / w_down product into the residual
  // stream: added, except, where the ranks' copies are summed (reduce_), the
  // first shard of a rank other than 0, which stores it over its copy (the
  // all-reduce then adds the copies: x + every product, once).
  kern::Epilogue sum_epilogue(const Rank& r, uint32_t s) const {
    return reduce_ && &r != ranks_[0].get() && s == r.first ? kern::Epilogue::kStoreF32 : kern::Epilogue::kAddF32;
  }

  // The residual streams of all ranks summed in place (one rank without a
  // communicator: nothing to do, its shards added into it).
  void all_reduce(const Acts* acts, int32_t n) {
    if (local_ranks_) {
      local_all_reduce(acts, n);
      return;
    }
    if (!ranks_[0]->comm) return;
    const NcclLib& lib = *nccl_;
    const size_t count = size_t(n) * cfg_.hidden;
    nccl_check(lib.group_start(), "ncclGroupStart");
    int result = 0;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = *ranks_[i];
      const int e = lib.all_reduce(acts[i].x, acts[i].x, count, kNcclFloat32, kNcclSum, r.comm, r.stream);
      if (e != 0 && result == 0) result = e;
    }
    const int end = lib.group_end();
    nccl_check(result ? result : end, "ncclAllReduce");
  }

  // QSP_TP_LOCAL_RANKS's all-reduce on the one device: rank 0 waits for the
  // others, adds their copies into its own in rank order, and every other
  // rank waits for that and copies the sum back; rank 0 goes on only once
  // those copies are done (its next epilogue writes its copy again).
  void local_all_reduce(const Acts* acts, int32_t n) {
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
  void enqueue_attention(const LayerTensors& L, uint32_t l, Rank& r, uint32_t s, int32_t n, const Acts& a,
                         const KvTarget& kv) {
    const ModelConfig& m = cfg_;
    const int32_t H = int32_t(m.hidden), Q = sh_q_, KV = sh_kv_;
    const cudaStream_t stream = r.stream;
    {
      // Q | K | V are adjacent columns of qkv: one launch where the formats allow.
      const kern::DWeight &wq = W(L[kWq], s), &wk = W(L[kWk], s), &wv = W(L[kWv], s);
      const bool grouped = kern::gemm_row_group_ok(wq) && kern::gemm_row_group_ok(wk) && wk.fmt == wq.fmt &&
                           wv.fmt == wq.fmt && int64_t(wq.rows) == Q && int64_t(wk.rows) == KV;
      if (grouped) {
        const kern::DWeight cat[2] = {wk, wv};
        gemm(stream, a.xn, H, n, wq, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv, qkv_ld_, cat);
      } else {
        gemm(stream, a.xn, H, n, wq, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv, qkv_ld_);
        gemm(stream, a.xn, H, n, wk, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv + Q, qkv_ld_);
        gemm(stream, a.xn, H, n, wv, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv + Q + KV, qkv_ld_);
      }
    }

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
    }
    QSP_CUDA_CHECK(kern::qk_rope(rp, stream));
    QSP_CUDA_CHECK(kern::attention(at, stream));
    gemm(stream, a.att, Q, n, W(L[kWo], s), nullptr, sum_epilogue(r, s), nullptr, a.x, H);
  }

  // The logits of M normed rows xn on rank r: each of its shards' vocabulary
  // rows into its slice of out ([M][ldo], column 0 = the rank's first row).
  void lm_head(const ModelTensors& w, const Rank& r, const __half* xn, int32_t M, float* out, int32_t ldo) {
    const SlotDesc& head = kModelSlots[kLmHead];
    for (uint32_t s = r.first; s < r.first + r.count; ++s)
      gemm(r.stream, xn, int32_t(cfg_.hidden), M, W(w[kLmHead], s), nullptr, kern::Epilogue::kStoreF32, nullptr,
           out + (part_.rows(head, s).begin - r.vocab_begin), ldo);
  }

  void poison_scratch(Rank& r, const PrefillChunk& c, bool capturing) {
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
  static void gemm(cudaStream_t stream, const __half* x, int32_t ldx, int32_t M, const kern::DWeight& w,
                   const kern::DWeight* w2, kern::Epilogue ep, __half* out_h, float* out_f, int32_t ldo,
                   const kern::DWeight* cat = nullptr) {
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
    QSP_CUDA_CHECK(kern::gemm(g, stream));
  }

  // The graphs bake in weight pointers: the tensors they use.
  std::vector<const void*> weight_ids(const ModelTensors& w) const {
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

  // ---- Weight upload -------------------------------------------------------------------
  // Pieces a slot's tensor is stored in: one per shard for a slot the
  // partition cuts, one per device for the others (so one on one device).
  uint32_t pieces(const SlotDesc& slot) const {
    return slot.split == Split::kNone ? uint32_t(ranks_.size()) : n_sh_;
  }

  // One matrix (a whole tensor or a shard's piece) into p on rank r's
  // device, in the kernels' layout.
  void upload_matrix(const TensorMeta& m, const void* data, Rank& r, CudaTensor::Piece& p) {
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

  // The device's staging (upload_staging), taken at the first matrix this
  // backend uploads there (a context whose weights are all cached never
  // takes it). False when it cannot be had: upload() then goes unstaged.
  static bool ensure_staging(Rank& r) {
    if (r.staging) return true;
    if (r.staging_failed) return false;
    r.staging = upload_staging(r.dev);
    r.staging_failed = !r.staging;
    return !r.staging_failed;
  }

  void log_upload_stats() noexcept {
    const Rank& r0 = *ranks_[0];
    log_upload(upload_stats_, r0.staging ? r0.staging->pool->size() : 1);
  }

  ModelConfig cfg_;
  Partition part_;
  uint32_t n_sh_;  // shards (1: the unsplit model)
  // One shard's query heads, KV heads, q / kv widths and FFN features.
  int32_t sh_heads_, sh_kv_heads_, sh_q_, sh_kv_, sh_ffn_;
  size_t shard_kv_elems_ = 0;  // one shard's K (or V) cache, elements
  uint32_t chunk_ = 0;
  int32_t qkv_ld_ = 0;
  bool poison_ = false;  // test aid: NaN-fill scratch, logits and the KV slots a chunk is about to write
  std::vector<std::unique_ptr<Rank>> ranks_;  // one per device
  std::vector<cudaStream_t> streams_;         // the ranks' streams and devices, in rank order (graph captures)
  std::vector<int> devs_;
  const NcclLib* nccl_ = nullptr;             // the library the communicators came from (kept for the process)
  PinnedBuffer h_logits_;                     // the whole vocabulary
  bool logits_fresh_ = false;
  int32_t greedy_ = 0;  // ranks on several devices: pick_greedy's (one rank: its h_small[1])
  ChunkGraphs graphs_;        // a graph per rank for each repeated chunk shape
  BatchGraphs batch_graphs_;  // batched passes this context led
  bool nccl_warm_ = false;  // an eager chunk ran: the communicators are connected
  bool local_ranks_ = false;  // QSP_TP_LOCAL_RANKS: a rank per shard on one device
  bool reduce_ = false;       // the ranks' residual copies are summed (NCCL or local_ranks_)
  // Per rank, its device's batch space, set when this context first leads a batch.
  std::vector<std::shared_ptr<BatchSpace>> batch_spaces_;
  UploadStats upload_stats_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, const Partition& part,
                                           const std::vector<int32_t>& devices) {
  return std::unique_ptr<Backend>(new CudaBackend(cfg, part, devices));
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
