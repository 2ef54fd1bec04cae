// Q3_K: super-blocks of 256 weights in 16 sub-blocks of 16 with 6-bit signed
// scales (stored + 32) under an fp16 d; x = d * (sc - 32) * (q - 4), q in
// [0, 7]. Element e = 128 h + 32 k + i (h < 2, k < 4, i < 32): low two bits
// are bits 2k..2k+1 of qs[32 h + i], the high bit is bit e / 32 of hmask[i].
// Scale s: low nibble in scales[s] (s < 8, bits 0-3) or scales[s - 8] (bits
// 4-7), top two bits at bits 2 (s / 4) of scales[8 + s % 4] (GGML's block_q3_K).
#include "formats/quant_util.h"

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

using qutil::kQK;
using qutil::nearest_int;

struct BlockQ3_K {
  uint8_t hmask[32];  // high bit of each level
  uint8_t qs[64];     // low two bits
  uint8_t scales[12];
  uint16_t d;  // fp16 bits
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes in GGUF");

// Sub-block s's 6-bit scale code (the scale is code - 32).
int scale_code(const uint8_t* scales, int s) {
  const int low = s < 8 ? scales[s] & 0xF : scales[s - 8] >> 4;
  return low | ((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
}

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ3_K* b = static_cast<const BlockQ3_K*>(src);
  for (uint64_t k = 0; k < n / kQK; ++k, out += kQK) {
    const float d = fp16_to_fp32(b[k].d);
    for (int e = 0; e < kQK; ++e) {
      const float dl = d * float(scale_code(b[k].scales, e / 16) - 32);
      const int low = (b[k].qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
      const int high = (b[k].hmask[e % 32] >> (e / 32)) & 1;
      out[e] = dl * float(low - (high ? 0 : 4));
    }
  }
}

// GGML's make_q3_quants with do_rmse: symmetric levels l in [-nmax, nmax - 1]
// for x ~ scale * l (weights x^2), refined by up to 5 passes that move one
// level at a time while the weighted least-squares fit improves. Returns the
// scale; L[i] = l + nmax.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < qutil::kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto clamp = [nmax](int l) { return l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l; };
  const float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]));
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * float(L[i]) * float(L[i]);
        const int new_l = clamp(nearest_int(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w * x[i] * float(new_l);
          sl2 += w * float(new_l) * float(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// GGML's quantize_row_q3_K_ref: make_q3_quants per 16, 6-bit codes of
// -32 scale / max_scale (max_scale: the scale of largest |.|), then the levels
// again with the stored scales.
void quantize(const float* x, void* dst, uint64_t n) {
  BlockQ3_K* y = static_cast<BlockQ3_K*>(dst);
  int8_t L[kQK];
  float scales[16];
  for (uint64_t k = 0; k < n / kQK; ++k, x += kQK) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) { amax = scale; max_scale = scales[j]; }
    }
    std::memset(y[k].scales, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        int8_t l = int8_t(nearest_int(iscale * scales[j]));
        l = int8_t((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
        if (j < 8)
          y[k].scales[j] = uint8_t(l & 0xF);
        else
          y[k].scales[j - 8] |= uint8_t((l & 0xF) << 4);
        l = int8_t(l >> 4);
        y[k].scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
      }
      y[k].d = fp32_to_fp16(1 / iscale);
    } else {
      y[k].d = fp32_to_fp16(0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(y[k].d) * float(int8_t(scale_code(y[k].scales, j) - 32));
      if (d == 0.0f) continue;  // keeps make_q3_quants' levels, as GGML does
      for (int i = 0; i < 16; ++i) {
        const int l = nearest_int(x[16 * j + i] / d);
        L[16 * j + i] = int8_t((l < -4 ? -4 : l > 3 ? 3 : l) + 4);
      }
    }
    // The high bit of element e goes to bit e / 32 of hmask[e % 32].
    std::memset(y[k].hmask, 0, 32);
    for (int e = 0; e < kQK; ++e) {
      if (L[e] > 3) {
        y[k].hmask[e % 32] |= uint8_t(1u << (e / 32));
        L[e] = int8_t(L[e] - 4);
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 32; ++i) {
        const int8_t* l = L + 128 * h + i;
        y[k].qs[32 * h + i] = uint8_t(l[0] | (l[32] << 2) | (l[64] << 4) | (l[96] << 6));
      }
  }
}

}  // namespace

extern const Format kFormatQ3_K = {QSP_DTYPE_Q3_K, "q3_K", qutil::kQK, sizeof(BlockQ3_K), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
