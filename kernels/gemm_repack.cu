// Host side of the weight formats: GGUF bytes -> the kernels' device layout
// (kern::repack_weight) and the facts the backend asks before an upload
// (format_supported, format_for, dweight_bytes). Each format's own code is
// its traits' host part (kernels/formats/<name>.cuh); this file only
// dispatches. A .cu file because those headers also hold the format's device
// decoders.
#include <cstring>

#include "formats/format.h"
#include "kernels/formats/formats.cuh"
#include "kernels/kernels.h"

namespace qsp {
namespace kern {

bool format_supported(int32_t gguf_dtype) {
#define QSP_SERVES_FORMAT(N, n) \
  if (WTraits<WFormat::k##N>::serves(gguf_dtype)) return true;
  QSP_KERNEL_FORMATS(QSP_SERVES_FORMAT)
#undef QSP_SERVES_FORMAT
  return false;
}

WFormat format_for(int32_t gguf_dtype) {
#define QSP_FOR_FORMAT(N, n) \
  if (WTraits<WFormat::k##N>::serves(gguf_dtype)) return WFormat::k##N;
  QSP_KERNEL_FORMATS(QSP_FOR_FORMAT)
#undef QSP_FOR_FORMAT
  return WFormat::kF16;  // unsupported dtypes are rejected before upload
}

size_t dweight_bytes(WFormat fmt, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return dispatch_format(fmt, size_t(0), [&](auto f) { return decltype(f)::T::bytes(rows, cols); });
}

void repack_weight(int32_t gguf_dtype, const void* src, int64_t rows, int64_t cols, void* dst) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  const WFormat f = format_for(gguf_dtype);
  if (rows <= 0 || cols <= 0) return;
  if (!format_supported(gguf_dtype)) {
    std::memset(out, 0, dweight_bytes(f, rows, cols));
    return;
  }
  // Quantized GGUF rows are whole 32-blocks; anything else is not a valid
  // GGUF tensor (gemm_supported says no to it).
  const fmt::Format* host = fmt::find(gguf_dtype);
  if (host && host->quantized() && cols % host->block_elems != 0) {
    std::memset(out, 0, dweight_bytes(f, rows, cols));
    return;
  }
  dispatch_format(f, 0, [&](auto t) {
    decltype(t)::T::repack(gguf_dtype, src, rows, cols, out);
    return 0;
  });
}

}  // namespace kern
}  // namespace qsp
