// The Hopper prefill attention (kernels/attention_wgmma.cu, sm_90a machine
// code only): the long-prompt path of kern::attention() for head_dim 128
// when the device runs it. attention() (kernels/attention.cu) validates the
// arguments and picks the path.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qsp {
namespace kern {
namespace attn90 {

constexpr int kHeadDim = 128;
constexpr int kBlockM = 128;    // rows (token x query head) per block, 64 per consumer warpgroup
constexpr int kBlockMOne = 64;  // the block of one consumer warpgroup (twice the blocks, each alone on its SM)
constexpr int kBlockN = 128;  // keys per K/V tile

struct Args {
  const __half* q;        // [M][n_heads][128]
  const __half* k_cache;  // [n_kv_heads][max_seq][128]
  const __half* v_cache;
  __half* out;            // [M][n_heads][128]
  const int32_t* past;    // device
  int M, n_heads, n_kv_heads, max_seq;
  int group;              // n_heads / n_kv_heads
  int gp;                 // query heads per block (divides group, at most block_m;
                          // a block holds block_m / gp whole tokens)
  float scale_log2;       // scale * log2(e)
  int block_m = kBlockM;  // rows per block: kBlockM or kBlockMOne
};

// Whether the sm_90a kernel is in this build and can run on device `dev`.
bool available(int dev);

// One launch over the whole chunk; no split-KV.
cudaError_t run(const Args& a, cudaStream_t stream);

}  // namespace attn90
}  // namespace kern
}  // namespace qsp
