// libFuzzer target for the weight-format block decoders and quantizers
// (src/formats/, issue 22). Input: byte 0 picks a format (and a mode), the
// rest are blocks.
//   mode 0: the bytes are blocks; the library's dequantize must match the
//           re-derivation below (written from GGML's block definitions,
//           independently of src/formats) bit for bit; NaN matches any NaN.
//   mode 1: the bytes become finite floats of a bounded magnitude; the
//           format's quantizer must accept them, the blocks must dequantize
//           to finite values, and (K-quants) every element must lie within
//           its super-block's range (max(x, 0) - min(x, 0)) of its input, plus the
//           absolute error of fp16 scales near the subnormal range.
// Also: qsp_dtype_size / qsp_dtype_name on any int32 (never crash, unknown
// ids give 0 / "unknown").
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "formats/format.h"
#include "qsp/qsp.h"

namespace {

float bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// IEEE binary16 -> binary32 from the definition.
float h2f(uint16_t h) {
  const uint32_t s = uint32_t(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  if (e == 0) {
    const float v = std::ldexp(float(m), -24);  // exact
    return s ? -v : v;
  }
  if (e == 31) return bits_f(s | 0x7f800000u | (m << 13));
  return bits_f(s | ((e + 112) << 23) | (m << 13));
}

void k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) { *d = q[j] & 63; *m = q[j + 4] & 63; }
  else { *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}

// One block at b into y (block_elems values).
void ref_block(int32_t dt, const uint8_t* b, float* y) {
  switch (dt) {
    case QSP_DTYPE_F32: std::memcpy(y, b, 4); return;
    case QSP_DTYPE_F16: y[0] = h2f(rd16(b)); return;
    case QSP_DTYPE_BF16: y[0] = bits_f(uint32_t(rd16(b)) << 16); return;
    case QSP_DTYPE_Q4_0: {
      const float d = h2f(rd16(b));
      for (int j = 0; j < 16; ++j) { y[j] = float((b[2 + j] & 15) - 8) * d; y[j + 16] = float((b[2 + j] >> 4) - 8) * d; }
      return;
    }
    case QSP_DTYPE_Q4_1: {
      const float d = h2f(rd16(b)), m = h2f(rd16(b + 2));
      for (int j = 0; j < 16; ++j) { y[j] = float(b[4 + j] & 15) * d + m; y[j + 16] = float(b[4 + j] >> 4) * d + m; }
      return;
    }
    case QSP_DTYPE_Q5_0: case QSP_DTYPE_Q5_1: {
      const bool one = dt == QSP_DTYPE_Q5_1;
      const float d = h2f(rd16(b)), m = one ? h2f(rd16(b + 2)) : 0.0f;
      const uint8_t* p = b + (one ? 4 : 2);
      const uint32_t qh = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
      const uint8_t* qs = p + 4;
      for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 15) | (((qh >> j) & 1) << 4), hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        if (one) { y[j] = float(lo) * d + m; y[j + 16] = float(hi) * d + m; }
        else { y[j] = float(lo - 16) * d; y[j + 16] = float(hi - 16) * d; }
      }
      return;
    }
    case QSP_DTYPE_Q8_0: {
      const float d = h2f(rd16(b));
      for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
      return;
    }
    case QSP_DTYPE_Q2_K: {  // scales[16] qs[64] d dmin
      const uint8_t* sc = b; const uint8_t* q = b + 16;
      const float d = h2f(rd16(b + 80)), mn = h2f(rd16(b + 82));
      int is = 0;
      for (int n = 0; n < 256; n += 128, q += 32)
        for (int sh = 0; sh < 8; sh += 2)
          for (int half = 0; half < 2; ++half, ++is) {
            const float dl = d * float(sc[is] & 15), ml = mn * float(sc[is] >> 4);
            for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * half] >> sh) & 3) - ml;
          }
      return;
    }
    case QSP_DTYPE_Q3_K: {  // hmask[32] qs[64] scales[12] d
      const uint8_t* hm = b; const uint8_t* q = b + 32; const uint8_t* s = b + 96;
      const float d = h2f(rd16(b + 108));
      int scl[16];
      for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
        const int high = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        scl[j] = (low | (high << 4)) - 32;
      }
      int is = 0, bit = 0;
      for (int n = 0; n < 256; n += 128, q += 32)
        for (int sh = 0; sh < 8; sh += 2, ++bit)
          for (int half = 0; half < 2; ++half, ++is) {
            const float dl = d * float(scl[is]);
            for (int l = 0; l < 16; ++l) {
              const int i = l + 16 * half;
              *y++ = dl * float(((q[i] >> sh) & 3) - ((hm[i] >> bit) & 1 ? 0 : 4));
            }
          }
      return;
    }
    case QSP_DTYPE_Q4_K: case QSP_DTYPE_Q5_K: {
      const bool five = dt == QSP_DTYPE_Q5_K;
      const float d = h2f(rd16(b)), mn = h2f(rd16(b + 2));
      const uint8_t* s = b + 4; const uint8_t* qh = b + 16; const uint8_t* qs = b + (five ? 48 : 16);
      for (int sb = 0; sb < 8; ++sb) {
        int sc, m; k4(sb, s, &sc, &m);
        const float ds = d * float(sc), ms = mn * float(m);
        for (int l = 0; l < 32; ++l) {
          int v = (qs[32 * (sb / 2) + l] >> (4 * (sb % 2))) & 15;
          if (five) v += ((qh[l] >> sb) & 1) << 4;
          y[32 * sb + l] = ds * float(v) - ms;
        }
      }
      return;
    }
    case QSP_DTYPE_Q6_K: {  // ql[128] qh[64] scales[16] d
      const float d = h2f(rd16(b + 208));
      for (int e = 0; e < 256; ++e) {
        const int n = e / 128, r = e % 128, g = r / 32, l = r % 32;
        const uint8_t ql = b[64 * n + l + 32 * (g & 1)];
        const int lo = g < 2 ? (ql & 15) : (ql >> 4);
        const int hi = (b[128 + 32 * n + l] >> (2 * g)) & 3;
        const int8_t sc = int8_t(b[192 + 8 * n + l / 16 + 2 * g]);
        y[e] = d * float(sc) * float((lo | (hi << 4)) - 32);
      }
      return;
    }
  }
  std::abort();
}

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f_bits(a) == f_bits(b); }

const int32_t kDtypes[] = {QSP_DTYPE_F32, QSP_DTYPE_F16, QSP_DTYPE_BF16, QSP_DTYPE_Q4_0, QSP_DTYPE_Q4_1,
                           QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1, QSP_DTYPE_Q8_0, QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K,
                           QSP_DTYPE_Q4_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K};
constexpr int kN = sizeof kDtypes / sizeof kDtypes[0];

[[noreturn]] void fail(const char* what, const qsp::fmt::Format* f, uint64_t i, float a, float b) {
  std::fprintf(stderr, "fuzz_formats: %s: %s element %llu: library %a (0x%08x), expected %a (0x%08x)\n", what, f->name,
               (unsigned long long)i, a, f_bits(a), b, f_bits(b));
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  // Public API on an arbitrary id.
  int32_t any; std::memcpy(&any, data + 1, 4);
  const qsp::fmt::Format* af = qsp::fmt::find(any);
  const char* nm = qsp_dtype_name(any);
  if (!nm || (!af && std::strcmp(nm, "unknown") != 0)) std::abort();
  const uint64_t rows = data[0] + 1ull, cols = uint64_t(rd16(data + 3)) * 32;
  const uint64_t sz = qsp_dtype_size(any, rows, cols);
  if (!af && sz != 0) std::abort();
  if (af && cols % af->block_elems == 0 && cols != 0 && sz != rows * (cols / af->block_elems) * af->block_bytes) std::abort();
  (void)qsp_dtype_size(any, UINT64_MAX, UINT64_MAX);

  const qsp::fmt::Format* f = qsp::fmt::find(kDtypes[(data[0] & 0x7f) % kN]);
  if (!f || f->dtype != kDtypes[(data[0] & 0x7f) % kN]) std::abort();
  const bool quant_mode = data[0] & 0x80;
  data += 1; size -= 1;
  const uint64_t nb = size / f->block_bytes;
  if (nb == 0) return 0;
  const uint64_t n = nb * f->block_elems;
  if (!quant_mode) {
    std::vector<uint8_t> src(data, data + nb * f->block_bytes);  // exact size: ASan sees overreads
    std::vector<float> got(n), want(f->block_elems);
    f->dequantize(src.data(), got.data(), n);
    for (uint64_t k = 0; k < nb; ++k) {
      ref_block(f->dtype, src.data() + k * f->block_bytes, want.data());
      for (uint32_t i = 0; i < f->block_elems; ++i)
        if (!same(got[k * f->block_elems + i], want[i])) fail("dequantize", f, k * f->block_elems + i, got[k * f->block_elems + i], want[i]);
    }
    return 0;
  }
  // Quantizer: finite floats of magnitude < 2^12 (fp16 scales stay finite),
  // from int16 values times 2^-e, e from the first byte.
  const uint64_t nf = (size - 1) / 2 / f->block_elems * f->block_elems;
  if (nf == 0) return 0;
  const int e = data[0] % 40;
  std::vector<float> x(nf);
  for (uint64_t i = 0; i < nf; ++i) x[i] = std::ldexp(float(int16_t(rd16(data + 1 + 2 * i))), 12 - 15 - e);
  std::vector<uint8_t> q(f->row_bytes(nf));
  f->quantize(x.data(), q.data(), nf);
  std::vector<float> y(nf);
  f->dequantize(q.data(), y.data(), nf);
  for (uint64_t i = 0; i < nf; ++i)
    if (!std::isfinite(y[i])) fail("quantize then dequantize is not finite", f, i, y[i], x[i]);
  if (f->block_elems == 256) {
    for (uint64_t k = 0; k < nf; k += 256) {
      float lo = 0, hi = 0;
      for (int i = 0; i < 256; ++i) { lo = std::fmin(lo, x[k + i]); hi = std::fmax(hi, x[k + i]); }
      // Slack for fp16 scales: d and dmin keep an absolute error up to half a
      // subnormal ulp (2^-25), which 6-bit scale codes (< 64) times levels
      // (< 64) carry into every element; 2^-12 covers 2 * 64 * 64 * 2^-25.
      const float bound = (hi - lo) * 1.0001f + 0x1p-12f;
      for (int i = 0; i < 256; ++i)
        if (std::fabs(y[k + i] - x[k + i]) > bound) fail("K-quant error beyond the block's range", f, k + i, y[k + i], x[k + i]);
    }
  }
  if (!f->quantized()) {  // plain floats: exact round trip for these inputs? F16 may round; check within fp16 ulp
    for (uint64_t i = 0; i < nf; ++i)
      if (f->dtype == QSP_DTYPE_F32 && !same(y[i], x[i])) fail("f32 round trip", f, i, y[i], x[i]);
  }
  return 0;
}
