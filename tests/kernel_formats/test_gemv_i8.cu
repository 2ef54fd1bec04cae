// The integer GEMV of one token (kernels/gemv_i8.cuh), run on the CPU: the
// staging of each 256-column group, every lane's fragments (I8<F>::prep),
// the mma.m16n8k32 (u8 x s8 -> s32) emulated from its PTX fragment layout
// across the warp's 32 lanes, the lanes' combine / flush and the quad sum,
// for every tile and group of a repacked matrix. The result must equal the
// dot product of the CPU reference's dequantized rows with the quantized
// activations (x_int * sx) to float rounding, and the fp16 activations
// within the 16-bit quantization. The device runs these very functions
// (kernels/gemv.cu: gemv_i8_kernel); only the mma and the warp shuffles are
// the hardware's there.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "common/quant.h"
#include "formats/format.h"
#include "kernels/gemv_i8.cuh"
#include "raw_of.h"

namespace {

using namespace qsp;
using namespace qsp::kern;


// mma.sync.m16n8k32.row.col.s32.u8.s8.s32 (kSigned: .s8.s8) over a warp's
// registers, from the PTX ISA's fragment layout: lane (g, t) holds A rows g (a0, a2) and g + 8
// (a1, a3), k = 4t + byte (a0, a1) and 16 + 4t + byte (a2, a3); B column g,
// k = 4t + byte (b0) and 16 + 4t + byte (b1); C / D rows g (c0, c1) and g + 8
// (c2, c3), columns 2t, 2t + 1.
void mma_emulated(bool kSigned, const uint32_t (&A)[32][4], const uint32_t (&B)[32][2], int32_t (&D)[32][4]) {
  int32_t a[16][32];
  int8_t b[32][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 4; ++j) {
        const uint8_t byte = uint8_t(A[l][r] >> (8 * j));
        a[g + 8 * (r & 1)][4 * t + j + 16 * (r >> 1)] = kSigned ? int32_t(int8_t(byte)) : int32_t(byte);
      }
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < 4; ++j) b[4 * t + j + 16 * r][g] = int8_t(uint8_t(B[l][r] >> (8 * j)));
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i >> 1), n = 2 * t + (i & 1);
      int32_t s = D[l][i];
      for (int k = 0; k < 32; ++k) s += a[row][k] * int32_t(b[k][n]);
      D[l][i] = s;
    }
  }
}

struct Result {
  std::vector<float> y;    // the emulated kernel
  std::vector<double> xq;  // the activations it multiplied: x_int * sx
};

// The kernel's arithmetic for every tile of a rows x cols matrix and one
// token x (K = cols).
template <WFormat F>
Result run_emulated(const std::vector<uint8_t>& dev, int64_t rows, int64_t cols, const std::vector<float>& x) {
  using T = WTraits<F>;
  using I = i8::I8<F>;
  const size_t soff = T::scales_offset(rows, cols);
  const int64_t KC = qw::n_chunks(cols), groups = (KC + 3) / 4;
  Result res;
  res.y.assign(size_t(rows), 0.0f);
  res.xq.assign(size_t(cols), 0.0);
  for (int64_t tile = 0; tile < qw::n_tiles(rows); ++tile) {
    float out[32][2] = {};
    for (int64_t j = 0; j < groups; ++j) {
      // Staging (gemv::stage_i8): the group's amax, each lane's words, S.
      uint32_t st[i8::kGroupWords] = {};
      float v[32][8];
      float amax = 0.0f;
      for (int l = 0; l < 32; ++l) {
        const i8::StageLane sl = i8::stage_lane(l);
        for (int i = 0; i < 8; ++i) {
          const int64_t col = j * i8::kGroupCols + i8::stage_col(sl, i);
          v[l][i] = col < cols ? x[size_t(col)] : 0.0f;
          amax = std::max(amax, std::fabs(v[l][i]));
        }
      }
      const float inv = amax > 0.0f ? i8::kXMax / amax : 0.0f, sx = amax / i8::kXMax;
      int32_t S[4][4] = {};
      for (int l = 0; l < 32; ++l) {
        const i8::StageLane sl = i8::stage_lane(l);
        for (int k = 0; k < 2; ++k) {
          const uint32_t b[4] = {i8::qbits(v[l][4 * k], inv), i8::qbits(v[l][4 * k + 1], inv),
                                 i8::qbits(v[l][4 * k + 2], inv), i8::qbits(v[l][4 * k + 3], inv)};
          uint32_t hi, lo;
          int32_t sum;
          i8::words(b, hi, lo, sum);
          const int s = sl.s0 + 2 * k;
          st[sl.q * i8::kChunkWords + i8::word_of(sl.t, 0, s)] = hi;
          st[sl.q * i8::kChunkWords + i8::word_of(sl.t, 1, s)] = lo;
          S[sl.q][I::sum_pos(s)] += sum;
          for (int e = 0; e < 4; ++e) {
            const int64_t col = j * i8::kGroupCols + i8::stage_col(sl, 4 * k + e);
            const int32_t xi = i8::x_int(b[e]);
            // hi / lo of the words give x_int back
            const int32_t h = int8_t(uint8_t(hi >> (8 * e))), lw = int8_t(uint8_t(lo >> (8 * e)));
            REQUIRE(256 * h + lw == xi);
            REQUIRE(std::abs(xi) <= int32_t(i8::kXMax));
            if (col < cols) res.xq[size_t(col)] = double(xi) * double(sx);
          }
        }
      }
      for (int q = 0; q < 4; ++q)
        for (int s = 0; s < 4; ++s) st[i8::kSumWord + 4 * q + s] = uint32_t(S[q][s]);
      // The chunks of the group through the lanes and the emulated mmas.
      typename I::Acc acc[32] = {};
      typename T::Raw raw0[32];
      for (int q = 0; q < 4 && 4 * j + q < KC; ++q) {
        const int64_t u = tile * KC + 4 * j + q;
        typename T::Raw raw[32];
        uint32_t A[I::kMmas][32][4], B[I::kMmas][32][2];
        int32_t D[I::kChains][32][4];
        int32_t Sls[32][2];
        for (int l = 0; l < 32; ++l) {
          const int g = l >> 2, t = l & 3;
          int32_t(&Sl)[2] = Sls[l];
          const uint32_t* sp = &st[i8::kSumWord + 4 * q + 2 * (t >> 1)];
          I::lane_sums(sp[0], sp[1], t, Sl);
          raw_of<T>(raw[l], dev.data(), soff, u, l, 0);
          if (q == 0) raw0[l] = raw[l];
          uint32_t xw[I::kWords];
          for (int i = 0; i < I::kWords; ++i) xw[i] = st[q * i8::kChunkWords + I::word_base(g, t) + i];
          uint32_t a[I::kMmas][4], b[I::kMmas][2];
          int32_t c[I::kChains][4];
          I::prep(raw[l], xw, Sl, I::lane(g, t), a, b, c);
          for (int m = 0; m < I::kMmas; ++m) {
            for (int r = 0; r < 4; ++r) A[m][l][r] = a[m][r];
            for (int r = 0; r < 2; ++r) B[m][l][r] = b[m][r];
          }
          for (int ch = 0; ch < I::kChains; ++ch)
            for (int r = 0; r < 4; ++r) D[ch][l][r] = c[ch][r];
        }
        for (int m = 0; m < I::kMmas; ++m) mma_emulated(I::kSignedA, A[m], B[m], D[I::chain_of(m)]);
        for (int l = 0; l < 32; ++l) {
          int32_t d[I::kChains][4];
          for (int ch = 0; ch < I::kChains; ++ch)
            for (int r = 0; r < 4; ++r) d[ch][r] = D[ch][l][r];
          I::combine(raw[l], d, Sls[l], I::lane(l >> 2, l & 3), acc[l]);
        }
      }
      for (int l = 0; l < 32; ++l) I::flush(raw0[l], I::lane(l >> 2, l & 3), sx, acc[l], out[l]);
    }
    for (int g = 0; g < 8; ++g)
      for (int p = 0; p < 2; ++p) {
        const int64_t row = tile * 16 + 8 * p + g;
        const float y = out[4 * g][p] + out[4 * g + 1][p] + out[4 * g + 2][p] + out[4 * g + 3][p];
        if (row < rows) {
          res.y[size_t(row)] = y;
        } else {
          REQUIRE(y == 0.0f);  // padding rows
        }
      }
  }
  return res;
}

// The token: fp16 values, one activation 40x the others (an outlier
// channel), a group of zeros.
std::vector<float> make_token(int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed * 7 + 1);
  std::normal_distribution<float> normal;
  std::vector<float> tok(size_t(cols), 0.0f);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = fp16_to_fp32(fp32_to_fp16(normal(rng)));
  tok[size_t(cols / 3)] = 40.0f;
  if (cols >= 768) std::fill(tok.begin() + 256, tok.begin() + 512, 0.0f);
  return tok;
}

template <WFormat F>
void check_i8(int32_t dtype, int64_t rows, int64_t cols, uint64_t seed) {
  INFO(fmt::name(dtype) << " " << rows << "x" << cols);
  const fmt::Format* host = fmt::find(dtype);
  REQUIRE(host != nullptr);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  // Weights: Gaussian rows of different scales, some with an outlier.
  std::vector<float> src(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float sigma = 0.01f * float(1 + r % 5);
    for (int64_t i = 0; i < cols; ++i) src[size_t(r * cols + i)] = sigma * normal(rng);
    if (r % 7 == 1) src[size_t(r * cols + (r * 13) % cols)] = 0.5f;
  }
  const uint64_t rb = host->row_bytes(uint64_t(cols));
  std::vector<uint8_t> gguf(size_t(rb * rows));
  std::vector<float> ref(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    host->quantize(&src[size_t(r * cols)], &gguf[size_t(r * rb)], uint64_t(cols));
    host->dequantize(&gguf[size_t(r * rb)], &ref[size_t(r * cols)], uint64_t(cols));
  }
  std::vector<uint8_t> dev(WTraits<F>::bytes(rows, cols), 0xa5);
  repack_weight(dtype, gguf.data(), rows, cols, dev.data());
  const std::vector<float> tok = make_token(cols, seed);
  const Result got = run_emulated<F>(dev, rows, cols, tok);
  double e2 = 0, r2 = 0, eq2 = 0;
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double yq = 0, yx = 0, mag = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const double w = ref[size_t(r * cols + i)];
      yq += w * got.xq[size_t(i)];
      yx += w * double(tok[size_t(i)]);
      mag += std::fabs(w * got.xq[size_t(i)]);
    }
    const double y = got.y[size_t(r)];
    // Against the quantized activations: the integer sums are exact, the
    // scales fp32 (a few roundings of terms up to the row's magnitude).
    if (!(std::fabs(y - yq) <= 1e-5 * mag + 1e-30)) {
      if (bad++ == 0) UNSCOPED_INFO("row " << r << ": " << y << " vs " << yq << " (magnitude " << mag << ")");
    }
    e2 += (y - yx) * (y - yx);
    eq2 += (y - yq) * (y - yq);
    r2 += yx * yx;
  }
  const double rel = std::sqrt(e2 / r2), relq = std::sqrt(eq2 / r2);
  std::printf("  %-5s %4lldx%-5lld integer GEMV: rel L2 %.2e against the fp16 token, %.2e against its quantized form\n",
              fmt::name(dtype), (long long)rows, (long long)cols, rel, relq);
  CHECK(bad == 0);
  // Against the fp16 token: the 16-bit quantization, amax / 2^16 per value,
  // here of a group with the 40x outlier (1.2e-4 relative L2 at K = 2304).
  CHECK(rel <= 3e-4);
}

}  // namespace

TEST_CASE("gemv i8: the integer GEMV's lanes and mmas on the CPU equal the dot product", "[kernel_formats][gemv_i8]") {
  // Shapes: padding rows (37), one group, several, a partial last group
  // (Q4_0: K = 96 and 4160, K % 256 != 0).
  const int64_t shapes[3][2] = {{37, 256}, {16, 1024}, {33, 2304}};
  for (const auto& sh : shapes) {
    check_i8<WFormat::kQ4_0>(QSP_DTYPE_Q4_0, sh[0], sh[1], 71);
    check_i8<WFormat::kQ4_K>(QSP_DTYPE_Q4_K, sh[0], sh[1], 72);
    check_i8<WFormat::kQ2_K>(QSP_DTYPE_Q2_K, sh[0], sh[1], 73);
    check_i8<WFormat::kQ3_K>(QSP_DTYPE_Q3_K, sh[0], sh[1], 74);
    check_i8<WFormat::kQ5_K>(QSP_DTYPE_Q5_K, sh[0], sh[1], 77);
    check_i8<WFormat::kQ6_K>(QSP_DTYPE_Q6_K, sh[0], sh[1], 78);
    check_i8<WFormat::kQ8_0>(QSP_DTYPE_Q8_0, sh[0], sh[1], 79);
    check_i8<WFormat::kQ5_0>(QSP_DTYPE_Q5_0, sh[0], sh[1], 82);
    check_i8<WFormat::kQ4_1>(QSP_DTYPE_Q4_1, sh[0], sh[1], 83);
    check_i8<WFormat::kQ5_1>(QSP_DTYPE_Q5_1, sh[0], sh[1], 84);
  }
  check_i8<WFormat::kQ5_1>(QSP_DTYPE_Q5_1, 20, 96, 85);
  check_i8<WFormat::kQ4_1>(QSP_DTYPE_Q4_1, 17, 4160, 86);
  check_i8<WFormat::kQ8_0>(QSP_DTYPE_Q8_0, 20, 96, 80);
  check_i8<WFormat::kQ8_0>(QSP_DTYPE_Q8_0, 17, 4160, 81);
  check_i8<WFormat::kQ4_0>(QSP_DTYPE_Q4_0, 20, 96, 75);
  check_i8<WFormat::kQ4_0>(QSP_DTYPE_Q4_0, 17, 4160, 76);
}

TEST_CASE("gemv i8: the activations' 16-bit words round trip", "[kernel_formats][gemv_i8]") {
  // Every x_int the quantizer can give: 256 hi + lo, the step sums exact.
  for (int32_t xi = -int32_t(i8::kXMax); xi <= int32_t(i8::kXMax); ++xi) {
    const uint32_t b = i8::qbits(float(xi), 1.0f);
    REQUIRE(i8::x_int(b) == xi);
    const uint32_t bs[4] = {b, b, b, b};
    uint32_t hi, lo;
    int32_t sum;
    i8::words(bs, hi, lo, sum);
    REQUIRE(256 * int32_t(int8_t(uint8_t(hi))) + int32_t(int8_t(uint8_t(lo))) == xi);
    REQUIRE(sum == 4 * xi);
  }
}
