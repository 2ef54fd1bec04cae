// Q4_K: super-blocks of 256 weights in 8 sub-blocks of 32, each with a 6-bit
// scale sc and a 6-bit min m (packed in 12 bytes, see quant_util.h) under
// fp16 d and dmin; x = d * sc * q - dmin * m, q in [0, 15]. Element
// e = 64 c + 32 t + i (c < 4, t < 2, i < 32) is the low (t = 0) or high
// (t = 1) nibble of qs[32 c + i] (GGML's block_q4_K).
#include "formats/quant_util.h"

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

using qutil::kQK;

struct BlockQ4_K {
  uint16_t d;     // fp16 bits
  uint16_t dmin;  // fp16 bits
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes in GGUF");

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (uint64_t k = 0; k < n / kQK; ++k, out += kQK) {
    const float d = fp16_to_fp32(b[k].d), dmin = fp16_to_fp32(b[k].dmin);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      qutil::unpack_scale_min_k4(s, b[k].scales, &sc, &m);
      const float ds = d * float(sc), ms = dmin * float(m);
      const uint8_t* q = b[k].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int i = 0; i < 32; ++i) out[32 * s + i] = ds * float((q[i] >> shift) & 0xF) - ms;
    }
  }
}

// GGML's quantize_row_q4_K_ref: make_qkx2_quants(nmax 15, rmin -1, rdelta
// 0.1, 20 steps) per 32, 6-bit scale and min codes, levels again.
void quantize(const float* x, void* dst, uint64_t n) {
  BlockQ4_K* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQK];
  for (uint64_t k = 0; k < n / kQK; ++k, x += kQK) {
    qutil::quantize_scale_min_k4(x, 15, -1.0f, 0.1f, 20, y[k].scales, &y[k].d, &y[k].dmin, L);
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 32; ++i) y[k].qs[32 * c + i] = uint8_t(L[64 * c + i] | (L[64 * c + 32 + i] << 4));
  }
}

}  // namespace

extern const Format kFormatQ4_K = {QSP_DTYPE_Q4_K, "q4_K", qutil::kQK, sizeof(BlockQ4_K), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
