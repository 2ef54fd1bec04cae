// The CUDA backend, a batched pass: the pieces of several contexts in one
// pass over the model (qsp_prefill_batch; src/cuda/cuda_backend.h has the
// design).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "cuda/cuda_backend.h"

namespace qsp {
namespace cuda_impl {

// One pass over the pieces of several contexts: the projections, norms and
// the LM head run once over all their tokens; QK-norm/RoPE and attention
// take each token's piece from a table (kern::SeqDesc, one per shard), so
// every piece writes and reads only its own context's cache; the last
// token of each piece that wants logits gets them (one GEMM over those
// rows per shard) and its argmax, delivered to the owning context. Every
// rank runs the pass over all the tokens in its device's batch space, with
// the all-reduces of a single chunk.
bool CudaBackend::prefill_batch(const ModelTensors& w, const std::vector<BatchPiece>& pieces) {
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
  // token_seq | rows | dst], each 16-byte aligned; the argmax results come
  // back after it. dst (one device, the contexts' own logits buffers): where
  // each logits row goes, as data, so that a batch graph replays for any
  // contexts of its shape (kern::copy_rows).
  size_t off = 0;
  const auto place = [&](size_t bytes) {
    const size_t at = off;
    off += (bytes + 15) / 16 * 16;
    return at;
  };
  const size_t o_seqs = place(seqs.size() * sizeof(kern::SeqDesc)), o_tiles = place(tiles.size() * sizeof(int2)),
               o_tokens = place(tokens.size() * sizeof(int32_t)), o_tseq = place(T * sizeof(int32_t)),
               o_rows = place(rows.size() * sizeof(int32_t));
  std::vector<float*> dst;
  if (n_ranks == 1)
    for (uint32_t k = 0; k < R; ++k) dst.push_back(static_cast<float*>(logits_receiver(*owner[row_owner[k]], *ranks_[0])));
  const size_t o_dst = place(dst.size() * sizeof(float*));
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
    std::memcpy(h + o_dst, dst.data(), dst.size() * sizeof(float*));
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
      if (n_ranks == 1) {
        QSP_CUDA_CHECK(kern::copy_rows(lg, rank_rows, rank_rows, reinterpret_cast<float* const*>(d + o_dst),
                                       int32_t(R), true, r.stream));
      } else {
        // Several devices: each rank's slice of the row into the owner's
        // host logits (the gather), receivers in the graph's key.
        for (uint32_t k = 0; k < R; ++k)
          QSP_CUDA_CHECK(cudaMemcpyAsync(logits_receiver(*owner[row_owner[k]], r), lg + size_t(k) * size_t(rank_rows),
                                         size_t(rank_rows) * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
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
      if (n_ranks > 1)
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

// Where rank r's slice of a logits row for context o goes in a batched
// pass: o's device logits (one rank; copied to the host on demand), or
// o's host logits at the slice (ranks on several devices: the gather).
void* CudaBackend::logits_receiver(CudaBackend& o, const Rank& r) {
  if (o.ranks_.size() == 1) return o.ranks_[0]->logits.ptr;
  return static_cast<float*>(o.h_logits_.ptr) + r.vocab_begin;
}

}  // namespace cuda_impl
}  // namespace qsp
