// Q5_0: blocks of 32 weights, an fp16 scale d, 32 high bits qh (little-endian
// uint32) and 16 bytes of nibbles; x[i] = d * (q[i] - 16), q[i] = low | high
// << 4 with low the low nibble of qs[i] (i < 16) or the high nibble of
// qs[i - 16] (i >= 16), high bit i of qh (GGML's block_q5_0).
#include "formats/quant_util.h"

#include <algorithm>

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

struct BlockQ5_0 {
  uint16_t d;  // fp16 bits
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes in GGUF");

uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ5_0* b = static_cast<const BlockQ5_0*>(src);
  for (uint64_t k = 0; k < n / 32; ++k, out += 32) {
    const float d = fp16_to_fp32(b[k].d);
    const uint32_t qh = load_le32(b[k].qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = int((b[k].qs[j] & 0x0f) | ((qh >> j) & 1) << 4);
      const int q1 = int((b[k].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
      out[j] = float(q0 - 16) * d;
      out[j + 16] = float(q1 - 16) * d;
    }
  }
}

// GGML's quantize_row_q5_0_ref: d = max / -16 (max: the value of largest |x|),
// q = min(31, trunc(x / d + 16.5)).
void quantize(const float* src, void* dst, uint64_t n) {
  BlockQ5_0* y = static_cast<BlockQ5_0*>(dst);
  for (uint64_t k = 0; k < n / 32; ++k, src += 32) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(src[j])) { amax = std::fabs(src[j]); max = src[j]; }
    }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint8_t q0 = uint8_t(std::min(31, int(int8_t(qutil::trunc_i32(src[j] * id + 16.5f)))));
      const uint8_t q1 = uint8_t(std::min(31, int(int8_t(qutil::trunc_i32(src[j + 16] * id + 16.5f)))));
      y[k].qs[j] = uint8_t((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= uint32_t((q0 & 0x10u) >> 4) << j;
      qh |= uint32_t((q1 & 0x10u) >> 4) << (j + 16);
    }
    for (int i = 0; i < 4; ++i) y[k].qh[i] = uint8_t(qh >> (8 * i));
  }
}

}  // namespace

extern const Format kFormatQ5_0 = {QSP_DTYPE_Q5_0, "q5_0", 32, sizeof(BlockQ5_0), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
