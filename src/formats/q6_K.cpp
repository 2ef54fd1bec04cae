// Q6_K: super-blocks of 256 weights in 16 sub-blocks of 16 with int8 scales
// under an fp16 d; x = d * sc * (q - 32), q in [0, 63]. Element
// e = 128 h + 32 k + i (h < 2, k < 4, i < 32): low four bits the low (k < 2)
// or high (k >= 2) nibble of ql[64 h + 32 (k % 2) + i], high two bits bits
// 2k..2k+1 of qh[32 h + i] (GGML's block_q6_K).
#include "formats/quant_util.h"

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

using qutil::kQK;
using qutil::nearest_int;

struct BlockQ6_K {
  uint8_t ql[128];  // low four bits
  uint8_t qh[64];   // high two bits
  int8_t scales[16];
  uint16_t d;  // fp16 bits
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes in GGUF");

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (uint64_t k = 0; k < n / kQK; ++k, out += kQK) {
    const float d = fp16_to_fp32(b[k].d);
    for (int e = 0; e < kQK; ++e) {
      const int h = e / 128, c = e % 128 / 32, i = e % 32;
      const int low = (b[k].ql[64 * h + 32 * (c % 2) + i] >> (4 * (c / 2))) & 0xF;
      const int high = (b[k].qh[32 * h + i] >> (2 * c)) & 3;
      out[e] = d * float(b[k].scales[e / 16]) * float((low | high << 4) - 32);
    }
  }
}

// GGML's quantize_row_q6_K_ref: make_qx_quants(nmax 32) per 16, int8 codes of
// -128 scale / max_scale (max_scale: the scale of largest |.|), levels again.
void quantize(const float* x, void* dst, uint64_t n) {
  BlockQ6_K* y = static_cast<BlockQ6_K*>(dst);
  int8_t L[kQK];
  float scales[16];
  for (uint64_t k = 0; k < n / kQK; ++k, x += kQK) {
    float max_scale = 0, max_abs_scale = 0;
#if defined(QSP_QUANT_SSE2)
    for (int j0 = 0; j0 < 16; j0 += 4) {
      const float* const xs[4] = {x + 16 * j0, x + 16 * (j0 + 1), x + 16 * (j0 + 2), x + 16 * (j0 + 3)};
      int8_t* const Ls[4] = {L + 16 * j0, L + 16 * (j0 + 1), L + 16 * (j0 + 2), L + 16 * (j0 + 3)};
      float sc[4];
      qutil::make_qx_quants_x4<16>(32, xs, Ls, sc);
      for (int k = 0; k < 4; ++k) scales[j0 + k] = sc[k];
    }
#else
    for (int j = 0; j < 16; ++j) scales[j] = qutil::make_qx_quants(16, 32, x + 16 * j, L + 16 * j);
#endif
    for (int j = 0; j < 16; ++j) {
      const float abs_scale = std::fabs(scales[j]);
      if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scales[j]; }
    }
    if (max_abs_scale < qutil::kGroupMaxEps) {
      std::memset(&y[k], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[k].d = fp32_to_fp16(1 / iscale);
    for (int j = 0; j < 16; ++j) {
      const int l = nearest_int(iscale * scales[j]);
      y[k].scales[j] = int8_t(l < 127 ? l : 127);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(y[k].d) * float(y[k].scales[j]);
      if (d == 0.0f) continue;  // keeps make_qx_quants' levels, as GGML does
      for (int i = 0; i < 16; ++i) {
        const int l = nearest_int(x[16 * j + i] / d);
        L[16 * j + i] = int8_t((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 32; ++i) {
        const int8_t* l = L + 128 * h + i;
        y[k].ql[64 * h + i] = uint8_t((l[0] & 0xF) | ((l[64] & 0xF) << 4));
        y[k].ql[64 * h + 32 + i] = uint8_t((l[32] & 0xF) | ((l[96] & 0xF) << 4));
        y[k].qh[32 * h + i] = uint8_t((l[0] >> 4) | ((l[32] >> 4) << 2) | ((l[64] >> 4) << 4) | ((l[96] >> 4) << 6));
      }
  }
}

}  // namespace

extern const Format kFormatQ6_K = {QSP_DTYPE_Q6_K, "q6_K", qutil::kQK, sizeof(BlockQ6_K), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
