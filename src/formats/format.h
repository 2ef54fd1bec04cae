// A weight format as one unit.
//
// Everything the host knows about a tensor element type lives in one Format
// record, defined in that format's own file (src/formats/<name>.cpp): its
// dtype id (which is GGML's type id, so also its GGUF tensor type), its name,
// its block geometry, the exact dequantization the CPU reference computes
// with, GGML's reference quantizer (tests, the synthesizer), and how the CUDA
// backend stores it (see device_format below). format_list.h names every
// format once; the registry, the C API's qsp_dtype_size / qsp_dtype_name, the
// engine's validation and the GGUF loader all read these records and list no
// format themselves.
#pragma once

#include <cstdint>

namespace qsp {
namespace fmt {

struct Format {
  int32_t dtype;          // QSP_DTYPE_* == GGML type id
  const char* name;       // "q4_0" (GGML's spelling)
  uint32_t block_elems;   // elements per block along a row; 1 for plain floats
  uint32_t block_bytes;   // bytes per block
  // Exact conversion of n elements (n % block_elems == 0) to fp32.
  void (*dequantize)(const void* src, float* dst, uint64_t n);
  // GGML's reference quantizer for n elements (n % block_elems == 0);
  // plain float types round to nearest even.
  void (*quantize)(const float* src, void* dst, uint64_t n);

  bool quantized() const { return block_elems > 1; }
  // Bytes of one row of n elements; 0 when n is not a multiple of the block or
  // the size would pass 2^64.
  uint64_t row_bytes(uint64_t n) const {
    if (n % block_elems != 0 || n / block_elems > UINT64_MAX / block_bytes) return 0;
    return n / block_elems * block_bytes;
  }
};

// The format of a dtype id; nullptr when qsp does not know it.
const Format* find(int32_t dtype);
// Every format qsp knows, ending with nullptr (for listings and messages).
const Format* const* all();
// "f32, f16, ..." (for messages).
const char* names();

// Bytes of a rows x cols tensor; 0 if the dtype is unknown, cols not a
// multiple of the block, rows == 0 or the size would pass 2^64.
uint64_t tensor_bytes(int32_t dtype, uint64_t rows, uint64_t cols);
// "q4_0", ...; "unknown" for an unknown id.
const char* name(int32_t dtype);

// Dequantizes one row of a known dtype (n elements, a multiple of its block).
void dequantize_row(int32_t dtype, const void* src, float* dst, uint64_t n);

}  // namespace fmt
}  // namespace qsp
