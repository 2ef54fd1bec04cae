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
//
// The class is in three files by job: src/cuda/cuda_backend.cu (devices,
// ranks, NCCL, weight upload), src/cuda/cuda_pass.cu (a chunk of one
// context: the layers, the all-reduces, the LM head, the graphs) and
// src/cuda/cuda_batch.cu (a batched pass over several contexts).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/partition.h"
#include "kernels/kernels.h"
#include "cuda/chunk_graphs.h"
#include "cuda/cuda_upload.h"
#include "cuda/cuda_util.h"
#include "cuda/nccl_lib.h"

namespace qsp {
namespace cuda_impl {

// Tokens per chunk: bounds the activation scratch (about 90 KB per token for
// an 8B-shaped model); longer prompts are split by the engine, attention
// reads the earlier chunks from the KV cache.
constexpr uint32_t kCudaChunk = 4096;

inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
// A default-on switch: off only where the variable is "0".
inline bool env_not_off(const char* name) {
  const char* v = std::getenv(name);
  return !v || std::strcmp(v, "0") != 0;
}

class CudaBackend final : public Backend {
 public:
  // devices: the device of each shard of `part` (all one device, or one
  // device per shard: engine/context.cpp).
  CudaBackend(const ModelConfig& cfg, const Partition& part, const std::vector<int32_t>& devices);
  ~CudaBackend() override;

  int32_t kind() const override { return QSP_BACKEND_CUDA; }
  int32_t device() const override { return ranks_[0]->dev; }
  std::string device_name() const override;
  int32_t n_threads() const override { return 1; }
  uint64_t kv_bytes() const override;
  uint64_t scratch_bytes() const override;
  uint32_t max_chunk() const override { return chunk_; }
  void check_supported(const TensorMeta& m, const SlotDesc& slot, const char* where) const override;
  uint64_t cache_variant(const SlotDesc& slot) const override;
  std::unique_ptr<Tensor> upload(const TensorMeta& m, const SlotDesc& slot, const void* data) override;

  void prefill(const ModelTensors& w, const PrefillChunk& c) override;
  // Tokens one batched pass holds: the batch space grows to this at most.
  uint32_t max_batch_tokens() const override { return kCudaChunk; }
  bool prefill_batch(const ModelTensors& w, const std::vector<BatchPiece>& pieces) override;
  const float* logits() override;
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
    // The all-reduces' own stream where they overlap the other half's
    // compute (tp_overlap_; null otherwise).
    Stream comm_stream_holder;
    cudaStream_t comm_stream = nullptr;
    DeviceBuffer k_cache, v_cache;
    DeviceBuffer x, xn, qkv, q, att, act, logits, small, attn_scratch;
    size_t attn_scratch_bytes = 0;
    // The integer GEMV's activations formed once per GEMV
    // (kern::GemmArgs::i8_stage; $QSP_GEMV_I8_STAGE): the GEMVs of the
    // rank's stream share it.
    DeviceBuffer i8_stage;
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
    // tp_overlap_: per token half h, ready[h] on `stream` when the half's
    // block is done (its partial sums in x), done[h] on comm_stream when its
    // all-reduce is.
    Event ready[2], done[2];
    // Weight upload (ensure_staging): released after the destructor
    // synchronized the stream (every upload synchronizes before it returns).
    std::shared_ptr<UploadStaging> staging;
    bool staging_failed = false;
  };

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
    const int32_t* past = nullptr;          // single context,
    int32_t max_past = -1;                  //   a bound on *past the launches may assume (-1: none)
    const kern::SeqDesc* seqs = nullptr;    // batched pass: pieces (n_seqs per shard),
    int32_t n_seqs = 0;
    const int32_t* token_seq = nullptr;     //   the piece of each token,
    const int2* tiles = nullptr;            //   attention's query tiles
    int32_t n_tiles = 0;
    int32_t max_piece = 0;
  };

  // ---- Set-up (cuda_backend.cu) ----
  void init_rank(Rank& r);
  void init_nccl();
  void nccl_check(int result, const char* what) const;

  // Makes rank r's device current for the launches that follow: a no-op
  // with one rank, whose device prefill() made current (so nothing but
  // stream work happens while a graph is being captured).
  void on_device(const Rank& r) const {
    if (ranks_.size() > 1) QSP_CUDA_CHECK(cudaSetDevice(r.dev));
  }
  // Rank that holds piece i of a slot's tensor (pieces()).
  Rank& rank_of(uint32_t piece) { return ranks_.size() == 1 ? *ranks_[0] : *ranks_[piece]; }
  // Pieces a slot's tensor is stored in: one per shard for a slot the
  // partition cuts, one per device for the others (so one on one device).
  uint32_t pieces(const SlotDesc& slot) const {
    return slot.split == Split::kNone ? uint32_t(ranks_.size()) : n_sh_;
  }
  // One matrix (a whole tensor or a shard's piece) into p on rank r's
  // device, in the kernels' layout.
  void upload_matrix(const TensorMeta& m, const void* data, Rank& r, CudaTensor::Piece& p);
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
  void log_upload_stats() noexcept;

  // ---- One context's chunk (cuda_pass.cu) ----
  void finish_chunk(const PrefillChunk& c);
  int32_t short_cache_bound(const PrefillChunk& c) const;
  void enqueue(const ModelTensors& w, const PrefillChunk& c, bool capturing = false);
  void pick_greedy();
  void enqueue_layers(const ModelTensors& w, int32_t n, const Acts* acts, const KvTarget* kvs);
  // Chunks the GEMV takes whole (kern::gemm_norm_in_ok: the decode step)
  // on ranks of one shard each form the attention's and the FFN's input
  // RMSNorm in the prologue of the GEMVs that read it (Q | K | V, gate |
  // up; kern::GemmArgs::norm_in_x), from the residual stream directly: 2
  // launches per layer fewer, the same bits as the rmsnorm launches (H100,
  // 2026-12-05: decode step 0.6B -3 to -6%, 8B -1 to -2%; per context,
  // QSP_NORM_IN=0 turns it off). A rank of several shards adds each
  // shard's product into the residual before the next shard's GEMV would
  // read it: not there.
  bool norm_in(int32_t n) const {
    if (!norm_in_ || !kern::gemm_norm_in_ok(n, int32_t(cfg_.hidden))) return false;
    for (const auto& r : ranks_)
      if (r->count != 1) return false;
    return true;
  }
  // The input of a GEMV that forms its RMSNorm (kern::GemmArgs::norm_in_*).
  struct InNorm {
    const float* x;  // [n][hidden] fp32, the residual stream
    const float* w;
    float eps;
  };
  // How shard s of rank r puts its wo / w_down product into the residual
  // stream: added, except, where the ranks' copies are summed (reduce_), the
  // first shard of a rank other than 0, which stores it over its copy (the
  // all-reduce then adds the copies: x + every product, once).
  kern::Epilogue sum_epilogue(const Rank& r, uint32_t s) const {
    return reduce_ && &r != ranks_[0].get() && s == r.first ? kern::Epilogue::kStoreF32 : kern::Epilogue::kAddF32;
  }
  void all_reduce(const Acts* acts, int32_t n);
  void local_all_reduce(const Acts* acts, int32_t n);
  // Tensor parallelism with the all-reduces overlapped (tp_overlap_): a
  // single context's chunk of at least kTpOverlapMin tokens runs as two
  // token halves, the second at position past + its first's length (like
  // a chunked prompt), each block of each half followed by its all-reduce
  // on the comm stream while the compute stream runs the other half.
  static constexpr int32_t kTpOverlapMin = 256;
  bool tp_overlapped(int32_t n, const KvTarget* kvs) const {
    return tp_overlap_ && ranks_[0]->comm_stream && !kvs[0].seqs && n >= kTpOverlapMin && !norm_in(n);
  }
  void enqueue_layers_overlapped(const ModelTensors& w, int32_t n, const Acts* acts, const KvTarget* kvs);
  // The NCCL all-reduce of rows [row0, row0 + rows) of every rank's
  // residual stream, on the ranks' comm streams or their own.
  void all_reduce_rows(const Acts* acts, int32_t row0, int32_t rows, bool comm_stream);
  void enqueue_attention(const LayerTensors& L, uint32_t l, Rank& r, uint32_t s, int32_t n, const Acts& a,
                         const KvTarget& kv, const InNorm* in = nullptr);
  void enqueue_ffn(const LayerTensors& L, Rank& r, uint32_t s, int32_t n, const Acts& a, const InNorm* in = nullptr);
  void lm_head(const ModelTensors& w, const Rank& r, const __half* xn, int32_t M, float* out, int32_t ldo);
  void poison_scratch(Rank& r, const PrefillChunk& c, bool capturing);
  // cat: optional, two more weights whose rows follow w's (kern::GemmArgs::wcat).
  static void gemm(const Rank& r, const __half* x, int32_t ldx, int32_t M, const kern::DWeight& w,
                   const kern::DWeight* w2, kern::Epilogue ep, __half* out_h, float* out_f, int32_t ldo,
                   const kern::DWeight* cat = nullptr, const InNorm* in = nullptr);
  std::vector<const void*> weight_ids(const ModelTensors& w) const;

  // ---- A batched pass (cuda_batch.cu) ----
  static void* logits_receiver(CudaBackend& o, const Rank& r);

  ModelConfig cfg_;
  Partition part_;
  uint32_t n_sh_;  // shards (1: the unsplit model)
  // One shard's query heads, KV heads, q / kv widths and FFN features.
  int32_t sh_heads_, sh_kv_heads_, sh_q_, sh_kv_, sh_ffn_;
  size_t shard_kv_elems_ = 0;  // one shard's K (or V) cache, elements
  uint32_t chunk_ = 0;
  int32_t qkv_ld_ = 0;
  bool norm_in_ = true;  // norm_in(); QSP_NORM_IN=0: off
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
  // QSP_TP_OVERLAP: unset, on for ranks on several devices through NCCL;
  // "0" off; "1" also for QSP_NCCL_ONE_RANK's one rank (a test aid).
  bool tp_overlap_ = false;
  // Per rank, its device's batch space, set when this context first leads a batch.
  std::vector<std::shared_ptr<BatchSpace>> batch_spaces_;
  UploadStats upload_stats_;
};

}  // namespace cuda_impl
}  // namespace qsp
