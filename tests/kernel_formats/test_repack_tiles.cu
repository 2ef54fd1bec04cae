// The upload repack in pieces (kern::repack_weight_tiles, what the CUDA
// backend runs on all cores into its staging buffers): pieces of 16-row
// tiles, cut at random and repacked in a random order into their own
// buffers, then placed where kern::dweight_tiles says, equal the whole
// kern::repack_weight byte for byte, for every format the kernels serve,
// row counts with partial last tiles and several column counts. A piece
// writes exactly its bytes (guards around it stay untouched), and the spans
// of all tiles cover the device layout once. GGUF inputs are random bytes:
// the repack moves codes and scales, it does not interpret them. No GPU
// needed (built with nvcc as it includes the format headers).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "formats/format.h"
#include "kernels/kernels.h"
#include "qsp/qsp.h"

namespace {

using namespace qsp;

constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0x5A;

bool guards_intact(const std::vector<uint8_t>& b, size_t n) {
  for (size_t i = 0; i < kGuard; ++i)
    if (b[i] != kGuardByte || b[kGuard + n + i] != kGuardByte) return false;
  return true;
}

void check_pieces(int32_t dtype, int64_t rows, int64_t cols, uint64_t seed) {
  INFO(fmt::name(dtype) << " " << rows << "x" << cols << " seed " << seed);
  REQUIRE(kern::format_supported(dtype));
  const kern::WFormat f = kern::format_for(dtype);
  const size_t src_bytes = size_t(fmt::tensor_bytes(dtype, uint64_t(rows), uint64_t(cols)));
  REQUIRE(src_bytes > 0);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> src(src_bytes);
  for (auto& x : src) x = uint8_t(rng());

  const size_t n = kern::dweight_bytes(f, rows, cols);
  std::vector<uint8_t> whole(n, 0xA5);
  kern::repack_weight(dtype, src.data(), rows, cols, whole.data());

  // The spans of all tiles are the whole layout; consecutive tiles are adjacent.
  const int64_t nt = kern::dweight_tile_count(rows);
  REQUIRE(nt == (rows + 15) / 16);
  const kern::TileSpan all = kern::dweight_tiles(f, rows, cols, 0, nt);
  CHECK(all.units_off == 0);
  CHECK(all.units_bytes + all.side_bytes == n);
  if (all.side_bytes) CHECK(all.side_off == all.units_bytes);
  for (int64_t t = 0; t + 1 < nt; ++t) {
    const kern::TileSpan a = kern::dweight_tiles(f, rows, cols, t, t + 1);
    const kern::TileSpan b = kern::dweight_tiles(f, rows, cols, t + 1, t + 2);
    REQUIRE(a.units_off + a.units_bytes == b.units_off);
    REQUIRE(a.side_off + a.side_bytes == b.side_off);
  }
  const kern::TileSpan none = kern::dweight_tiles(f, rows, cols, 3, 3);
  CHECK(none.units_bytes == 0);
  CHECK(none.side_bytes == 0);

  for (int round = 0; round < 3; ++round) {
    // Cut [0, nt) at random (round 0: single tiles), shuffle the pieces.
    std::vector<std::pair<int64_t, int64_t>> pieces;
    for (int64_t t = 0; t < nt;) {
      const int64_t len = round == 0 ? 1 : 1 + int64_t(rng() % uint64_t(std::max<int64_t>(1, nt / (2 * round))));
      pieces.emplace_back(t, std::min(nt, t + len));
      t += len;
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    std::vector<uint8_t> built(n, 0xC3);
    for (const auto& pc : pieces) {
      const kern::TileSpan sp = kern::dweight_tiles(f, rows, cols, pc.first, pc.second);
      std::vector<uint8_t> u(sp.units_bytes + 2 * kGuard, kGuardByte), s(sp.side_bytes + 2 * kGuard, kGuardByte);
      kern::repack_weight_tiles(dtype, src.data(), rows, cols, pc.first, pc.second, u.data() + kGuard,
                                s.data() + kGuard);
      INFO("tiles " << pc.first << ".." << pc.second);
      REQUIRE(guards_intact(u, sp.units_bytes));
      REQUIRE(guards_intact(s, sp.side_bytes));
      std::memcpy(built.data() + sp.units_off, u.data() + kGuard, sp.units_bytes);
      if (sp.side_bytes) std::memcpy(built.data() + sp.side_off, s.data() + kGuard, sp.side_bytes);
    }
    INFO("round " << round << ", " << pieces.size() << " pieces");
    REQUIRE(built == whole);
  }
}

}  // namespace

TEST_CASE("repack tiles: pieces in any order equal the whole repack, every format", "[kernel_formats][repack]") {
  struct Case {
    int32_t dtype;
    std::vector<int64_t> cols;
  };
  const std::vector<int64_t> legacy = {32, 96, 320, 2048}, kquant = {256, 768, 2048}, floats = {8, 100, 1024};
  const Case cases[] = {
      {QSP_DTYPE_F16, floats},  {QSP_DTYPE_BF16, floats}, {QSP_DTYPE_F32, floats},  {QSP_DTYPE_Q4_0, legacy},
      {QSP_DTYPE_Q8_0, legacy}, {QSP_DTYPE_Q4_1, legacy}, {QSP_DTYPE_Q5_0, legacy}, {QSP_DTYPE_Q5_1, legacy},
      {QSP_DTYPE_Q2_K, kquant}, {QSP_DTYPE_Q3_K, kquant}, {QSP_DTYPE_Q4_K, kquant}, {QSP_DTYPE_Q5_K, kquant},
      {QSP_DTYPE_Q6_K, kquant},
  };
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (int64_t rows : {1, 17, 100, 1000})
      for (int64_t cols : c.cols) check_pieces(c.dtype, rows, cols, seed++);
}

TEST_CASE("repack tiles: ranges past the end are clamped, empty ranges write nothing", "[kernel_formats][repack]") {
  const int64_t rows = 40, cols = 64;  // 3 tiles, the last one partial
  const kern::WFormat f = kern::format_for(QSP_DTYPE_Q4_0);
  const kern::TileSpan past = kern::dweight_tiles(f, rows, cols, 2, 10);
  const kern::TileSpan last = kern::dweight_tiles(f, rows, cols, 2, 3);
  CHECK(past.units_off == last.units_off);
  CHECK(past.units_bytes == last.units_bytes);
  CHECK(past.side_off == last.side_off);
  CHECK(past.side_bytes == last.side_bytes);
  std::vector<uint8_t> src(size_t(fmt::tensor_bytes(QSP_DTYPE_Q4_0, rows, cols)), 0x11);
  std::vector<uint8_t> u(16, kGuardByte), s(16, kGuardByte);
  kern::repack_weight_tiles(QSP_DTYPE_Q4_0, src.data(), rows, cols, 1, 1, u.data(), s.data());
  kern::repack_weight_tiles(QSP_DTYPE_Q4_0, src.data(), rows, cols, 5, 9, u.data(), s.data());
  CHECK(std::all_of(u.begin(), u.end(), [](uint8_t b) { return b == kGuardByte; }));
  CHECK(std::all_of(s.begin(), s.end(), [](uint8_t b) { return b == kGuardByte; }));
  // f16 is row-major: a tile is 16 rows, the last one 8 here.
  const kern::TileSpan h = kern::dweight_tiles(kern::format_for(QSP_DTYPE_F16), rows, cols, 2, 3);
  CHECK(h.units_off == size_t(32 * cols * 2));
  CHECK(h.units_bytes == size_t(8 * cols * 2));
  CHECK(h.side_bytes == 0);
}
