// Host side of the weight formats: GGUF bytes -> the kernels' device layout
// (kern::repack_weight, whole or by 16-row tiles: repack_weight_tiles and
// dweight_tiles) and the facts the backend asks before an upload
// (format_supported, format_for, dweight_bytes). Each format's own code is
// its traits' host part (kernels/formats/<name>.cuh); this file only
// dispatches. A .cu file because those headers also hold the format's device
// decoders.
#include <algorithm>
#include <cstring>

#include "common/parallel.h"
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

int64_t dweight_tile_count(int64_t rows) { return rows <= 0 ? 0 : qw::n_tiles(rows); }

TileSpan dweight_tiles(WFormat fmt, int64_t rows, int64_t cols, int64_t t0, int64_t t1) {
  TileSpan sp;
  const int64_t nt = dweight_tile_count(rows);
  t0 = std::max<int64_t>(0, std::min(t0, nt));
  t1 = std::max(t0, std::min(t1, nt));
  if (cols <= 0 || t1 == t0) return sp;
  return dispatch_format(fmt, sp, [&](auto f) {
    using T = typename decltype(f)::T;
    TileSpan r;
    if constexpr (T::kRowMajor) {
      const size_t row_bytes = T::bytes(1, cols);
      const int64_t r0 = std::min(rows, qw::kTileRows * t0), r1 = std::min(rows, qw::kTileRows * t1);
      r.units_off = size_t(r0) * row_bytes;
      r.units_bytes = size_t(r1 - r0) * row_bytes;
    } else {
      const size_t per_tile = size_t(qw::n_chunks(cols));
      r.units_off = size_t(t0) * per_tile * T::kUnit;
      r.units_bytes = size_t(t1 - t0) * per_tile * T::kUnit;
      r.side_off = T::scales_offset(rows, cols) + size_t(t0) * per_tile * T::kScaleUnit;
      r.side_bytes = size_t(t1 - t0) * per_tile * T::kScaleUnit;
    }
    return r;
  });
}

void repack_weight_tiles(int32_t gguf_dtype, const void* src, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                         void* units, void* side) {
  const WFormat f = format_for(gguf_dtype);
  const TileSpan sp = dweight_tiles(f, rows, cols, t0, t1);
  if (sp.units_bytes == 0 && sp.side_bytes == 0) return;
  uint8_t* u = static_cast<uint8_t*>(units);
  uint8_t* s = static_cast<uint8_t*>(side);
  // Unsupported dtypes, and quantized rows that are not whole 32-blocks (not
  // a valid GGUF tensor; gemm_supported says no to it): zeros.
  const fmt::Format* host = fmt::find(gguf_dtype);
  if (!format_supported(gguf_dtype) || (host && host->quantized() && cols % host->block_elems != 0)) {
    std::memset(u, 0, sp.units_bytes);
    if (sp.side_bytes) std::memset(s, 0, sp.side_bytes);
    return;
  }
  t0 = std::max<int64_t>(0, t0);
  t1 = std::min(t1, dweight_tile_count(rows));
  dispatch_format(f, 0, [&](auto t) {
    decltype(t)::T::repack_tiles(gguf_dtype, src, rows, cols, t0, t1, u, s);
    return 0;
  });
}

void repack_weight(int32_t gguf_dtype, const void* src, int64_t rows, int64_t cols, void* dst) {
  if (rows <= 0 || cols <= 0) return;
  const WFormat f = format_for(gguf_dtype);
  uint8_t* out = static_cast<uint8_t*>(dst);
  parallel_for(dweight_tile_count(rows), rows * cols, [=](int64_t t0, int64_t t1) {
    const TileSpan sp = dweight_tiles(f, rows, cols, t0, t1);
    repack_weight_tiles(gguf_dtype, src, rows, cols, t0, t1, out + sp.units_off, out + sp.side_off);
  });
}

}  // namespace kern
}  // namespace qsp
