// The K-quant device formats (kernels/formats/q4_k.cuh, q5_k.cuh, q6_k.cuh)
// checked on the CPU, no GPU needed: GGUF blocks of random bytes (every
// scale / min bit pattern, random fp16 d / dmin of both signs, subnormal,
// zero and large) go through the upload repacking (kern::repack_weight),
// then the repacked bytes are decoded by the formats' own __host__
// __device__ decode (WTraits::raw_at = the words lds_raw / ldg_raw load,
// WTraits::values = what frags / wg_decode / load8 turn into fp16) for every
// unit, lane and k step, and compared bit for bit in fp32 with the CPU
// reference's dequantization (fmt::Format::dequantize). The fragment is the
// fp16 rounding of that fp32 value, so equal fp32 means equal fragments.
// Built with nvcc (it includes the .cuh headers); runs in the cpu label.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/quant.h"
#include "formats/format.h"
#include "kernels/formats/formats.cuh"
#include "kernels/kernels.h"
#include "qsp/qsp.h"

namespace {

using qsp::kern::WFormat;
using qsp::kern::WTraits;
namespace qw = qsp::kern::qw;

// A random finite fp16 for d / dmin: mostly normal values around 2^-10..2^4,
// some subnormal, zero, negative and near the top of the range.
uint16_t random_scale(std::mt19937_64& rng) {
  const uint32_t r = uint32_t(rng());
  const uint16_t sign = (r & 1u) ? 0x8000u : 0u;
  switch ((r >> 1) % 16) {
    case 0: return uint16_t(sign | ((r >> 8) & 0x3ffu));         // subnormal
    case 1: return sign;                                         // +-0
    case 2: return uint16_t(sign | 0x7800u | ((r >> 8) & 0x3ffu));  // large (2^15..)
    default: return uint16_t(sign | (uint16_t(((r >> 8) % 15) + 5) << 10) | ((r >> 16) & 0x3ffu));
  }
}

// GGUF bytes of a rows x cols matrix of random blocks with sane scales.
std::vector<uint8_t> random_blocks(int32_t dtype, int64_t rows, int64_t cols, uint64_t seed) {
  const qsp::fmt::Format* f = qsp::fmt::find(dtype);
  REQUIRE(f != nullptr);
  const int64_t nb = rows * cols / int64_t(f->block_elems);
  std::vector<uint8_t> b(size_t(nb) * f->block_bytes);
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = uint8_t(rng());
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* blk = b.data() + size_t(i) * f->block_bytes;
    const int n_scales = dtype == QSP_DTYPE_Q6_K ? 1 : 2;
    const size_t at = dtype == QSP_DTYPE_Q6_K ? 208 : 0;  // d (and dmin) offset
    for (int k = 0; k < n_scales; ++k) {
      const uint16_t h = random_scale(rng);
      std::memcpy(blk + at + 2 * k, &h, 2);
    }
  }
  return b;
}

struct DecodeResult {
  int64_t checked = 0, mismatches = 0;
  int64_t bad_row = -1, bad_col = -1;
  float got = 0.f, want = 0.f;
};

// Repack, then decode every element the way the kernels do.
template <WFormat F>
DecodeResult decode_all(int32_t dtype, int64_t rows, int64_t cols, uint64_t seed) {
  using T = WTraits<F>;
  const std::vector<uint8_t> gguf = random_blocks(dtype, rows, cols, seed);
  const qsp::fmt::Format* f = qsp::fmt::find(dtype);
  std::vector<float> ref(size_t(rows * cols));
  const size_t row_bytes = size_t(f->row_bytes(uint64_t(cols)));
  for (int64_t r = 0; r < rows; ++r) f->dequantize(gguf.data() + size_t(r) * row_bytes, ref.data() + r * cols, uint64_t(cols));

  REQUIRE(qsp::kern::format_for(dtype) == F);
  REQUIRE(qsp::kern::format_supported(dtype));
  const size_t n = qsp::kern::dweight_bytes(F, rows, cols);
  REQUIRE(n == T::bytes(rows, cols));
  std::vector<uint8_t> dev(n, 0xA5);  // repacking must write every byte it owns
  qsp::kern::repack_weight(dtype, gguf.data(), rows, cols, dev.data());

  DecodeResult res;
  const size_t soff = T::scales_offset(rows, cols);
  const int64_t KC = qw::n_chunks(cols);
  for (int64_t tile = 0; tile < qw::n_tiles(rows); ++tile)
    for (int64_t c = 0; c < KC; ++c)
      for (int lane = 0; lane < 32; ++lane) {
        typename T::Raw raw;
        T::raw_at(raw, dev.data(), soff, size_t(tile * KC + c), lane);
        const int g = lane >> 2, t = lane & 3;
        for (int s = 0; s < 4; ++s) {
          float v[8];
          T::values(raw, s, v);
          for (int p = 0; p < 2; ++p)
            for (int e = 0; e < 4; ++e) {
              const int64_t row = tile * 16 + 8 * p + g, col = 64 * c + qw::chunk_col(s, t, e);
              const float want = row < rows ? ref[size_t(row * cols + col)] : 0.0f;
              const float got = v[4 * p + e];
              ++res.checked;
              // Bitwise, but +0 == -0 (padding rows: 0 * sc * (0 - 32) = -0).
              if (!(got == want) || (std::isnan(got) != std::isnan(want))) {
                if (res.mismatches++ == 0) res.bad_row = row, res.bad_col = col, res.got = got, res.want = want;
              }
            }
        }
      }
  return res;
}

template <WFormat F>
void check(int32_t dtype, int64_t rows, int64_t cols, uint64_t seed) {
  INFO("dtype " << dtype << " " << rows << " x " << cols);
  const DecodeResult r = decode_all<F>(dtype, rows, cols, seed);
  INFO("first mismatch at (" << r.bad_row << ", " << r.bad_col << "): got " << r.got << " want " << r.want);
  CHECK(r.checked == qw::n_tiles(rows) * 16 * cols);
  CHECK(r.mismatches == 0);
}

}  // namespace

TEST_CASE("kernel formats: Q4_K repacked and decoded as the kernels do equals the CPU reference", "[kernel_formats]") {
  check<WFormat::kQ4_K>(QSP_DTYPE_Q4_K, 16, 256, 1);
  check<WFormat::kQ4_K>(QSP_DTYPE_Q4_K, 37, 512, 2);   // padding rows
  check<WFormat::kQ4_K>(QSP_DTYPE_Q4_K, 128, 1024, 3);
}

TEST_CASE("kernel formats: Q5_K repacked and decoded as the kernels do equals the CPU reference", "[kernel_formats]") {
  check<WFormat::kQ5_K>(QSP_DTYPE_Q5_K, 16, 256, 4);
  check<WFormat::kQ5_K>(QSP_DTYPE_Q5_K, 37, 512, 5);
  check<WFormat::kQ5_K>(QSP_DTYPE_Q5_K, 128, 1024, 6);
}

TEST_CASE("kernel formats: Q6_K repacked and decoded as the kernels do equals the CPU reference", "[kernel_formats]") {
  check<WFormat::kQ6_K>(QSP_DTYPE_Q6_K, 16, 256, 7);
  check<WFormat::kQ6_K>(QSP_DTYPE_Q6_K, 37, 512, 8);
  check<WFormat::kQ6_K>(QSP_DTYPE_Q6_K, 128, 1024, 9);
}

TEST_CASE("kernel formats: K-quant device sizes and shape limits", "[kernel_formats]") {
  using qsp::kern::dweight_bytes;
  // Bytes per 16 x 64 unit (1024 weights): 640 = 5.0, 768 = 6.0, 864 = 6.75 bits per weight.
  CHECK(dweight_bytes(WFormat::kQ4_K, 16, 256) == 4 * 640);
  CHECK(dweight_bytes(WFormat::kQ5_K, 16, 256) == 4 * 768);
  CHECK(dweight_bytes(WFormat::kQ6_K, 16, 256) == 4 * 864);
  for (WFormat f : {WFormat::kQ4_K, WFormat::kQ5_K, WFormat::kQ6_K}) {
    const char* why = nullptr;
    CHECK(qsp::kern::cols_multiple(f) == 256);
    CHECK(qsp::kern::gemm_supported(f, 64, 512, &why));
    CHECK_FALSE(qsp::kern::gemm_supported(f, 64, 160, &why));
    REQUIRE(why != nullptr);
    CHECK(std::string(why).find("multiple of 256") != std::string::npos);
  }
  CHECK(qsp::kern::cols_multiple(WFormat::kQ4_0) == 32);
  CHECK(qsp::kern::cols_multiple(WFormat::kQ8_0) == 32);
  CHECK(qsp::kern::cols_multiple(WFormat::kF16) == 32);
  for (int32_t dt : {QSP_DTYPE_Q4_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K}) CHECK(qsp::kern::format_supported(dt));
}
