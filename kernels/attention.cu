// Batched causal flash attention (FlashAttention-2 style) for the prefill and
// decode of GQA models: one launch per layer covers the whole chunk of M query
// tokens, whatever M (1 .. 8192) and whatever the cache position.
//
// Work decomposition
//  - A thread block owns a tile of kBlockM "rows". A row is one (query token,
//    query head) pair; the rows of a block all belong to ONE KV head: the
//    `gp` query heads of a GQA group (or a slice of it) times kBlockM / gp
//    consecutive tokens, token-major (row r = token r / gp, head r % gp). Each
//    K/V tile is then loaded once for every query head that reads it, which
//    is what keeps decode (M = 1, only `group` useful rows) from re-reading
//    the cache once per query head.
//  - K/V tiles of kBlockN keys stream through shared memory with cp.async,
//    two stages each for K and V, so the next tile's load overlaps this
//    tile's math. S = Q K^T and O += P V run on tensor cores
//    (mma.sync m16n8k16, fp16 in, fp32 accumulate), operands fetched with
//    ldmatrix (.trans for V). Shared memory rows are XOR-swizzled in 16-byte
//    chunks so that ldmatrix and the cp.async stores are bank-conflict free.
//  - Online softmax in fp32 registers with base-2 exponentials: scores are
//    kept raw and scaled by scale*log2(e) inside one FMA per element.
//  - Causality: query m sits at position past + m and sees keys 0 .. past+m.
//    `past` is read on the device; the grid depends only on (M, heads,
//    max_seq, device), so a CUDA graph captured once stays valid at every
//    position. Tiles past the block's last visible key are never visited;
//    only tiles crossing the diagonal pay for the mask.
//  - Split-KV (flash-decoding): when (M, heads) alone cannot fill the GPU,
//    blockIdx.z splits the key range [0, past + M) into n_splits equal,
//    tile-aligned chunks (sized on the device from `past`); each split writes
//    an fp32 partial O (normalized) and its base-2 log-sum-exp to scratch and
//    a second kernel merges them. Splits with nothing to do write lse = -inf.
//
// Files: this one validates, plans and picks the kernel; the mma.sync kernel
// is kernels/attention_mma.cu, the split-KV merge kernels/attention_combine.cu,
// the Hopper kernel kernels/attention_wgmma.cu.
//
// Three tile configurations (see make_plan): kBig (128 rows, 4 warps of 32
// rows: every K/V fragment read from shared memory feeds two MMAs, needed to
// be tensor-core rather than shared-memory bound on long prefills), kMid (64
// rows, 4 warps of 16 rows, Q kept in registers) and kSmall (16 rows, one
// warp: decode and tiny chunks, where the cache read is the whole cost).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/attention_internal.cuh"
#include "kernels/attention_wgmma.h"
#include "kernels/env.h"
#include "kernels/kernels.h"
#include "kernels/per_device.h"
#include "qsp/qsp.h"

namespace qsp {
namespace kern {
namespace {

using namespace attn;

// ============================================================================
// Planning
// ============================================================================
// Tuning knobs (per KV head, rows = M x group):
//  - rows <= kSmallMaxRows: decode-like; a bigger tile would be mostly
//    padding and the cache read is the whole cost.
//  - rows <= kMidMaxRows: 16-row warps with Q in registers; more blocks for
//    the short-to-medium chunks that cannot fill the GPU with 128-row tiles.
//  - beyond: kBig, 32-row warps, the long-prefill workhorse.
constexpr int64_t kSmallMaxRows = 16;
constexpr int64_t kMidMaxRows = 1024;
// Split-KV: split when the blocks fill less than 80% of one wave of
// (SMs x CTAs/SM), into at most kMaxSplits splits of >= kMinKeysPerSplit
// keys (of max_seq: the real length is only known on the device), with at
// most kMaxPartialRows (row, split) partials, which bounds the scratch.
constexpr int kMaxSplits = 128;
constexpr int kMinKeysPerSplit = 64;
constexpr int64_t kMaxPartialRows = 32768;
static_assert(kMaxSplits <= kCombineMaxSplits, "the combine kernel holds one lse per thread");

struct ConfigInfo {
  int block_m, ctas_per_sm;
};
template <class Kt>
constexpr ConfigInfo info_of() {
  return {Kt::kBlockM, Kt::kMinBlocksPerSm};
}
ConfigInfo config_info(Config c) {
  // The tile shapes do not depend on head_dim.
  static_assert(SmallTraits<64>::kBlockM == SmallTraits<128>::kBlockM && MidTraits<64>::kBlockM == MidTraits<128>::kBlockM &&
                    BigTraits<64>::kBlockM == BigTraits<128>::kBlockM,
                "plans are head_dim independent");
  switch (c) {
    case kSmall: return info_of<SmallTraits<128>>();
    case kMid: return info_of<MidTraits<128>>();
    default: return info_of<BigTraits<128>>();
  }
}


int largest_divisor_at_most(int n, int cap) {
  for (int d = std::min(n, cap); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// Everything here is a function of shapes and the device only, never of
// `past` (a device value), so captured graphs stay valid.
Plan make_plan(int M, int n_heads, int n_kv_heads, int head_dim, int max_seq, int n_sms, size_t scratch_bytes) {
  Plan pl;
  const int group = n_heads / n_kv_heads;
  const int64_t rows = int64_t(M) * group;
  pl.cfg = rows <= kSmallMaxRows ? kSmall : rows <= kMidMaxRows ? kMid : kBig;
  const ConfigInfo ci = config_info(pl.cfg);
  pl.gp = largest_divisor_at_most(group, ci.block_m);
  pl.tokens = ci.block_m / pl.gp;
  pl.m_blocks = (M + pl.tokens - 1) / pl.tokens;
  pl.head_blocks = n_kv_heads * (group / pl.gp);
  const int64_t blocks = int64_t(pl.m_blocks) * pl.head_blocks;
  const int64_t target = int64_t(n_sms) * ci.ctas_per_sm;
  if (blocks * 5 >= target * 4) return pl;  // >= 80% of a full wave: no split
  int64_t s = (target + blocks - 1) / blocks;
  s = std::min<int64_t>(s, kMaxSplits);
  s = std::min<int64_t>(s, std::max(1, max_seq / kMinKeysPerSplit));
  s = std::min<int64_t>(s, kMaxPartialRows / (int64_t(M) * n_heads));
  const size_t per_split = size_t(M) * n_heads * (size_t(head_dim) + 1) * sizeof(float);
  s = std::min<int64_t>(s, int64_t(scratch_bytes / per_split));
  pl.n_splits = s > 1 ? int(s) : 1;
  return pl;
}

// A batched pass: the tile shape for its longest piece (the pieces' tiles
// are laid out by the caller, n_tiles of them, attention_batch_tile_tokens()
// tokens each), no split. The cache reads of the decode pieces are spread
// over (pieces x KV heads) blocks already.
Plan make_batch_plan(int max_piece, int n_heads, int n_kv_heads, int n_tiles) {
  Plan pl;
  const int group = n_heads / n_kv_heads;
  const int64_t rows = int64_t(max_piece) * group;
  pl.cfg = rows <= kSmallMaxRows ? kSmall : rows <= kMidMaxRows ? kMid : kBig;
  const ConfigInfo ci = config_info(pl.cfg);
  pl.gp = largest_divisor_at_most(group, ci.block_m);
  pl.tokens = ci.block_m / pl.gp;
  pl.m_blocks = n_tiles;
  pl.head_blocks = n_kv_heads * (group / pl.gp);
  return pl;
}

size_t plan_scratch_bytes(const Plan& pl, int M, int n_heads, int head_dim) {
  if (pl.n_splits <= 1) return 0;
  return size_t(pl.n_splits) * M * n_heads * (size_t(head_dim) + 1) * sizeof(float);
}

// The SM count of the current device (kernels/per_device.h caches it).
cudaError_t device_sm_count(int* n) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  *n = sm_count(dev);
  return *n > 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

bool attention_supported(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

size_t attention_scratch_bytes(int32_t max_M, int32_t n_heads, int32_t head_dim, int32_t max_seq) {
  if (max_M < 1 || n_heads < 1 || !attention_supported(head_dim) || max_seq < 1) return 0;
  int n_sms = 0;
  if (device_sm_count(&n_sms) != cudaSuccess) {
    cudaGetLastError();
    n_sms = 132;  // no device to ask: size for an H100/H200
  }
  // The largest need over every chunk length and every GQA shape with this
  // many query heads (the KV head count is not an argument).
  size_t need = 0;
  for (int kv = 1; kv <= n_heads; ++kv) {
    if (n_heads % kv) continue;
    for (int M = 1; M <= max_M; ++M) {
      const Plan pl = make_plan(M, n_heads, kv, head_dim, max_seq, n_sms, SIZE_MAX);
      need = std::max(need, plan_scratch_bytes(pl, M, n_heads, head_dim));
    }
  }
  return need;
}

// Where kAuto takes the cluster kernel: caches of at most this many keys,
// by GQA group (a warp's work a key grows with the group's query heads; the
// mma.sync kernel's does not). Measured (H100, twenty-ninth session: 8 warps
// x 32 keys a block, clusters of 8, against mma.sync + combine, Q4_0 steps):
//   0.6B (group 2): 1 key -9.6%, 1024 -10.7%, 2048 -5.5%, 4096 +3.5%;
//   8B (group 4):   1 key -2.1%, 512 -0.3%, 1024 -0.8%, 2048 +4.4%, 4096 +9.7%.
// Linear between, they cross near 3,250 keys (group 2) and 1,200 (group 4).
// Group 8 is not measured: half group 4's bound by that rule; group 1 takes
// group 2's.
static int32_t cluster_keys_default(int32_t group) { return group <= 2 ? 3072 : group <= 4 ? 1024 : 512; }
int32_t attention_cluster_keys(int32_t n_heads, int32_t n_kv_heads, int32_t head_dim) {
  static const bool on = env_default_on("QSP_ATTN_CLUSTER");
  static const int32_t env_keys = [] {  // -1: unset
    const char* e = std::getenv("QSP_ATTN_CLUSTER_KEYS");
    return e && *e ? int32_t(std::clamp<long>(std::strtol(e, nullptr, 10), 0, INT32_MAX)) : -1;
  }();
  if (!on || n_kv_heads < 1 || n_heads % n_kv_heads) return 0;
  const int32_t keys = env_keys >= 0 ? env_keys : cluster_keys_default(n_heads / n_kv_heads);
  if (keys == 0) return 0;
  AttnArgs a;
  a.M = 1;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  return attn::cluster_decode_runs(a) ? keys : 0;
}

namespace {

// kAuto's choice of the cluster kernel: a decode step the caller bounds
// short enough (AttnArgs::max_past).
bool cluster_auto(const AttnArgs& a) {
  return a.max_past >= 0 && int64_t(a.max_past) + 1 <= attention_cluster_keys(a.n_heads, a.n_kv_heads, a.head_dim) &&
         attn::cluster_decode_runs(a);
}

// AttnArgs::rope describes this launch's step: one token of one context,
// the same caches, position and heads; arguments qk_rope() would take.
bool rope_matches(const AttnArgs& a) {
  const QkRopeArgs& r = *a.rope;
  if (a.M != 1 || r.M != 1 || r.seqs || a.seqs || !r.qkv) return false;
  if (r.k_cache != a.k_cache || r.v_cache != a.v_cache || r.past != a.past || r.max_seq != a.max_seq) return false;
  if (r.n_heads != a.n_heads || r.n_kv_heads != a.n_kv_heads || r.head_dim != a.head_dim) return false;
  if (r.rope_style != QSP_ROPE_NEOX && r.rope_style != QSP_ROPE_INTERLEAVED) return false;
  if (!(r.theta > 0.0f) || !std::isfinite(r.theta) || !(r.eps >= 0.0f)) return false;
  if (r.ld < int64_t(r.n_heads + 2 * r.n_kv_heads) * r.head_dim) return false;
  return (reinterpret_cast<uintptr_t>(r.qkv) & 3) == 0;
}

}  // namespace

bool attention_fuses_rope(const AttnArgs& a) {
  static const bool on = env_on("QSP_ATTN_CLUSTER_ROPE");
  return on && a.path == AttnPath::kAuto && !a.seqs && a.M == 1 && cluster_auto(a);
}

int32_t attention_batch_tile_tokens(int32_t max_piece, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim) {
  if (max_piece < 1 || n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads || !attention_supported(head_dim))
    return 0;
  return make_batch_plan(max_piece, n_heads, n_kv_heads, 1).tokens;
}

cudaError_t attention(const AttnArgs& a, cudaStream_t stream) {
  if (a.prefetch != AttnPrefetch::kAuto && a.prefetch != AttnPrefetch::kOff && a.prefetch != AttnPrefetch::kOn)
    return cudaErrorInvalidValue;
  if (a.seqs) {
    // A batched pass: the pieces and tiles are device data the caller built.
    if (!a.q || !a.out || !a.tiles || a.n_tiles < 1 || a.layer < 0 || a.max_piece < 1 || a.max_piece > a.M)
      return cudaErrorInvalidValue;
    if (!attention_supported(a.head_dim)) return cudaErrorInvalidValue;
    if (a.n_heads < 1 || a.n_kv_heads < 1 || a.n_heads % a.n_kv_heads != 0 || a.n_heads > 65535)
      return cudaErrorInvalidValue;
    if (!(a.scale > 0.0f) || !std::isfinite(a.scale) || !aligned16(a.q) || !aligned16(a.out))
      return cudaErrorInvalidValue;
    if (a.path == AttnPath::kWgmma || a.path == AttnPath::kWgmmaOne || a.path == AttnPath::kCluster)
      return cudaErrorNotSupported;
    if (a.rope) return cudaErrorInvalidValue;  // one context's step only
    return attn::run_mma(a, make_batch_plan(a.max_piece, a.n_heads, a.n_kv_heads, a.n_tiles), stream);
  }
  if (!a.q || !a.k_cache || !a.v_cache || !a.out || !a.past) return cudaErrorInvalidValue;
  if (!attention_supported(a.head_dim)) return cudaErrorInvalidValue;
  if (a.M < 1 || a.n_heads < 1 || a.n_kv_heads < 1 || a.n_heads % a.n_kv_heads != 0) return cudaErrorInvalidValue;
  if (a.max_seq < a.M || a.n_heads > 65535) return cudaErrorInvalidValue;  // gridDim.y <= n_heads
  if (!(a.scale > 0.0f) || !std::isfinite(a.scale)) return cudaErrorInvalidValue;
  // Row-granular 16-byte copies need 16-byte aligned rows (head_dim is a
  // multiple of 8, so aligned bases suffice).
  if (!aligned16(a.q) || !aligned16(a.k_cache) || !aligned16(a.v_cache) || !aligned16(a.out))
    return cudaErrorInvalidValue;
  if (int64_t(a.n_kv_heads) * a.max_seq * a.head_dim > (int64_t(1) << 40)) return cudaErrorInvalidValue;

  int n_sms = 0;
  cudaError_t e = device_sm_count(&n_sms);
  if (e != cudaSuccess) return e;
  // Without (enough) scratch the plan simply splits less, down to not at all.
  const size_t scratch = a.scratch && aligned16(a.scratch) ? a.scratch_bytes : 0;
  const Plan pl = make_plan(a.M, a.n_heads, a.n_kv_heads, a.head_dim, a.max_seq, n_sms, scratch);
  if (a.path != AttnPath::kAuto && a.path != AttnPath::kMma && a.path != AttnPath::kWgmma &&
      a.path != AttnPath::kWgmmaOne && a.path != AttnPath::kCluster)
    return cudaErrorInvalidValue;
  // The decode step in one launch, its split-KV merged by a cluster
  // (kernels/attention_decode.cu), where the caller bounds the cache short
  // enough; off by default until measured. Only it folds qk_rope in.
  if (a.rope && !rope_matches(a)) return cudaErrorInvalidValue;
  if (a.path == AttnPath::kCluster || (a.path == AttnPath::kAuto && cluster_auto(a)))
    return attn::run_cluster_decode(a, stream);
  if (a.rope) return cudaErrorNotSupported;
  // On Hopper the wgmma kernel (one 128-row block per SM, no split-KV)
  // whenever its grid fills >= 20% of a wave: measured 1.7-2.6x the mma.sync
  // kernels from 128 to 8192 tokens (bench/RESULTS.md). Short chunks and
  // decode steps keep the split-KV mma.sync kernels. A half-wave threshold
  // (the 0.6B's 512-token chunk, 64 wgmma blocks on 132 SMs, moved to the
  // split-KV mma.sync kernel) measured 14% slower on that pass (H100,
  // twenty-fourth session): wgmma 59 TFLOPS against mma.sync's 36 there.
  // Where that 128-row grid fills at most half a wave, blocks of one
  // consumer warpgroup (64 rows: twice the blocks, each alone on its SM;
  // $QSP_ATTN_WG_ONE=0 turns it off). H200, twenty-fifth session: the
  // 0.6B's 512-token pass 2.088 -> 2.008 ms (-3.8%), 256 tokens -3.6%, the
  // 8B's 256 -1.3%; bench_attention 512 tokens of 16 / 8 heads after 1536
  // cached 194 -> 269 TFLOPS. Past half a wave it loses (the 8B's 512: 128
  // -> 109 TFLOPS): the two warpgroups' overlap is worth more there.
  const int group = a.n_heads / a.n_kv_heads;
  const int wg_gp = largest_divisor_at_most(group, attn90::kBlockM);
  const int64_t wg_blocks = int64_t((a.M + attn90::kBlockM / wg_gp - 1) / (attn90::kBlockM / wg_gp)) *
                            a.n_kv_heads * (group / wg_gp);
  static const bool one_auto = env_default_on("QSP_ATTN_WG_ONE");
  const bool want_one = a.path == AttnPath::kWgmmaOne ||
                        (a.path == AttnPath::kAuto && one_auto && wg_blocks * 2 <= int64_t(n_sms));
  const bool want_wgmma =
      a.path == AttnPath::kWgmma || a.path == AttnPath::kWgmmaOne ||
      (a.path == AttnPath::kAuto && wg_blocks * 5 >= int64_t(n_sms));
  if (want_wgmma) {
    int dev = 0;
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (a.head_dim == attn90::kHeadDim && attn90::available(dev)) {
      attn90::Args w;
      w.q = a.q;
      w.k_cache = a.k_cache;
      w.v_cache = a.v_cache;
      w.out = a.out;
      w.past = a.past;
      w.M = a.M;
      w.n_heads = a.n_heads;
      w.n_kv_heads = a.n_kv_heads;
      w.max_seq = a.max_seq;
      w.group = group;
      w.block_m = want_one ? attn90::kBlockMOne : attn90::kBlockM;
      w.gp = largest_divisor_at_most(group, w.block_m);
      w.scale_log2 = a.scale * 1.4426950408889634f;
      return attn90::run(w, stream);
    }
    if (a.path == AttnPath::kWgmma || a.path == AttnPath::kWgmmaOne) return cudaErrorNotSupported;
  }
  return attn::run_mma(a, pl, stream);
}

}  // namespace kern
}  // namespace qsp
