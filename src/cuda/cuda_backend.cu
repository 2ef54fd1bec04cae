// The CUDA backend: the whole prefill on one device, one stream per context,
// no host round trip inside a chunk. The layer is
//
//   rmsnorm_f16 -> gemm(wq|wk|wv -> qkv fp32) -> qk_rope (+KV write)
//   -> attention (one launch, whole chunk) -> gemm(wo, += residual)
//   -> rmsnorm_f16 -> gemm(gate, up; SwiGLU epilogue) -> gemm(down, += residual)
//
// and after the last layer: rmsnorm of the last token -> LM-head GEMV -> argmax.
//
// A context split into shards (engine/partition.h) with every shard on this
// device runs each layer's attention and FFN blocks shard after shard: each
// shard's projections are matrices of their own (its rows of wq / wk / wv /
// w_gate / w_up, its columns of wo / w_down, cut at upload), its heads use
// its own part of the KV cache, and its wo / w_down products add into the
// residual stream, the local sum in place of the all-reduce. The LM head's
// shards write their slices of the logits; the argmax runs over all of them.
// Positions reach the kernels through a device int (`d_past_`), and no
// launch's grid depends on the position, so a chunk of n tokens captured once
// in a CUDA graph replays at every position (src/cuda/chunk_graphs.h).
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

namespace qsp {
namespace {

// Tokens per chunk: bounds the activation scratch (about 90 KB per token for
// an 8B-shaped model); longer prompts are split by the engine, attention
// reads the earlier chunks from the KV cache.
constexpr uint32_t kCudaChunk = 4096;

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelConfig& cfg, const Partition& part, int device)
      : cfg_(cfg),
        part_(part),
        n_sh_(part.size()),
        sh_heads_(int32_t(part.heads(0).size())),
        sh_kv_heads_(int32_t(part.kv_heads(0).size())),
        sh_q_(int32_t(part.range(Dim::kQDim, 0).size())),
        sh_kv_(int32_t(part.range(Dim::kKVDim, 0).size())),
        sh_ffn_(int32_t(part.range(Dim::kFfn, 0).size())),
        dev_(device) {
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
    // Every shard holds as many heads / KV heads / features as the others
    // (Partition); the per-shard buffers serve the shards in turn.
    const size_t C = chunk_, H = cfg.hidden, Q = size_t(sh_q_), KV = size_t(sh_kv_), F = size_t(sh_ffn_);
    qkv_ld_ = int32_t(Q + 2 * KV);
    shard_kv_elems_ = size_t(cfg.n_layers) * size_t(sh_kv_heads_) * cfg.max_seq * cfg.head_dim;
    const size_t kv_elems = shard_kv_elems_ * n_sh_;
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
    graphs_.drop();
    log_upload_stats();
  }

  int32_t kind() const override { return QSP_BACKEND_CUDA; }
  int32_t device() const override { return dev_; }
  std::string device_name() const override {
    return n_sh_ > 1 ? strprintf("%s (%u shards)", prop_.name, n_sh_) : std::string(prop_.name);
  }
  int32_t n_threads() const override { return 1; }
  uint64_t kv_bytes() const override { return k_cache_.bytes + v_cache_.bytes; }
  uint64_t scratch_bytes() const override {
    return x_.bytes + xn_.bytes + qkv_.bytes + q_.bytes + att_.bytes + act_.bytes + logits_.bytes + small_.bytes +
           attn_scratch_.bytes;
  }
  uint32_t max_chunk() const override { return chunk_; }

  void check_supported(const TensorMeta& m, const SlotDesc& slot, const char* where) const override {
    if (m.role == TensorRole::kVector) return;
    QSP_FAIL_IF(!kern::format_supported(m.dtype), QSP_ERR_UNSUPPORTED,
                "%s: the CUDA backend has no kernels for %s weights yet", where, fmt::name(m.dtype));
    // Each shard's piece is a matrix of its own.
    for (uint32_t s = 0; s < pieces(slot); ++s) {
      const uint64_t rows = part_.rows(slot, s).size(), cols = part_.cols(slot, s).size();
      const char* why = nullptr;
      QSP_FAIL_IF(!kern::gemm_supported(kern::format_for(m.dtype), int64_t(rows), int64_t(cols), &why),
                  QSP_ERR_UNSUPPORTED, "%s: the CUDA GEMM does not support %s %llux%llu%s: %s", where,
                  fmt::name(m.dtype), (unsigned long long)rows, (unsigned long long)cols,
                  pieces(slot) > 1 ? strprintf(" (shard %u of %u)", s, n_sh_).c_str() : "", why ? why : "");
    }
  }

  // A sharded context's cut matrices are pieces, not the plain tensor: their
  // own cache entry per shard count and side (engine/weight_cache.h).
  uint64_t cache_variant(const SlotDesc& slot) const override {
    return pieces(slot) > 1 ? uint64_t(n_sh_) << 8 | uint64_t(slot.split) : 0;
  }

  // Matrices: repacked into pinned staging slots by all cores, piece by
  // piece, each piece's copy overlapping the next piece's repack
  // (staged_upload); without staging (pinned memory refused, say) the whole
  // matrix is repacked into pageable memory and copied at once. A slot the
  // shards cut: each shard's rows / columns as a matrix of its own. Vectors:
  // fp32 at once. Returns once the copies are complete, so any stream may
  // use the tensor.
  std::unique_ptr<Tensor> upload(const TensorMeta& m, const SlotDesc& slot, const void* data) override {
    const auto start = std::chrono::steady_clock::now();
    QSP_CUDA_CHECK(cudaSetDevice(dev_));
    const uint32_t n = pieces(slot);
    std::unique_ptr<CudaTensor> t(new CudaTensor(m, dev_, n));
    if (m.role == TensorRole::kVector) {
      CudaTensor::Piece& p = t->piece(0);
      std::vector<float> host(m.cols);
      fmt::dequantize_row(m.dtype, data, host.data(), m.cols);
      p.buf.alloc(host.size() * sizeof(float), "weight upload");
      QSP_CUDA_CHECK(cudaMemcpyAsync(p.buf.ptr, host.data(), p.buf.bytes, cudaMemcpyHostToDevice, stream_));
      QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
      t->stored_bytes = p.buf.bytes;
      p.vec = static_cast<const float*>(p.buf.ptr);
      return std::unique_ptr<Tensor>(t.release());
    }
    std::vector<uint8_t> cut;  // a shard's columns, gathered row by row
    for (uint32_t s = 0; s < n; ++s) {
      TensorMeta pm = m;
      const void* pd = data;
      if (n > 1) {
        // The partition's ranges fall on block boundaries (check_tensor).
        const Range r = part_.rows(slot, s), c = part_.cols(slot, s);
        pm.rows = r.size();
        pm.cols = c.size();
        pm.bytes = fmt::tensor_bytes(m.dtype, pm.rows, pm.cols);
        const uint64_t row_bytes = fmt::tensor_bytes(m.dtype, 1, m.cols);
        const uint8_t* first = static_cast<const uint8_t*>(data) + r.begin * row_bytes;
        if (c.size() == m.cols) {
          pd = first;  // whole rows: the caller's bytes as they are
        } else {
          const uint64_t skip = fmt::tensor_bytes(m.dtype, 1, c.begin), piece_row = pm.bytes / pm.rows;
          cut.resize(pm.bytes);
          for (uint64_t i = 0; i < pm.rows; ++i)
            std::memcpy(cut.data() + i * piece_row, first + i * row_bytes + skip, piece_row);
          pd = cut.data();
        }
      }
      upload_matrix(pm, pd, t->piece(s));
      t->stored_bytes += t->piece(s).buf.bytes;
    }
    upload_stats_.total_s += seconds_since(start);
    return std::unique_ptr<Tensor>(t.release());
  }

  void prefill(const ModelTensors& w, const PrefillChunk& c) override {
    QSP_CUDA_CHECK(cudaSetDevice(dev_));
    int32_t* hs = static_cast<int32_t*>(h_small_.ptr);
    hs[0] = int32_t(c.past);
    if (c.tokens) std::memcpy(hs + 2, c.tokens, c.n * sizeof(int32_t));
    logits_fresh_ = false;

    // Token chunks replay a captured graph of their shape (embeddings come
    // from a caller's pointer per call: always eager).
    if (c.tokens) {
      const cudaGraphExec_t g = graphs_.get({c.n, c.want_logits}, weight_ids(w), stream_,
                                            [&] { enqueue(w, c, /*capturing=*/true); });
      if (g) {
        QSP_CUDA_CHECK(cudaGraphLaunch(g, stream_));
        QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return;
      }
    }
    enqueue(w, c);
    QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    QSP_CUDA_CHECK(cudaGetLastError());
  }

  // Tokens one batched pass holds: the batch space grows to this at most.
  uint32_t max_batch_tokens() const override { return kCudaChunk; }

  // One pass over the pieces of several contexts: the projections, norms and
  // the LM head run once over all their tokens; QK-norm/RoPE and attention
  // take each token's piece from a table (kern::SeqDesc), so every piece
  // writes and reads only its own context's cache; the last token of each
  // piece that wants logits gets them (one GEMM over those rows) and its
  // argmax, delivered to the owning context.
  bool prefill_batch(const ModelTensors& w, const std::vector<BatchPiece>& pieces) override {
    QSP_CUDA_CHECK(cudaSetDevice(dev_));
    const ModelConfig& m = cfg_;
    const uint32_t S = uint32_t(pieces.size());
    std::vector<CudaBackend*> owner(S);
    for (uint32_t i = 0; i < S; ++i) {
      owner[i] = dynamic_cast<CudaBackend*>(pieces[i].owner);
      QSP_FAIL_IF(!owner[i] || owner[i]->dev_ != dev_, QSP_ERR_INTERNAL, "batched pass: a piece of another device");
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
      kern::SeqDesc& d = seqs[k];
      d.k_cache = as<__half>(owner[i]->k_cache_);
      d.v_cache = as<__half>(owner[i]->v_cache_);
      d.max_seq = int32_t(owner[i]->cfg_.max_seq);
      d.past = int32_t(c.past);
      d.start = int32_t(start);
      d.n = int32_t(c.n);
      for (uint32_t sh = 1; sh < n_sh_; ++sh) {
        kern::SeqDesc& e = seqs[size_t(sh) * S + k];
        e = d;
        e.k_cache += sh * owner[i]->shard_kv_elems_;  // its max_seq, not necessarily this one's
        e.v_cache += sh * owner[i]->shard_kv_elems_;
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

    std::shared_ptr<BatchSpace> space = batch_space_;
    if (!space) space = batch_space_ = batch_space(dev_);
    std::lock_guard<std::mutex> lock(space->mu);
    const size_t H = m.hidden, Q = m.q_dim(), F = m.ffn;
    BatchSpace::ensure(space->x, T * H * sizeof(float), "batch residual stream");
    BatchSpace::ensure(space->xn, T * std::max(H, Q) * sizeof(__half), "batch normed activations");
    BatchSpace::ensure(space->qkv, T * size_t(qkv_ld_) * sizeof(float), "batch qkv");
    BatchSpace::ensure(space->q, T * Q * sizeof(__half), "batch queries");
    BatchSpace::ensure(space->att, T * Q * sizeof(__half), "batch attention output");
    BatchSpace::ensure(space->act, T * F * sizeof(__half), "batch SwiGLU output");
    BatchSpace::ensure(space->logits, std::max<size_t>(R, 1) * m.vocab * sizeof(float), "batch logits");

    // One copy of all the metadata: [seqs | tiles | tokens | token_seq | rows],
    // each 16-byte aligned; the argmax results come back after it.
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
    BatchSpace::ensure(space->meta, off, "batch metadata");
    if (space->h_meta_bytes < off) {
      space->h_meta.alloc(off, "batch metadata");
      space->h_meta_bytes = off;
    }
    char* h = static_cast<char*>(space->h_meta.ptr);
    char* d = static_cast<char*>(space->meta.ptr);
    std::memcpy(h + o_seqs, seqs.data(), seqs.size() * sizeof(kern::SeqDesc));
    std::memcpy(h + o_tiles, tiles.data(), tiles.size() * sizeof(int2));
    std::memcpy(h + o_tokens, tokens.data(), tokens.size() * sizeof(int32_t));
    std::memcpy(h + o_tseq, token_seq.data(), T * sizeof(int32_t));
    std::memcpy(h + o_rows, rows.data(), rows.size() * sizeof(int32_t));
    QSP_CUDA_CHECK(cudaMemcpyAsync(d, h, up_bytes, cudaMemcpyHostToDevice, stream_));

    const Acts a{as<float>(space->x), as<__half>(space->xn), as<float>(space->qkv), as<__half>(space->q),
                 as<__half>(space->att), as<__half>(space->act), nullptr, 0};
    if (T_tok)
      QSP_CUDA_CHECK(kern::embed(W(w[kTokenEmbd]), reinterpret_cast<const int32_t*>(d + o_tokens), int32_t(T_tok),
                                 a.x, stream_));
    for (uint32_t k = 0; k < S; ++k) {
      const PrefillChunk& c = pieces[order[k]].chunk;
      if (!c.tokens)
        QSP_CUDA_CHECK(cudaMemcpyAsync(a.x + size_t(seqs[k].start) * H, c.embeddings, size_t(c.n) * H * sizeof(float),
                                       cudaMemcpyHostToDevice, stream_));
    }
    KvTarget kv;
    kv.seqs = reinterpret_cast<const kern::SeqDesc*>(d + o_seqs);
    kv.n_seqs = int32_t(S);
    kv.token_seq = reinterpret_cast<const int32_t*>(d + o_tseq);
    kv.tiles = reinterpret_cast<const int2*>(d + o_tiles);
    kv.n_tiles = int32_t(tiles.size());
    kv.max_piece = int32_t(max_piece);
    enqueue_layers(w, int32_t(T), a, kv);

    if (R > 0) {
      float* lg = as<float>(space->logits);
      int32_t* d_argmax = reinterpret_cast<int32_t*>(d + o_argmax);
      QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, int32_t(H), V(w[kOutputNorm]), a.xn, int32_t(R), int32_t(H), m.rms_eps,
                                       stream_, reinterpret_cast<const int32_t*>(d + o_rows)));
      lm_head(w, a.xn, int32_t(R), lg);
      QSP_CUDA_CHECK(kern::argmax_rows(lg, int32_t(m.vocab), int64_t(m.vocab), int32_t(R), d_argmax, stream_));
      for (uint32_t r = 0; r < R; ++r)
        QSP_CUDA_CHECK(cudaMemcpyAsync(owner[row_owner[r]]->logits_.ptr, lg + size_t(r) * m.vocab,
                                       size_t(m.vocab) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
      QSP_CUDA_CHECK(cudaMemcpyAsync(h + o_argmax, d_argmax, R * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    }
    for (CudaBackend* o : owner) o->logits_fresh_ = false;
    QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    QSP_CUDA_CHECK(cudaGetLastError());
    for (uint32_t r = 0; r < R; ++r)
      static_cast<int32_t*>(owner[row_owner[r]]->h_small_.ptr)[1] = reinterpret_cast<const int32_t*>(h + o_argmax)[r];
    return true;
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
  // The activation buffers a chunk runs in: this context's own, or the
  // device's batch space.
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
  Acts own_acts() {
    return Acts{as<float>(x_), as<__half>(xn_), as<float>(qkv_), as<__half>(q_), as<__half>(att_), as<__half>(act_),
                attn_scratch_.ptr, attn_scratch_bytes_};
  }

  // Where a chunk's keys and values go and which keys its queries see: this
  // context's cache from position *past (a device int), or, in a batched
  // pass, each piece's own cache (kern::SeqDesc).
  struct KvTarget {
    const int32_t* past = nullptr;          // single context
    const kern::SeqDesc* seqs = nullptr;    // batched pass: pieces (n_seqs per shard),
    int32_t n_seqs = 0;
    const int32_t* token_seq = nullptr;     //   the piece of each token,
    const int2* tiles = nullptr;            //   attention's query tiles
    int32_t n_tiles = 0;
    int32_t max_piece = 0;
  };

  // Enqueues one chunk on the stream (also used while capturing the graph).
  void enqueue(const ModelTensors& w, const PrefillChunk& c, bool capturing = false) {
    const int32_t n = int32_t(c.n), H = int32_t(cfg_.hidden);
    int32_t* d_small = as<int32_t>(small_);
    int32_t* d_past = d_small;
    int32_t* d_argmax = d_small + 1;
    int32_t* d_tokens = d_small + 2;
    int32_t* hs = static_cast<int32_t*>(h_small_.ptr);
    // Position (and tokens) from pinned memory: in a graph these are memcpy
    // nodes reading the same pinned addresses, refilled before each replay.
    if (poison_) poison_scratch(c, capturing);
    QSP_CUDA_CHECK(cudaMemcpyAsync(d_past, hs, sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    const Acts a = own_acts();
    if (c.tokens) {
      QSP_CUDA_CHECK(cudaMemcpyAsync(d_tokens, hs + 2, c.n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
      QSP_CUDA_CHECK(kern::embed(W(w[kTokenEmbd]), d_tokens, n, a.x, stream_));
    } else {
      QSP_CUDA_CHECK(cudaMemcpyAsync(a.x, c.embeddings, size_t(c.n) * H * sizeof(float), cudaMemcpyHostToDevice,
                                     stream_));
    }
    KvTarget kv;
    kv.past = d_past;
    enqueue_layers(w, n, a, kv);
    if (!c.want_logits) return;
    QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x + size_t(n - 1) * H, H, V(w[kOutputNorm]), a.xn, 1, H, cfg_.rms_eps, stream_));
    lm_head(w, a.xn, 1, as<float>(logits_));
    QSP_CUDA_CHECK(kern::argmax(as<float>(logits_), int32_t(cfg_.vocab), d_argmax, stream_));
    QSP_CUDA_CHECK(cudaMemcpyAsync(hs + 1, d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  }

  // Every layer over n tokens already embedded in a.x (the residual stream):
  // per block, the shards in turn, each adding its product into a.x.
  void enqueue_layers(const ModelTensors& w, int32_t n, const Acts& a, const KvTarget& kv) {
    const ModelConfig& m = cfg_;
    const int32_t H = int32_t(m.hidden);
    for (uint32_t l = 0; l < m.n_layers; ++l) {
      const LayerTensors& L = w.layers[l];
      QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, H, V(L[kAttnNorm]), a.xn, n, H, m.rms_eps, stream_));
      for (uint32_t s = 0; s < n_sh_; ++s) enqueue_attention(L, l, s, n, a, kv);
      QSP_CUDA_CHECK(kern::rmsnorm_f16(a.x, H, V(L[kFfnNorm]), a.xn, n, H, m.rms_eps, stream_));
      for (uint32_t s = 0; s < n_sh_; ++s) {
        gemm(a.xn, H, n, W(L[kWGate], s), &W(L[kWUp], s), kern::Epilogue::kSwiGLU, a.act, nullptr, sh_ffn_);
        gemm(a.act, sh_ffn_, n, W(L[kWDown], s), nullptr, kern::Epilogue::kAddF32, nullptr, a.x, H);
      }
    }
  }

  // Shard s's heads of layer l over the normed a.xn: QKV, QK-norm + RoPE
  // with its KV-cache write, attention, and its columns of wo added into a.x.
  void enqueue_attention(const LayerTensors& L, uint32_t l, uint32_t s, int32_t n, const Acts& a,
                         const KvTarget& kv) {
    const ModelConfig& m = cfg_;
    const int32_t H = int32_t(m.hidden), Q = sh_q_, KV = sh_kv_;
    {
      // Q | K | V are adjacent columns of qkv: one launch where the formats allow.
      const kern::DWeight &wq = W(L[kWq], s), &wk = W(L[kWk], s), &wv = W(L[kWv], s);
      const bool grouped = kern::gemm_row_group_ok(wq) && kern::gemm_row_group_ok(wk) && wk.fmt == wq.fmt &&
                           wv.fmt == wq.fmt && int64_t(wq.rows) == Q && int64_t(wk.rows) == KV;
      if (grouped) {
        const kern::DWeight cat[2] = {wk, wv};
        gemm(a.xn, H, n, wq, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv, qkv_ld_, cat);
      } else {
        gemm(a.xn, H, n, wq, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv, qkv_ld_);
        gemm(a.xn, H, n, wk, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv + Q, qkv_ld_);
        gemm(a.xn, H, n, wv, nullptr, kern::Epilogue::kStoreF32, nullptr, a.qkv + Q + KV, qkv_ld_);
      }
    }

    kern::QkRopeArgs r;
    r.qkv = a.qkv;
    r.ld = qkv_ld_;
    r.q_norm = V(L[kQNorm]);
    r.k_norm = V(L[kKNorm]);
    r.q_out = a.q;
    r.M = n;
    r.n_heads = sh_heads_;
    r.n_kv_heads = sh_kv_heads_;
    r.head_dim = int32_t(m.head_dim);
    r.eps = m.rms_eps;
    r.theta = m.rope_theta;
    r.rope_style = m.rope_style;
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
      r.seqs = at.seqs = kv.seqs + size_t(s) * kv.n_seqs;
      r.token_seq = kv.token_seq;
      r.layer = at.layer = int32_t(l);
      at.tiles = kv.tiles;
      at.n_tiles = kv.n_tiles;
      at.max_piece = kv.max_piece;
    } else {
      // The cache is [shard][layer][the shard's KV head][max_seq][head_dim].
      const size_t layer_kv = size_t(sh_kv_heads_) * m.max_seq * m.head_dim;
      const size_t off = s * shard_kv_elems_ + l * layer_kv;
      __half* kc = as<__half>(k_cache_) + off;
      __half* vc = as<__half>(v_cache_) + off;
      r.k_cache = kc;
      r.v_cache = vc;
      at.k_cache = kc;
      at.v_cache = vc;
      r.max_seq = at.max_seq = int32_t(m.max_seq);
      r.past = at.past = kv.past;
    }
    QSP_CUDA_CHECK(kern::qk_rope(r, stream_));
    QSP_CUDA_CHECK(kern::attention(at, stream_));
    gemm(a.att, Q, n, W(L[kWo], s), nullptr, kern::Epilogue::kAddF32, nullptr, a.x, H);
  }

  // The logits of M normed rows xn into out ([M][vocab]): each shard's
  // vocabulary rows into its slice (the gather).
  void lm_head(const ModelTensors& w, const __half* xn, int32_t M, float* out) {
    const SlotDesc& head = kModelSlots[kLmHead];
    for (uint32_t s = 0; s < pieces(head); ++s)
      gemm(xn, int32_t(cfg_.hidden), M, W(w[kLmHead], s), nullptr, kern::Epilogue::kStoreF32, nullptr,
           out + part_.rows(head, s).begin, int32_t(cfg_.vocab));
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
  // Shard pieces a slot's tensor is stored in: one per shard for a slot the
  // partition cuts, else one.
  uint32_t pieces(const SlotDesc& slot) const { return slot.split == Split::kNone ? 1 : n_sh_; }

  // One matrix (a whole tensor or a shard's piece) into p, in the kernels'
  // layout.
  void upload_matrix(const TensorMeta& m, const void* data, CudaTensor::Piece& p) {
    const kern::WFormat f = kern::format_for(m.dtype);
    const size_t bytes = kern::dweight_bytes(f, int64_t(m.rows), int64_t(m.cols));
    p.w.fmt = f;
    p.w.rows = int32_t(m.rows);
    p.w.cols = int32_t(m.cols);
    const auto alloc_start = std::chrono::steady_clock::now();
    p.buf.alloc(bytes, "weight upload");
    upload_stats_.alloc_s += seconds_since(alloc_start);
    if (ensure_staging() &&
        staged_upload(*staging_, stream_, m, data, f, static_cast<uint8_t*>(p.buf.ptr), upload_stats_)) {
      ++upload_stats_.staged;
    } else {
      std::vector<uint8_t> host(bytes);
      const auto repack_start = std::chrono::steady_clock::now();
      kern::repack_weight(m.dtype, data, int64_t(m.rows), int64_t(m.cols), host.data());
      upload_stats_.repack_s += seconds_since(repack_start);
      QSP_CUDA_CHECK(cudaMemcpyAsync(p.buf.ptr, host.data(), bytes, cudaMemcpyHostToDevice, stream_));
      QSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    p.w.data = p.buf.ptr;
    ++upload_stats_.tensors;
    upload_stats_.bytes_in += m.bytes;
    upload_stats_.bytes_out += bytes;
  }

  // The device's staging (upload_staging), taken at the first matrix this
  // backend uploads (a context whose weights are all cached never takes
  // it). False when it cannot be had: upload() then goes unstaged.
  bool ensure_staging() {
    if (staging_) return true;
    if (staging_failed_) return false;
    staging_ = upload_staging(dev_);
    staging_failed_ = !staging_;
    return !staging_failed_;
  }

  void log_upload_stats() noexcept { log_upload(upload_stats_, staging_ ? staging_->pool->size() : 1); }

  ModelConfig cfg_;
  Partition part_;
  uint32_t n_sh_;  // shards, run in turn (1: the unsplit model)
  // One shard's query heads, KV heads, q / kv widths and FFN features.
  int32_t sh_heads_, sh_kv_heads_, sh_q_, sh_kv_, sh_ffn_;
  size_t shard_kv_elems_ = 0;  // one shard's K (or V) cache, elements
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
  bool poison_ = false;
  ChunkGraphs graphs_;
  std::shared_ptr<BatchSpace> batch_space_;  // set when this context first leads a batch
  // Weight upload (ensure_staging): released after the destructor
  // synchronized the stream (every upload synchronizes before it returns).
  std::shared_ptr<UploadStaging> staging_;
  bool staging_failed_ = false;
  UploadStats upload_stats_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, const Partition& part, int32_t device_index) {
  return std::unique_ptr<Backend>(new CudaBackend(cfg, part, device_index));
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
