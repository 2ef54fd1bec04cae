// Q2_K: super-blocks of 256 weights in 16 sub-blocks of 16. scales[s] holds
// sub-block s's 4-bit scale (low nibble) and 4-bit min (high nibble), qs the
// 2-bit levels, then fp16 d and dmin; x = d * sc * q - dmin * m. Element
// e = 128 h + 32 k + i (h < 2, k < 4, i < 32) is bits 2k..2k+1 of
// qs[32 h + i] (GGML's block_q2_K).
#include "formats/quant_util.h"

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

using qutil::kQK;
using qutil::nearest_int;

struct BlockQ2_K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min
  uint8_t qs[64];
  uint16_t d;     // fp16 bits
  uint16_t dmin;  // fp16 bits
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes in GGUF");

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ2_K* b = static_cast<const BlockQ2_K*>(src);
  for (uint64_t k = 0; k < n / kQK; ++k, out += kQK) {
    const float d = fp16_to_fp32(b[k].d), dmin = fp16_to_fp32(b[k].dmin);
    for (int e = 0; e < kQK; ++e) {
      const uint8_t sc = b[k].scales[e / 16];
      const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
      const int q = (b[k].qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
      out[e] = dl * float(q) - ml;
    }
  }
}

// GGML's quantize_row_q2_K_ref: make_qkx2_quants per 16 (weights |x|, mean
// absolute error), 4-bit codes of scale / max_scale and min / max_min, then
// the levels again with the stored scales.
void quantize(const float* x, void* dst, uint64_t n) {
  BlockQ2_K* y = static_cast<BlockQ2_K*>(dst);
  uint8_t L[kQK], Laux[16];
  float weights[16], mins[16], scales[16];
  const float q4scale = 15.0f;
  for (uint64_t k = 0; k < n / kQK; ++k, x += kQK) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = qutil::make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15,
                                          true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; ++j) y[k].scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      y[k].d = fp32_to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < 16; ++j) y[k].scales[j] = 0;
      y[k].d = fp32_to_fp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j) y[k].scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
      y[k].dmin = fp32_to_fp16(max_min / q4scale);
    } else {
      y[k].dmin = fp32_to_fp16(0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(y[k].d) * float(y[k].scales[j] & 0xF);
      if (d == 0.0f) continue;  // keeps make_qkx2_quants' levels, as GGML does
      const float dm = fp16_to_fp32(y[k].dmin) * float(y[k].scales[j] >> 4);
      for (int i = 0; i < 16; ++i) {
        const int l = nearest_int((x[16 * j + i] + dm) / d);
        L[16 * j + i] = uint8_t(l < 0 ? 0 : l > 3 ? 3 : l);
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 32; ++i) {
        const uint8_t* l = L + 128 * h + i;
        y[k].qs[32 * h + i] = uint8_t(l[0] | (l[32] << 2) | (l[64] << 4) | (l[96] << 6));
      }
  }
}

}  // namespace

extern const Format kFormatQ2_K = {QSP_DTYPE_Q2_K, "q2_K", qutil::kQK, sizeof(BlockQ2_K), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
