#include "common/quant.h"

#include <algorithm>

namespace qsp {

void dequantize_row(int32_t dtype, const void* row, float* out, uint64_t n_cols) {
  switch (dtype) {
    case QSP_DTYPE_F32:
      std::memcpy(out, row, n_cols * sizeof(float));
      return;
    case QSP_DTYPE_F16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      for (uint64_t i = 0; i < n_cols; ++i) out[i] = fp16_to_fp32(p[i]);
      return;
    }
    case QSP_DTYPE_BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      for (uint64_t i = 0; i < n_cols; ++i) out[i] = bf16_to_fp32(p[i]);
      return;
    }
    case QSP_DTYPE_Q4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(row);
      for (uint64_t k = 0; k < n_cols / kQBlock; ++k, out += kQBlock) {
        const float d = fp16_to_fp32(b[k].d);
        for (int j = 0; j < 16; ++j) {
          out[j] = d * float(int(b[k].qs[j] & 0x0f) - 8);
          out[j + 16] = d * float(int(b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case QSP_DTYPE_Q8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(row);
      for (uint64_t k = 0; k < n_cols / kQBlock; ++k, out += kQBlock) {
        const float d = fp16_to_fp32(b[k].d);
        for (int j = 0; j < kQBlock; ++j) out[j] = d * float(b[k].qs[j]);
      }
      return;
    }
    default:
      return;
  }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, uint64_t n) {
  for (uint64_t k = 0; k < n / kQBlock; ++k, x += kQBlock) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQBlock; ++j) {
      if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
      y[k].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, uint64_t n) {
  for (uint64_t k = 0; k < n / kQBlock; ++k, x += kQBlock) {
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = fp32_to_fp16(d);
    for (int j = 0; j < kQBlock; ++j) y[k].qs[j] = int8_t(std::lround(x[j] * id));
  }
}

}  // namespace qsp
