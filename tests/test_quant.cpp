// Block formats, scalar conversions and the reference quantizers, checked
// against values computed by hand and against independent formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/quant.h"
#include "qsp/qsp.h"

namespace {

using qsp::BlockQ4_0;
using qsp::BlockQ8_0;

uint32_t f2u(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float u2f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// An independent fp16 decoder (double arithmetic, no bit tricks).
double fp16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = std::ldexp(double(m), -24);
  else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}
bool fp16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// Reads a Q4_0 / Q8_0 block from raw little-endian bytes, as a file holds them.
std::vector<float> dequant_bytes(int32_t dtype, const std::vector<uint8_t>& bytes, uint64_t n) {
  std::vector<float> out(n, -12345.0f);
  qsp::dequantize_row(dtype, bytes.data(), out.data(), n);
  return out;
}

}  // namespace

// ---- Block formats against hand-computed vectors ---------------------------

TEST_CASE("Q4_0 block layout: fp16 scale first, low nibbles are elements 0..15", "[quant]") {
  REQUIRE(sizeof(BlockQ4_0) == 18);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_Q4_0, 1, 64) == 36);
  // Block 0: d = 0x3800 = 0.5 (little-endian bytes 00 38).
  // Block 1: d = 0xC000 = -2.0 (bytes 00 C0).
  const std::vector<uint8_t> bytes = {
      0x00, 0x38,                                      // d = 0.5
      0x08, 0x19, 0x2A, 0x3B, 0x4C, 0x5D, 0x6E, 0x7F,  // qs[0..7]
      0x80, 0x91, 0xA2, 0xB3, 0xC4, 0xD5, 0xE6, 0xF7,  // qs[8..15]
      0x00, 0xC0,                                      // d = -2.0
      0x0F, 0xF0, 0x88, 0x12, 0x00, 0xFF, 0x7E, 0x31,
      0x08, 0x80, 0x9C, 0x47, 0xA5, 0x5A, 0x6B, 0xB6,
  };
  REQUIRE(bytes.size() == 36);
  // Hand-computed: element j < 16 = d * ((qs[j] & 15) - 8); element j + 16 = d * ((qs[j] >> 4) - 8).
  const float expected[64] = {
      // block 0, elements 0..15 (low nibbles 8,9,...,15,0,1,...,7)
      0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f, -4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f,
      // block 0, elements 16..31 (high nibbles 0,1,...,7,8,...,15)
      -4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f,
      // block 1 (d = -2), low nibbles F,0,8,2,0,F,E,1, 8,0,C,7,5,A,B,6
      -14.0f, 16.0f, 0.0f, 12.0f, 16.0f, -14.0f, -12.0f, 14.0f, 0.0f, 16.0f, -8.0f, 2.0f, 6.0f, -4.0f, -6.0f, 4.0f,
      // block 1, high nibbles 0,F,8,1,0,F,7,3, 0,8,9,4,A,5,6,B
      16.0f, -14.0f, 0.0f, 14.0f, 16.0f, -14.0f, 2.0f, 10.0f, 16.0f, 0.0f, -2.0f, 8.0f, -4.0f, 6.0f, 4.0f, -6.0f,
  };
  const std::vector<float> got = dequant_bytes(QSP_DTYPE_Q4_0, bytes, 64);
  for (int i = 0; i < 64; ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == expected[i]);
  }
  // A single row of one block decodes the same as the first block above.
  const std::vector<float> one = dequant_bytes(QSP_DTYPE_Q4_0, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 18), 32);
  for (int i = 0; i < 32; ++i) REQUIRE(one[i] == expected[i]);
}

TEST_CASE("Q8_0 block layout: fp16 scale first, then 32 signed bytes", "[quant]") {
  REQUIRE(sizeof(BlockQ8_0) == 34);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_Q8_0, 1, 64) == 68);
  std::vector<uint8_t> bytes = {
      0x00, 0x34,  // d = 0x3400 = 0.25
      0x00, 0x01, 0x7F, 0x80, 0xFF, 0x81, 0x40, 0xC0, 0x02, 0xFE, 0x10, 0xF0, 0x33, 0xCD, 0x64, 0x9C,
      0x05, 0xFB, 0x7E, 0x82, 0x20, 0xE0, 0x03, 0xFD, 0x11, 0xEF, 0x55, 0xAB, 0x08, 0xF8, 0x01, 0xFF,
      0x01, 0x3C,  // d = 0x3C01 = 1 + 2^-10 = 1.0009765625
      0x03, 0xFD, 0x00, 0x7F, 0x80, 0x01, 0xFF, 0x0A, 0xF6, 0x64, 0x9C, 0x02, 0x04, 0x08, 0x10, 0x20,
      0x40, 0xC0, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE, 0x05, 0x06, 0x07, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
  };
  REQUIRE(bytes.size() == 68);
  // Hand-computed: d * int8(byte).
  const float expected[64] = {
      0.0f, 0.25f, 31.75f, -32.0f, -0.25f, -31.75f, 16.0f, -16.0f, 0.5f, -0.5f, 4.0f, -4.0f, 12.75f, -12.75f,
      25.0f, -25.0f, 1.25f, -1.25f, 31.5f, -31.5f, 8.0f, -8.0f, 0.75f, -0.75f, 4.25f, -4.25f, 21.25f, -21.25f,
      2.0f, -2.0f, 0.25f, -0.25f,
      // d = 1.0009765625: q * d is exact in fp32 for these q.
      3.0029296875f, -3.0029296875f, 0.0f, 127.1240234375f, -128.125f, 1.0009765625f, -1.0009765625f,
      10.009765625f, -10.009765625f, 100.09765625f, -100.09765625f, 2.001953125f, 4.00390625f, 8.0078125f,
      16.015625f, 32.03125f, 64.0625f, -64.0625f, -32.03125f, -16.015625f, -8.0078125f, -4.00390625f,
      -2.001953125f, 5.0048828125f, 6.005859375f, 7.0068359375f, 9.0087890625f, 11.0107421875f, 12.01171875f,
      13.0126953125f, 14.013671875f, 15.0146484375f,
  };
  const std::vector<float> got = dequant_bytes(QSP_DTYPE_Q8_0, bytes, 64);
  for (int i = 0; i < 64; ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == expected[i]);
  }
}

TEST_CASE("F32 / F16 / BF16 rows dequantize to the exact values", "[quant]") {
  const float f32[4] = {1.5f, -0.0f, 3.25e-20f, -7.0f};
  float out[4];
  qsp::dequantize_row(QSP_DTYPE_F32, f32, out, 4);
  for (int i = 0; i < 4; ++i) REQUIRE(f2u(out[i]) == f2u(f32[i]));

  const uint16_t f16[6] = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7BFF, 0x8000};
  const float f16_want[6] = {1.0f, -2.0f, 0.333251953125f, 5.9604644775390625e-8f, 65504.0f, -0.0f};
  float o16[6];
  qsp::dequantize_row(QSP_DTYPE_F16, f16, o16, 6);
  for (int i = 0; i < 6; ++i) REQUIRE(f2u(o16[i]) == f2u(f16_want[i]));

  const uint16_t b16[5] = {0x3F80, 0xC049, 0x0001, 0x7F7F, 0x8000};
  float ob[5];
  qsp::dequantize_row(QSP_DTYPE_BF16, b16, ob, 5);
  REQUIRE(ob[0] == 1.0f);
  REQUIRE(ob[1] == -3.140625f);
  REQUIRE(f2u(ob[2]) == 0x00010000u);  // an fp32 subnormal
  REQUIRE(f2u(ob[3]) == 0x7F7F0000u);
  REQUIRE(f2u(ob[4]) == 0x80000000u);
}

// ---- fp16 ---------------------------------------------------------------------

TEST_CASE("fp16 -> fp32: exact values, subnormals, inf, NaN", "[quant][fp16]") {
  REQUIRE(qsp::fp16_to_fp32(0x3C00) == 1.0f);
  REQUIRE(qsp::fp16_to_fp32(0x3800) == 0.5f);
  REQUIRE(qsp::fp16_to_fp32(0xC000) == -2.0f);
  REQUIRE(qsp::fp16_to_fp32(0x3555) == 0.333251953125f);
  REQUIRE(qsp::fp16_to_fp32(0x2E66) == 0.0999755859375f);
  REQUIRE(qsp::fp16_to_fp32(0x7BFF) == 65504.0f);
  REQUIRE(qsp::fp16_to_fp32(0xFBFF) == -65504.0f);
  REQUIRE(qsp::fp16_to_fp32(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  REQUIRE(qsp::fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  REQUIRE(qsp::fp16_to_fp32(0x03FF) == std::ldexp(1023.0f, -24));
  REQUIRE(qsp::fp16_to_fp32(0x8001) == -std::ldexp(1.0f, -24));
  REQUIRE(f2u(qsp::fp16_to_fp32(0x0000)) == 0x00000000u);
  REQUIRE(f2u(qsp::fp16_to_fp32(0x8000)) == 0x80000000u);  // -0 keeps its sign
  REQUIRE(qsp::fp16_to_fp32(0x7C00) == std::numeric_limits<float>::infinity());
  REQUIRE(qsp::fp16_to_fp32(0xFC00) == -std::numeric_limits<float>::infinity());
  REQUIRE(std::isnan(qsp::fp16_to_fp32(0x7E00)));
  REQUIRE(std::isnan(qsp::fp16_to_fp32(0x7C01)));  // signalling-style payload
  REQUIRE(std::isnan(qsp::fp16_to_fp32(0xFFFF)));
}

TEST_CASE("fp16 -> fp32 agrees with an independent decoder on all 65536 patterns", "[quant][fp16]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = qsp::fp16_to_fp32(uint16_t(h));
    const double want = fp16_value(uint16_t(h));
    if (fp16_is_nan(uint16_t(h))) {
      if (!std::isnan(f)) FAIL("0x" << std::hex << h << " should decode to NaN");
      continue;
    }
    if (!(double(f) == want) || std::signbit(f) != bool(h & 0x8000))
      FAIL("0x" << std::hex << h << " decodes to " << f << ", expected " << want);
  }
  SUCCEED();
}

TEST_CASE("fp32 -> fp16: rounding to nearest even, subnormals, overflow, inf, NaN", "[quant][fp16]") {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest fp16 subnormal
  REQUIRE(qsp::fp32_to_fp16(1.0f) == 0x3C00);
  REQUIRE(qsp::fp32_to_fp16(-2.0f) == 0xC000);
  REQUIRE(qsp::fp32_to_fp16(0.5f) == 0x3800);
  REQUIRE(qsp::fp32_to_fp16(0.1f) == 0x2E66);
  REQUIRE(qsp::fp32_to_fp16(1.0f / 3.0f) == 0x3555);
  REQUIRE(qsp::fp32_to_fp16(0.0f) == 0x0000);
  REQUIRE(qsp::fp32_to_fp16(-0.0f) == 0x8000);
  // Ties go to the even mantissa.
  REQUIRE(qsp::fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);         // between 3C00 and 3C01
  REQUIRE(qsp::fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);     // between 3C01 and 3C02
  REQUIRE(qsp::fp32_to_fp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3C01);
  REQUIRE(qsp::fp32_to_fp16(-(1.0f + std::ldexp(1.0f, -11))) == 0xBC00);
  REQUIRE(qsp::fp32_to_fp16(2047.0f * 2.0f + 1.0f) == 0x6C00);                // 4095 -> 4096 (carry into exponent)
  // Subnormals.
  REQUIRE(qsp::fp32_to_fp16(tiny) == 0x0001);
  REQUIRE(qsp::fp32_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);
  REQUIRE(qsp::fp32_to_fp16(std::ldexp(1023.0f, -24)) == 0x03FF);
  REQUIRE(qsp::fp32_to_fp16(tiny * 0.5f) == 0x0000);                          // tie -> 0 (even)
  REQUIRE(qsp::fp32_to_fp16(std::nextafter(tiny * 0.5f, 1.0f)) == 0x0001);
  REQUIRE(qsp::fp32_to_fp16(tiny * 1.5f) == 0x0002);                          // tie between 1 and 2 -> 2
  REQUIRE(qsp::fp32_to_fp16(tiny * 2.5f) == 0x0002);                          // tie between 2 and 3 -> 2
  REQUIRE(qsp::fp32_to_fp16(std::ldexp(1023.5f, -24)) == 0x0400);             // largest subnormal rounds up to normal
  REQUIRE(qsp::fp32_to_fp16(-tiny * 0.25f) == 0x8000);
  REQUIRE(qsp::fp32_to_fp16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  // Overflow: 65520 is the midpoint between 65504 and 65536 (odd mantissa -> rounds up, to inf).
  REQUIRE(qsp::fp32_to_fp16(65504.0f) == 0x7BFF);
  REQUIRE(qsp::fp32_to_fp16(65519.0f) == 0x7BFF);
  REQUIRE(qsp::fp32_to_fp16(std::nextafter(65520.0f, 0.0f)) == 0x7BFF);
  REQUIRE(qsp::fp32_to_fp16(65520.0f) == 0x7C00);
  REQUIRE(qsp::fp32_to_fp16(-65520.0f) == 0xFC00);
  REQUIRE(qsp::fp32_to_fp16(1e6f) == 0x7C00);
  REQUIRE(qsp::fp32_to_fp16(-3.4e38f) == 0xFC00);
  REQUIRE(qsp::fp32_to_fp16(std::numeric_limits<float>::infinity()) == 0x7C00);
  REQUIRE(qsp::fp32_to_fp16(-std::numeric_limits<float>::infinity()) == 0xFC00);
  // NaN stays NaN, whatever its payload (also one that lives in the low bits only).
  REQUIRE(fp16_is_nan(qsp::fp32_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  REQUIRE(fp16_is_nan(qsp::fp32_to_fp16(u2f(0x7F800001u))));
  REQUIRE(fp16_is_nan(qsp::fp32_to_fp16(u2f(0xFF800001u))));
  REQUIRE(fp16_is_nan(qsp::fp32_to_fp16(u2f(0x7FFFFFFFu))));
}

TEST_CASE("fp16 -> fp32 -> fp16 round-trips every non-NaN pattern", "[quant][fp16]") {
  int checked = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (fp16_is_nan(uint16_t(h))) continue;
    const uint16_t back = qsp::fp32_to_fp16(qsp::fp16_to_fp32(uint16_t(h)));
    if (back != h) FAIL("0x" << std::hex << h << " comes back as 0x" << back);
    ++checked;
  }
  REQUIRE(checked == 65536 - 2 * 1023);
}

TEST_CASE("fp32 -> fp16 rounds every midpoint between neighbours to the even one", "[quant][fp16]") {
  // For each pair of adjacent finite fp16 values (a, b = a + 1 ulp) of either sign the
  // midpoint is exact in fp32; it must go to the even pattern, and one fp32 ulp to either
  // side must go to the nearer neighbour.
  for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
    for (uint32_t a = 0; a < 0x7BFF; ++a) {
      const uint16_t ha = uint16_t(sign | a), hb = uint16_t(sign | (a + 1));
      const float fa = qsp::fp16_to_fp32(ha), fb = qsp::fp16_to_fp32(hb);
      const float mid = float((double(fa) + double(fb)) / 2.0);
      if (double(mid) != (double(fa) + double(fb)) / 2.0) FAIL("midpoint not exact");
      const uint16_t even = (a & 1) ? hb : ha;
      if (qsp::fp32_to_fp16(mid) != even) FAIL("midpoint of 0x" << std::hex << ha << "/0x" << hb);
      if (qsp::fp32_to_fp16(std::nextafter(mid, fa)) != ha) FAIL("below midpoint of 0x" << std::hex << ha);
      if (qsp::fp32_to_fp16(std::nextafter(mid, fb)) != hb) FAIL("above midpoint of 0x" << std::hex << ha);
    }
  }
  SUCCEED();
}

// ---- bf16 ---------------------------------------------------------------------

TEST_CASE("bf16 conversions: exact values, ties to even, overflow, inf, NaN", "[quant][bf16]") {
  REQUIRE(qsp::bf16_to_fp32(0x3F80) == 1.0f);
  REQUIRE(qsp::bf16_to_fp32(0xC040) == -3.0f);
  REQUIRE(qsp::bf16_to_fp32(0x7F80) == std::numeric_limits<float>::infinity());
  REQUIRE(qsp::bf16_to_fp32(0xFF80) == -std::numeric_limits<float>::infinity());
  REQUIRE(std::isnan(qsp::bf16_to_fp32(0x7FC0)));
  REQUIRE(std::isnan(qsp::bf16_to_fp32(0x7F81)));
  REQUIRE(f2u(qsp::bf16_to_fp32(0x8000)) == 0x80000000u);

  REQUIRE(qsp::fp32_to_bf16(1.0f) == 0x3F80);
  REQUIRE(qsp::fp32_to_bf16(-3.0f) == 0xC040);
  REQUIRE(qsp::fp32_to_bf16(u2f(0x40490FDBu)) == 0x4049);  // pi: rounds down
  REQUIRE(qsp::fp32_to_bf16(u2f(0x3F808000u)) == 0x3F80);  // tie, even stays
  REQUIRE(qsp::fp32_to_bf16(u2f(0x3F818000u)) == 0x3F82);  // tie, odd rounds up
  REQUIRE(qsp::fp32_to_bf16(u2f(0x3F808001u)) == 0x3F81);  // just above a tie
  REQUIRE(qsp::fp32_to_bf16(u2f(0x3F807FFFu)) == 0x3F80);  // just below a tie
  REQUIRE(qsp::fp32_to_bf16(u2f(0xBF818000u)) == 0xBF82);
  REQUIRE(qsp::fp32_to_bf16(u2f(0x3FFF8000u)) == 0x4000);  // carry into the exponent
  REQUIRE(qsp::fp32_to_bf16(u2f(0x00008000u)) == 0x0000);  // subnormal tie -> even (0)
  REQUIRE(qsp::fp32_to_bf16(u2f(0x00018000u)) == 0x0002);
  REQUIRE(qsp::fp32_to_bf16(-0.0f) == 0x8000);
  REQUIRE(qsp::fp32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // overflows to inf
  REQUIRE(qsp::fp32_to_bf16(u2f(0x7F7F7FFFu)) == 0x7F7F);                   // largest that does not
  REQUIRE(qsp::fp32_to_bf16(-std::numeric_limits<float>::max()) == 0xFF80);
  REQUIRE(qsp::fp32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  REQUIRE(qsp::fp32_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  // NaN stays NaN, also a payload in the bits that truncation would drop.
  REQUIRE(bf16_is_nan(qsp::fp32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  REQUIRE(bf16_is_nan(qsp::fp32_to_bf16(u2f(0x7F800001u))));
  REQUIRE(bf16_is_nan(qsp::fp32_to_bf16(u2f(0xFF80FFFFu))));
  REQUIRE(bf16_is_nan(qsp::fp32_to_bf16(u2f(0x7FFFFFFFu))));
}

TEST_CASE("bf16 round trip and midpoint rounding over all 65536 patterns", "[quant][bf16]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    if (bf16_is_nan(uint16_t(b))) {
      if (!std::isnan(qsp::bf16_to_fp32(uint16_t(b)))) FAIL("0x" << std::hex << b << " should be NaN");
      continue;
    }
    const float f = qsp::bf16_to_fp32(uint16_t(b));
    if (f2u(f) != b << 16) FAIL("bf16 0x" << std::hex << b);
    if (qsp::fp32_to_bf16(f) != b) FAIL("round trip of 0x" << std::hex << b);
    if ((b & 0x7fff) >= 0x7f80) continue;  // inf: no upper neighbour
    // Between b and b+1 (same sign, away from zero): tie, below, above.
    const uint32_t lo = b << 16;
    const uint16_t even = (b & 1) ? uint16_t(b + 1) : uint16_t(b);
    if (qsp::fp32_to_bf16(u2f(lo | 0x8000u)) != even) FAIL("tie above 0x" << std::hex << b);
    if (qsp::fp32_to_bf16(u2f(lo | 0x7FFFu)) != b) FAIL("below tie above 0x" << std::hex << b);
    if (qsp::fp32_to_bf16(u2f(lo | 0x8001u)) != uint16_t(b + 1)) FAIL("above tie above 0x" << std::hex << b);
  }
  SUCCEED();
}

// ---- Reference quantizers ---------------------------------------------------

TEST_CASE("reference quantizers on hand-computed blocks", "[quant]") {
  float x[32] = {0};
  x[0] = 1.0f;
  SECTION("Q4_0 of [1, 0, ..., 0]") {
    // max = 1, d = -1/8, id = -8: q(1) = trunc(-8 + 8.5) = 0, q(0) = trunc(8.5) = 8.
    BlockQ4_0 b;
    qsp::quantize_row_q4_0(x, &b, 32);
    REQUIRE(b.d == 0xB000);  // -0.125
    REQUIRE(b.qs[0] == 0x80);
    for (int j = 1; j < 16; ++j) REQUIRE(b.qs[j] == 0x88);
    float y[32];
    qsp::dequantize_row(QSP_DTYPE_Q4_0, &b, y, 32);
    REQUIRE(y[0] == 1.0f);
    for (int j = 1; j < 32; ++j) REQUIRE(y[j] == 0.0f);
  }
  SECTION("Q8_0 of [1, 0, ..., 0, -0.5 at 17]") {
    x[17] = -0.5f;
    // amax = 1, d = 1/127 -> fp16 0x2008 (= 0.0078277587890625), q = round(x * 127).
    BlockQ8_0 b;
    qsp::quantize_row_q8_0(x, &b, 32);
    REQUIRE(b.d == 0x2008);
    REQUIRE(b.qs[0] == 127);
    REQUIRE(b.qs[17] == -64);  // -63.5 rounds away from zero
    for (int j = 1; j < 32; ++j)
      if (j != 17) REQUIRE(b.qs[j] == 0);
  }
  SECTION("Q4_0 with a negative maximum and a value at -max") {
    // max = -2 (first largest |x|), d = 0.25, id = 4: x = +2 -> trunc(8 + 8.5) = 16 -> clamped to 15.
    x[0] = -2.0f;
    x[5] = 2.0f;
    x[20] = 0.3f;  // 1.2 + 8.5 = 9.7 -> 9
    BlockQ4_0 b;
    qsp::quantize_row_q4_0(x, &b, 32);
    REQUIRE(b.d == 0x3400);  // 0.25
    REQUIRE((b.qs[0] & 15) == 0);
    REQUIRE((b.qs[5] & 15) == 15);
    REQUIRE((b.qs[4] >> 4) == 9);  // element 20 is the high nibble of qs[4]
    float y[32];
    qsp::dequantize_row(QSP_DTYPE_Q4_0, &b, y, 32);
    REQUIRE(y[0] == -2.0f);
    REQUIRE(y[5] == 1.75f);  // the one element that loses a full step
    REQUIRE(y[20] == 0.25f);
  }
}

TEST_CASE("an all-zero block quantizes to d = 0 and dequantizes to zeros", "[quant]") {
  const float zeros[64] = {0};
  BlockQ4_0 b4[2];
  BlockQ8_0 b8[2];
  std::memset(b4, 0xAB, sizeof b4);
  std::memset(b8, 0xAB, sizeof b8);
  qsp::quantize_row_q4_0(zeros, b4, 64);
  qsp::quantize_row_q8_0(zeros, b8, 64);
  float y4[64], y8[64];
  qsp::dequantize_row(QSP_DTYPE_Q4_0, b4, y4, 64);
  qsp::dequantize_row(QSP_DTYPE_Q8_0, b8, y8, 64);
  for (int k = 0; k < 2; ++k) {
    // d = max / -8 = -0.0 for Q4_0, as in GGML's reference (bytes 00 80): either zero is d = 0.
    REQUIRE((b4[k].d == 0x0000 || b4[k].d == 0x8000));
    REQUIRE(qsp::fp16_to_fp32(b4[k].d) == 0.0f);
    REQUIRE(b8[k].d == 0x0000);
    for (int j = 0; j < 16; ++j) REQUIRE(b4[k].qs[j] == 0x88);  // q = 8 means 0
    for (int j = 0; j < 32; ++j) REQUIRE(b8[k].qs[j] == 0);
  }
  for (int i = 0; i < 64; ++i) {
    REQUIRE(y4[i] == 0.0f);
    REQUIRE(y8[i] == 0.0f);
  }
}

namespace {

// Half an fp16 ulp at |d|: the most that rounding the scale to fp16 may change it.
double fp16_half_ulp(double d) { return std::max(std::fabs(d) * std::ldexp(1.0, -11), std::ldexp(1.0, -25)) * 1.0001; }

// Realistic weight-like data: gaussian blocks with per-block scales spanning
// small to large, a few outliers, and the odd block of one sign only.
std::vector<float> realistic_data(uint64_t seed, size_t n_blocks) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale_d(-2.5f, 0.0f);  // stddev 0.003 .. 1
  std::vector<float> x(n_blocks * 32);
  for (size_t b = 0; b < n_blocks; ++b) {
    // Every 64th block is tiny, so that its fp16 scale is subnormal.
    const float s = b % 64 == 17 ? 2e-4f : std::pow(10.0f, scale_d(rng));
    for (int j = 0; j < 32; ++j) x[b * 32 + j] = nd(rng) * s;
    if (b % 7 == 3) x[b * 32 + (b % 32)] *= 6.0f;  // an outlier
    if (b % 11 == 5)
      for (int j = 0; j < 32; ++j) x[b * 32 + j] = std::fabs(x[b * 32 + j]);
  }
  return x;
}

}  // namespace

TEST_CASE("Q8_0 round trip: error per element within half a step", "[quant]") {
  const size_t nb = 4096;
  const std::vector<float> x = realistic_data(101, nb);
  std::vector<BlockQ8_0> q(nb);
  qsp::quantize_row_q8_0(x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  qsp::dequantize_row(QSP_DTYPE_Q8_0, q.data(), y.data(), x.size());
  double worst = 0;
  for (size_t b = 0; b < nb; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const double d = double(amax) / 127.0;               // the exact scale
    const double d16 = qsp::fp16_to_fp32(q[b].d);        // the stored one
    REQUIRE(std::fabs(d16 - d) <= fp16_half_ulp(d));  // fp16 rounding of the scale
    for (int j = 0; j < 32; ++j) {
      const double xi = x[b * 32 + j], yi = y[b * 32 + j];
      const int qi = q[b].qs[j];
      REQUIRE(std::abs(qi) <= 127);
      // |x - q d16| <= |x - q d| + |q| |d - d16| <= d/2 + |q| |d - d16|, plus the fp32 rounding
      // of id = 1/d and of x * id before round() (2 * 2^-24 relative on |x id| <= 127).
      const double bound = d / 2 + std::abs(qi) * std::fabs(d - d16) + 127 * std::ldexp(1.0, -23) * d;
      if (std::fabs(xi - yi) > bound)
        FAIL("block " << b << " element " << j << ": x=" << xi << " y=" << yi << " d=" << d << " d16=" << d16
                      << " q=" << qi << " x/d=" << xi / d << " err=" << std::fabs(xi - yi) << " bound=" << bound);
      if (d16 >= std::ldexp(1.0, -14)) worst = std::max(worst, std::fabs(xi - yi) / d);  // normal scales
      if (std::fabs(xi) == amax) REQUIRE(std::abs(qi) == 127);
    }
  }
  INFO("worst error / d = " << worst << " (blocks with a normal fp16 scale)");
  REQUIRE(worst > 0.3);   // the data really exercises rounding
  REQUIRE(worst < 0.57);  // and stays within half a step (plus fp16 scale rounding, <= 127 * 2^-11)
}

TEST_CASE("Q4_0 round trip: error per element within one step", "[quant]") {
  const size_t nb = 4096;
  const std::vector<float> x = realistic_data(202, nb);
  std::vector<BlockQ4_0> q(nb);
  qsp::quantize_row_q4_0(x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  qsp::dequantize_row(QSP_DTYPE_Q4_0, q.data(), y.data(), x.size());
  int full_steps = 0;
  for (size_t b = 0; b < nb; ++b) {
    float amax = 0, mx = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[b * 32 + j]) > amax) { amax = std::fabs(x[b * 32 + j]); mx = x[b * 32 + j]; }
    const double d = double(mx) / -8.0;
    const double d16 = qsp::fp16_to_fp32(q[b].d);
    REQUIRE(std::fabs(d16 - d) <= fp16_half_ulp(d));
    // fp16 rounding of the scale (times |q - 8| <= 8) and the fp32 rounding of x * id + 8.5 (<= 16.5).
    const double slack = 8 * std::fabs(d - d16) + 16.5 * 3 * std::ldexp(1.0, -24) * std::fabs(d);
    for (int j = 0; j < 32; ++j) {
      const double xi = x[b * 32 + j], yi = y[b * 32 + j];
      const double err = std::fabs(xi - yi);
      if (err > std::fabs(d) + slack)
        FAIL("block " << b << " element " << j << ": x=" << xi << " y=" << yi << " d=" << d);
      if (err > std::fabs(d) / 2 + slack) {
        // Only the clamp at q = 15 loses more than half a step: x on the other side of
        // zero from the maximum, within half a step of -max.
        REQUIRE(xi / d > 7.5 - 1e-4);
        ++full_steps;
      }
    }
    // The maximum itself is represented as -8 d16.
    for (int j = 0; j < 32; ++j)
      if (x[b * 32 + j] == mx) REQUIRE(y[b * 32 + j] == float(-8 * d16));
  }
  INFO("elements beyond half a step: " << full_steps);
  REQUIRE(full_steps < int(nb * 32 / 100));
}

TEST_CASE("quantize(dequantize(quantize(x))) is byte-identical to quantize(x)", "[quant]") {
  const size_t nb = 2048;
  const std::vector<float> x = realistic_data(303, nb);
  std::vector<float> y(x.size());
  SECTION("Q4_0") {
    std::vector<BlockQ4_0> a(nb), b(nb);
    qsp::quantize_row_q4_0(x.data(), a.data(), x.size());
    qsp::dequantize_row(QSP_DTYPE_Q4_0, a.data(), y.data(), x.size());
    qsp::quantize_row_q4_0(y.data(), b.data(), y.size());
    REQUIRE(std::memcmp(a.data(), b.data(), nb * sizeof(BlockQ4_0)) == 0);
  }
  SECTION("Q8_0") {
    std::vector<BlockQ8_0> a(nb), b(nb);
    qsp::quantize_row_q8_0(x.data(), a.data(), x.size());
    qsp::dequantize_row(QSP_DTYPE_Q8_0, a.data(), y.data(), x.size());
    qsp::quantize_row_q8_0(y.data(), b.data(), y.size());
    REQUIRE(std::memcmp(a.data(), b.data(), nb * sizeof(BlockQ8_0)) == 0);
  }
}

// ---- dtype facts --------------------------------------------------------------

TEST_CASE("qsp_dtype_size and qsp_dtype_name for every dtype", "[quant][api]") {
  REQUIRE(qsp_dtype_size(QSP_DTYPE_F32, 3, 5) == 60);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_F32, 1, 33) == 132);  // no blocks for plain types
  REQUIRE(qsp_dtype_size(QSP_DTYPE_F16, 3, 5) == 30);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_BF16, 7, 33) == 462);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_Q4_0, 1, 32) == 18);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_Q4_0, 10, 4096) == 10 * 128 * 18);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_Q8_0, 1, 32) == 34);
  REQUIRE(qsp_dtype_size(QSP_DTYPE_Q8_0, 151936, 1024) == 151936ull * 32 * 34);
  // Columns that are not a multiple of the block of 32.
  for (uint64_t cols : {1ull, 16ull, 31ull, 33ull, 48ull, 1000ull, 4097ull}) {
    INFO("cols " << cols);
    REQUIRE(qsp_dtype_size(QSP_DTYPE_Q4_0, 4, cols) == 0);
    REQUIRE(qsp_dtype_size(QSP_DTYPE_Q8_0, 4, cols) == 0);
    REQUIRE(qsp_dtype_size(QSP_DTYPE_F16, 4, cols) == 8 * cols);
  }
  // Unknown dtypes (incl. GGML types qsp does not know: 4, 5 (retired Q4_2/Q4_3), 9 = Q8_1, 15 = Q8_K, 16 = IQ2_XXS).
  for (int32_t t : {-1, 4, 5, 9, 15, 16, 29, 31, 1000}) {
    INFO("dtype " << t);
    REQUIRE(qsp_dtype_size(t, 4, 64) == 0);
    REQUIRE(std::string(qsp_dtype_name(t)) == "unknown");
  }
  REQUIRE(std::string(qsp_dtype_name(QSP_DTYPE_F32)) == "f32");
  REQUIRE(std::string(qsp_dtype_name(QSP_DTYPE_F16)) == "f16");
  REQUIRE(std::string(qsp_dtype_name(QSP_DTYPE_BF16)) == "bf16");
  REQUIRE(std::string(qsp_dtype_name(QSP_DTYPE_Q4_0)) == "q4_0");
  REQUIRE(std::string(qsp_dtype_name(QSP_DTYPE_Q8_0)) == "q8_0");
  // The GGML type ids, as GGUF stores them.
  REQUIRE(QSP_DTYPE_F32 == 0);
  REQUIRE(QSP_DTYPE_F16 == 1);
  REQUIRE(QSP_DTYPE_Q4_0 == 2);
  REQUIRE(QSP_DTYPE_Q8_0 == 8);
  REQUIRE(QSP_DTYPE_BF16 == 30);
  // Zero-sized tensors take no bytes.
  for (int32_t t : {QSP_DTYPE_F32, QSP_DTYPE_F16, QSP_DTYPE_BF16, QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0}) {
    REQUIRE(qsp_dtype_size(t, 0, 64) == 0);
    REQUIRE(qsp_dtype_size(t, 4, 0) == 0);
  }
}

TEST_CASE("qsp_dtype_size gives 0 when the size does not fit in 64 bits", "[quant][api]") {
  // Too many rows: the library already checks this product.
  CHECK(qsp_dtype_size(QSP_DTYPE_F32, UINT64_MAX / 2, 64) == 0);
  CHECK(qsp_dtype_size(QSP_DTYPE_Q8_0, UINT64_MAX / 16, 64) == 0);
  // Too many columns: the row size itself overflows. Any non-zero answer here
  // is a wrapped-around, wrong size (a caller allocating by it gets a tiny buffer).
  CHECK(qsp_dtype_size(QSP_DTYPE_F32, 1, (1ull << 62) + 1) == 0);
  CHECK(qsp_dtype_size(QSP_DTYPE_F16, 1, (1ull << 63) + 1) == 0);
  CHECK(qsp_dtype_size(QSP_DTYPE_BF16, 1, (1ull << 63) + 3) == 0);
  CHECK(qsp_dtype_size(QSP_DTYPE_Q8_0, 1, UINT64_MAX - 31) == 0);  // (2^59 - 1) blocks * 34 > 2^64
}
