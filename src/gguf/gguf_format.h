// GGUF constants shared by the reader and the writer: value types and the
// GGML tensor-type table (block size and bytes per block of every type id a
// GGUF file may carry, so the reader can bounds-check files qsp cannot run).
// Depends on nothing but the standard library.
#pragma once

#include <cstdint>

namespace qsp {
namespace gguf {

constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;

// Metadata value types (GGUF spec, gguf_metadata_value_type).
enum ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
  kValueTypeCount = 13,
};

// Bytes of a scalar value type; 0 for string, array and unknown types.
inline uint32_t scalar_size(uint32_t t) {
  switch (t) {
    case kUint8: case kInt8: case kBool: return 1;
    case kUint16: case kInt16: return 2;
    case kUint32: case kInt32: case kFloat32: return 4;
    case kUint64: case kInt64: case kFloat64: return 8;
    default: return 0;
  }
}

inline const char* value_type_name(uint32_t t) {
  static const char* const names[kValueTypeCount] = {"u8",  "i8",   "u16",    "i16", "u32", "i32", "f32",
                                                     "bool", "string", "array", "u64", "i64", "f64"};
  return t < kValueTypeCount ? names[t] : "unknown";
}

// GGML tensor types (ggml.h enum ggml_type, ggml.c type_traits): every id
// current GGUF files use, with GGML's names. Removed ids (4, 5, 31-33, 36-38)
// have no entry. Whether qsp can compute a type is the format registry's
// answer (fmt::find in src/formats), not this table's.
struct TypeTraits {
  const char* name;      // nullptr: not a valid type id
  uint32_t block_size;   // elements per block
  uint32_t type_size;    // bytes per block
};

constexpr int32_t kTypeCount = 43;  // ids 0..42 (q2_0 is the newest this reader knows)

inline const TypeTraits& type_traits(int32_t type) {
  static const TypeTraits table[kTypeCount] = {
      {"f32", 1, 4},        {"f16", 1, 2},        {"q4_0", 32, 18},     {"q4_1", 32, 20},
      {nullptr, 0, 0},      {nullptr, 0, 0},      {"q5_0", 32, 22},     {"q5_1", 32, 24},
      {"q8_0", 32, 34},     {"q8_1", 32, 36},     {"q2_K", 256, 84},    {"q3_K", 256, 110},
      {"q4_K", 256, 144},   {"q5_K", 256, 176},   {"q6_K", 256, 210},   {"q8_K", 256, 292},
      {"iq2_xxs", 256, 66}, {"iq2_xs", 256, 74},  {"iq3_xxs", 256, 98}, {"iq1_s", 256, 50},
      {"iq4_nl", 32, 18},   {"iq3_s", 256, 110},  {"iq2_s", 256, 82},   {"iq4_xs", 256, 136},
      {"i8", 1, 1},         {"i16", 1, 2},        {"i32", 1, 4},        {"i64", 1, 8},
      {"f64", 1, 8},        {"iq1_m", 256, 56},   {"bf16", 1, 2},       {nullptr, 0, 0},
      {nullptr, 0, 0},      {nullptr, 0, 0},      {"tq1_0", 256, 54},   {"tq2_0", 256, 66},
      {nullptr, 0, 0},      {nullptr, 0, 0},      {nullptr, 0, 0},      {"mxfp4", 32, 17},
      {"nvfp4", 64, 36},    {"q1_0", 128, 18},    {"q2_0", 64, 18},
  };
  static const TypeTraits none = {nullptr, 0, 0};
  return type >= 0 && type < kTypeCount ? table[type] : none;
}

inline bool type_valid(int32_t type) { return type_traits(type).name != nullptr; }

// Bytes of a row of n elements; 0 when n is not a multiple of the block size
// or the type is invalid. Callers bound n so this cannot overflow (n < 2^62).
inline uint64_t row_bytes(int32_t type, uint64_t n) {
  const TypeTraits& t = type_traits(type);
  if (!t.name || n % t.block_size != 0) return 0;
  return n / t.block_size * t.type_size;
}

// FNV-1a 64 and a strong finalizer (splitmix64's), used for handles.
inline uint64_t fnv1a64(const void* data, uint64_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace gguf
}  // namespace qsp
