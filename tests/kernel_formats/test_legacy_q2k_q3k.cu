// The kernels' weight decoders, run on the CPU: each tiled format's host
// repack (kern::repack_weight), then the device decode functions themselves
// (QSP_HD: T::raw_at + T::frags for every tile, chunk, lane and k step, which
// the GEMV, the mma.sync and the wgmma GEMMs call on the same words; T::load8
// for every 8 columns), against the CPU reference dequantization
// (src/formats). No GPU needed; built with nvcc because the decoders live in
// .cuh headers.
// Tolerance: fragments are fp16. Formats whose value is one product
// (Q5_0: d * (q - 16)) must equal the reference rounded to fp16 exactly;
// d * q + m (Q4_1, Q5_1) is one rounding of the exact value on the device and
// two (fp32, then fp16) for the reference: within one fp16 ulp. The K-quants
// (Q2_K .. Q6_K) split the sub-block scale (d sc, and dmin m) into two fp16
// before the value's f16x2 arithmetic (qw::affine_frag, qw::scaled_frag):
// within two ulps (two roundings, the first of a value that may sit across
// x's binade boundary) plus 2^-16 of the absolute maximum of the value's
// 32-column group (the low part's own rounding when it is an fp16
// subnormal), and the whole matrix within 1e-3 relative L2. Padding rows and
// columns must decode to 0.
// load8 (the embedding) is fp32 and exact. The K-quants' factored GEMV
// decode (codes * scale + min, fp32) is exact too (check_factored).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/quant.h"
#include "formats/format.h"
#include "kernels/formats/formats.cuh"
#include "raw_of.h"

namespace {

using namespace qsp;
using namespace qsp::kern;

struct Shape {
  int64_t rows, cols;
};

float ulp16(float x) {
  const float a = std::fabs(x);
  if (a < 6.103515625e-05f) return 5.9604644775390625e-08f;  // subnormal step 2^-24
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, e - 11);
}

struct Counts {
  int64_t n = 0, exact = 0, bad = 0, pad_bad = 0;
  double err2 = 0, ref2 = 0;
};


template <class T, class = void>
struct Factored : std::false_type {};
template <class T>
struct Factored<T, std::void_t<decltype(T::kFactored)>> : std::bool_constant<T::kFactored> {};

// The factored GEMV's decode (kernels/gemv.cu: WTraits::codes / scales):
// code * ds + nm, in fp32 as the kernel forms it, equals the reference
// exactly (every product is exact, one rounding, as the reference); the
// codes are exact small integers; every k step of a sub-block (kScaleSteps)
// has the same scales; padding rows give 0.
template <class T>
void check_factored(const std::vector<uint8_t>& dev, size_t soff, int64_t rows, int64_t cols,
                    const std::vector<float>& ref) {
  int64_t n = 0, bad = 0, bad_code = 0, bad_step = 0, pad_bad = 0;
  for (int64_t tile = 0; tile < qw::n_tiles(rows); ++tile)
    for (int64_t c = 0; c < qw::n_chunks(cols); ++c)
      for (int lane = 0; lane < 32; ++lane) {
        typename T::Raw raw;
        raw_of<T>(raw, dev.data(), soff, tile * qw::n_chunks(cols) + c, lane, 0);
        const int g = lane >> 2, t = lane & 3;
        for (int s = 0; s < 4; ++s) {
          uint32_t f[4];
          float ds[2], nm[2], ds0[2], nm0[2];
          T::codes(raw, s, f);
          T::scales(raw, s, ds, nm);
          T::scales(raw, s - s % T::kScaleSteps, ds0, nm0);
          for (int p = 0; p < 2; ++p)
            bad_step += !(ds[p] == ds0[p] && nm[p] == nm0[p]) && !(std::isnan(ds[p]) && std::isnan(ds0[p]));
          for (int j = 0; j < 4; ++j)
            for (int hh = 0; hh < 2; ++hh) {
              const int p = j >> 1, e = 2 * (j & 1) + hh;
              const int64_t row = tile * 16 + 8 * p + g, col = c * 64 + qw::chunk_col(s, t, e);
              const float code = fp16_to_fp32(uint16_t(f[j] >> (16 * hh)));
              bad_code += !(code == std::nearbyint(code) && std::fabs(code) <= 64.0f);
              const float got = std::fma(code, ds[p], nm[p]);
              if (row >= rows) {
                pad_bad += got != 0.0f;
                continue;
              }
              const float want = ref[size_t(row * cols + col)];
              ++n;
              if (!(got == want) && !(std::isnan(got) && std::isnan(want))) {
                if (bad++ == 0) {
                  UNSCOPED_INFO("first bad factored value: row " << row << " col " << col << ": " << code << " * "
                                                                 << ds[p] << " + " << nm[p] << " = " << got
                                                                 << " vs " << want);
                }
              }
            }
        }
      }
  CHECK(n == rows * cols);
  CHECK(bad == 0);
  CHECK(bad_code == 0);
  CHECK(bad_step == 0);
  CHECK(pad_bad == 0);
}

// How close a fragment value must be to the fp32 reference (see the top).
enum class Frag { kExact, kUlp, kFolded };

template <WFormat F>
void check_format(int32_t dtype, Frag mode, const Shape& sh, uint64_t seed) {
  using T = WTraits<F>;
  const int64_t rows = sh.rows, cols = sh.cols;
  INFO(fmt::name(dtype) << " " << rows << "x" << cols);
  const fmt::Format* host = fmt::find(dtype);
  REQUIRE(host != nullptr);
  REQUIRE(T::serves(dtype));
  // Gaussian rows of different scales, every 7th row with one outlier (large
  // scales, small codes elsewhere), a zero row.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> src(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float sigma = r == 3 ? 0.0f : 0.01f * float(1 + r % 5);
    for (int64_t i = 0; i < cols; ++i) src[size_t(r * cols + i)] = sigma * normal(rng);
    if (r % 7 == 1) src[size_t(r * cols + (r * 13) % cols)] = 1.5f;
  }
  const uint64_t rb = host->row_bytes(uint64_t(cols));
  REQUIRE(rb > 0);
  std::vector<uint8_t> gguf(size_t(rb * rows));
  std::vector<float> ref(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    host->quantize(&src[size_t(r * cols)], &gguf[size_t(r * rb)], uint64_t(cols));
    host->dequantize(&gguf[size_t(r * rb)], &ref[size_t(r * cols)], uint64_t(cols));
  }
  std::vector<uint8_t> dev(T::bytes(rows, cols), 0xa5);
  repack_weight(dtype, gguf.data(), rows, cols, dev.data());

  // Fragments, as the GEMV / mma.sync / wgmma kernels decode them.
  const size_t soff = T::scales_offset(rows, cols);
  const int64_t KC = qw::n_chunks(cols);
  std::vector<float> amax32(src.size() / 32);  // |ref| maximum of each 32-column group
  for (size_t i = 0; i < ref.size(); ++i) amax32[i / 32] = std::max(amax32[i / 32], std::fabs(ref[i]));
  Counts k;
  for (int64_t tile = 0; tile < qw::n_tiles(rows); ++tile)
    for (int64_t c = 0; c < KC; ++c)
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t u = tile * KC + c;
        typename T::Raw raw;
        raw_of<T>(raw, dev.data(), soff, u, lane, 0);
        const int g = lane >> 2, t = lane & 3;
        for (int s = 0; s < 4; ++s) {
          uint32_t f[4];
          T::frags(raw, s, f);
          for (int j = 0; j < 4; ++j)
            for (int hh = 0; hh < 2; ++hh) {
              const int p = j >> 1, e = 2 * (j & 1) + hh;
              const int64_t row = tile * 16 + 8 * p + g, col = c * 64 + qw::chunk_col(s, t, e);
              const float got = fp16_to_fp32(uint16_t(f[j] >> (16 * hh)));
              if (row >= rows || col >= cols) {
                k.pad_bad += got != 0.0f;
                continue;
              }
              const float want = ref[size_t(row * cols + col)];
              const float want16 = fp16_to_fp32(fp32_to_fp16(want));
              ++k.n;
              k.err2 += double(got - want) * double(got - want);
              k.ref2 += double(want) * double(want);
              const float tol = mode == Frag::kUlp      ? ulp16(want)
                                : mode == Frag::kFolded ? 2.0f * ulp16(want) + amax32[size_t(row * cols + col) / 32] / 65536.0f
                                                        : 0.0f;
              if (got == want16) {
                ++k.exact;
              } else if (mode == Frag::kExact || !(std::fabs(got - want) <= tol)) {
                if (k.bad++ == 0) {
                  UNSCOPED_INFO("first bad fragment value: row " << row << " col " << col << " lane " << lane
                                                                 << " step " << s << ": " << got << " vs " << want);
                }
              }
            }
        }
      }
  if constexpr (Factored<T>::value) check_factored<T>(dev, soff, rows, cols, ref);
  const double rel_l2 = k.ref2 > 0 ? std::sqrt(k.err2 / k.ref2) : 0.0;
  std::printf("  %-5s %4lldx%-4lld fragments: %lld values, %lld equal to fp16(ref), %lld within tolerance, %lld bad, "
              "%lld bad padding, rel L2 %.2e\n",
              fmt::name(dtype), (long long)rows, (long long)cols, (long long)k.n, (long long)k.exact,
              (long long)(k.n - k.exact - k.bad), (long long)k.bad, (long long)k.pad_bad, rel_l2);
  CHECK(k.bad == 0);
  CHECK(rel_l2 <= 1e-3);
  CHECK(k.pad_bad == 0);
  CHECK(k.n == rows * cols);

  // The embedding's load8: fp32, exactly the reference.
  DWeight w;
  w.data = dev.data();
  w.fmt = F;
  w.rows = int32_t(rows);
  w.cols = int32_t(cols);
  int64_t l8_bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c8 = 0; c8 < cols; c8 += 8) {
      float o[8];
      T::load8(w, r, c8, o);
      for (int i = 0; i < 8; ++i) l8_bad += !(o[i] == ref[size_t(r * cols + c8 + i)]);
    }
  CHECK(l8_bad == 0);
}

// Device bytes of one 16 x 64 unit (quants + side data) -> bits per weight.
template <WFormat F>
double bits_per_weight() {
  return double(WTraits<F>::bytes(16, 64)) * 8.0 / 1024.0;
}

const Shape kLegacyShapes[] = {{37, 96}, {16, 256}, {5, 32}, {40, 320}, {1, 4096}};

}  // namespace

TEST_CASE("kernel formats: Q5_0 repack + device decode on the CPU", "[kernel_formats]") {
  CHECK(bits_per_weight<WFormat::kQ5_0>() == 5.5);
  uint64_t seed = 50;
  for (const Shape& s : kLegacyShapes) check_format<WFormat::kQ5_0>(QSP_DTYPE_Q5_0, Frag::kExact, s, seed++);
}

TEST_CASE("kernel formats: Q4_1 repack + device decode on the CPU", "[kernel_formats]") {
  CHECK(bits_per_weight<WFormat::kQ4_1>() == 5.0);
  uint64_t seed = 41;
  for (const Shape& s : kLegacyShapes) check_format<WFormat::kQ4_1>(QSP_DTYPE_Q4_1, Frag::kUlp, s, seed++);
}

TEST_CASE("kernel formats: Q5_1 repack + device decode on the CPU", "[kernel_formats]") {
  CHECK(bits_per_weight<WFormat::kQ5_1>() == 6.0);
  uint64_t seed = 51;
  for (const Shape& s : kLegacyShapes) check_format<WFormat::kQ5_1>(QSP_DTYPE_Q5_1, Frag::kUlp, s, seed++);
}

namespace {
const Shape kKShapes[] = {{37, 256}, {16, 512}, {5, 1024}, {40, 768}, {1, 4096}};
}  // namespace

TEST_CASE("kernel formats: Q2_K repack + device decode on the CPU", "[kernel_formats]") {
  CHECK(bits_per_weight<WFormat::kQ2_K>() == 3.0);
  uint64_t seed = 20;
  for (const Shape& s : kKShapes) check_format<WFormat::kQ2_K>(QSP_DTYPE_Q2_K, Frag::kFolded, s, seed++);
}

TEST_CASE("kernel formats: Q3_K repack + device decode on the CPU", "[kernel_formats]") {
  CHECK(bits_per_weight<WFormat::kQ3_K>() == 3.75);
  uint64_t seed = 30;
  for (const Shape& s : kKShapes) check_format<WFormat::kQ3_K>(QSP_DTYPE_Q3_K, Frag::kFolded, s, seed++);
}

TEST_CASE("kernel formats: Q4_K / Q5_K / Q6_K fragments in f16x2 arithmetic on the CPU", "[kernel_formats]") {
  uint64_t seed = 40;
  for (const Shape& s : kKShapes) {
    check_format<WFormat::kQ4_K>(QSP_DTYPE_Q4_K, Frag::kFolded, s, seed++);
    check_format<WFormat::kQ5_K>(QSP_DTYPE_Q5_K, Frag::kFolded, s, seed++);
    check_format<WFormat::kQ6_K>(QSP_DTYPE_Q6_K, Frag::kFolded, s, seed++);
  }
}

TEST_CASE("kernel formats: K multiples gemm_supported asks for", "[kernel_formats]") {
  CHECK(qw::ColsMultiple<WTraits<WFormat::kQ4_0>>::value == 32);
  CHECK(qw::ColsMultiple<WTraits<WFormat::kQ5_0>>::value == 32);
  CHECK(qw::ColsMultiple<WTraits<WFormat::kQ2_K>>::value == 256);
  CHECK(qw::ColsMultiple<WTraits<WFormat::kQ3_K>>::value == 256);
  const char* why = nullptr;
  CHECK(!gemm_supported(WFormat::kQ2_K, 16, 96, &why));
  REQUIRE(why != nullptr);
  CHECK(std::string(why).find("256") != std::string::npos);
  CHECK(!gemm_supported(WFormat::kQ3_K, 16, 512 + 64, &why));
  CHECK(gemm_supported(WFormat::kQ3_K, 16, 512, &why));
  CHECK(gemm_supported(WFormat::kQ5_1, 16, 96, &why));
}
