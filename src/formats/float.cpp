// The plain float formats: F32, F16 and BF16 (one element per "block").
#include <cstring>

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

void f32_dequantize(const void* src, float* dst, uint64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void f32_quantize(const float* src, void* dst, uint64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void f16_dequantize(const void* src, float* dst, uint64_t n) {
  const uint16_t* p = static_cast<const uint16_t*>(src);
  for (uint64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(p[i]);
}
void f16_quantize(const float* src, void* dst, uint64_t n) {
  uint16_t* p = static_cast<uint16_t*>(dst);
  for (uint64_t i = 0; i < n; ++i) p[i] = fp32_to_fp16(src[i]);
}

void bf16_dequantize(const void* src, float* dst, uint64_t n) {
  const uint16_t* p = static_cast<const uint16_t*>(src);
  for (uint64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(p[i]);
}
void bf16_quantize(const float* src, void* dst, uint64_t n) {
  uint16_t* p = static_cast<uint16_t*>(dst);
  for (uint64_t i = 0; i < n; ++i) p[i] = fp32_to_bf16(src[i]);
}

}  // namespace

extern const Format kFormatF32 = {QSP_DTYPE_F32, "f32", 1, 4, f32_dequantize, f32_quantize};
extern const Format kFormatF16 = {QSP_DTYPE_F16, "f16", 1, 2, f16_dequantize, f16_quantize};
extern const Format kFormatBF16 = {QSP_DTYPE_BF16, "bf16", 1, 2, bf16_dequantize, bf16_quantize};

}  // namespace fmt
}  // namespace qsp
