// Q5_K: super-blocks of 256 weights in 8 sub-blocks of 32, each with a 6-bit
// scale sc and a 6-bit min m (packed in 12 bytes, see quant_util.h) under
// fp16 d and dmin; x = d * sc * q - dmin * m, q in [0, 31]. Element
// e = 64 c + 32 t + i (c < 4, t < 2, i < 32): low four bits the low (t = 0)
// or high (t = 1) nibble of qs[32 c + i], high bit bit e / 32 of qh[i]
// (GGML's block_q5_K).
#include "formats/quant_util.h"

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

using qutil::kQK;

struct BlockQ5_K {
  uint16_t d;     // fp16 bits
  uint16_t dmin;  // fp16 bits
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes in GGUF");

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ5_K* b = static_cast<const BlockQ5_K*>(src);
  for (uint64_t k = 0; k < n / kQK; ++k, out += kQK) {
    const float d = fp16_to_fp32(b[k].d), dmin = fp16_to_fp32(b[k].dmin);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      qutil::unpack_scale_min_k4(s, b[k].scales, &sc, &m);
      const float ds = d * float(sc), ms = dmin * float(m);
      const uint8_t* q = b[k].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int i = 0; i < 32; ++i) {
        const int l = ((q[i] >> shift) & 0xF) + ((b[k].qh[i] >> s) & 1) * 16;
        out[32 * s + i] = ds * float(l) - ms;
      }
    }
  }
}

// GGML's quantize_row_q5_K_ref: make_qkx2_quants(nmax 31, rmin -0.5, rdelta
// 0.1, 15 steps) per 32, 6-bit scale and min codes, levels again.
void quantize(const float* x, void* dst, uint64_t n) {
  BlockQ5_K* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQK];
  for (uint64_t k = 0; k < n / kQK; ++k, x += kQK) {
    qutil::quantize_scale_min_k4(x, 31, -0.5f, 0.1f, 15, y[k].scales, &y[k].d, &y[k].dmin, L);
    std::memset(y[k].qh, 0, 32);
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 32; ++i) {
        const int l1 = L[64 * c + i], l2 = L[64 * c + 32 + i];
        y[k].qh[i] |= uint8_t((l1 >> 4) << (2 * c) | (l2 >> 4) << (2 * c + 1));
        y[k].qs[32 * c + i] = uint8_t((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
  }
}

}  // namespace

extern const Format kFormatQ5_K = {QSP_DTYPE_Q5_K, "q5_K", qutil::kQK, sizeof(BlockQ5_K), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
