// A GGUF v3 (or v2) writer (the tool-side library qsp_gguf_write, not part of
// libqsp; used by `qsp synth`, the tests and the fuzz corpus). It follows the
// GGUF spec exactly: header (magic "GGUF", u32 version, u64 tensor count, u64
// metadata count), metadata (gguf string key, u32 type, value), tensor infos
// (name, u32 n_dims, u64 dims, u32 type, u64 offset relative to the data
// section, each aligned), zero padding up to the aligned data section, then
// each tensor's data padded to the alignment. Tensor data is produced row block
// by row block and streamed, so files far larger than memory can be written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qsp {
namespace gguf {

class Writer {
 public:
  explicit Writer(uint32_t alignment = 32, uint32_t version = 3) : alignment_(alignment), version_(version) {}

  // ---- metadata, in file order ----
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // A pre-encoded value of `type` (tests: any bytes at all).
  void add_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value);

  // ---- tensors, in data order; ne as GGUF stores it (ne[0] contiguous) ----
  struct Tensor {
    std::string name;
    int32_t type = 0;
    std::vector<uint64_t> ne;
    uint64_t offset = 0;   // relative to the data section
    uint64_t n_bytes = 0;
    uint64_t rows() const;  // ne[1] * ne[2] * ...
    uint64_t row_bytes() const { return rows() ? n_bytes / rows() : 0; }
  };
  // Returns the tensor's index. Throws std::invalid_argument for a type id
  // without a known size or an ne[0] that is not a multiple of its block.
  size_t add_tensor(const std::string& name, int32_t type, const std::vector<uint64_t>& ne);
  const std::vector<Tensor>& tensors() const { return tensors_; }

  uint32_t alignment() const { return alignment_; }
  // Everything before the data section (padded to the alignment).
  std::vector<uint8_t> header() const;
  // Bytes of the data section, including each tensor's trailing padding.
  uint64_t data_size() const { return data_size_; }
  uint64_t file_size() const { return header().size() + data_size_; }

  // Produces rows [row_begin, row_end) of tensor `index` into dst
  // ((row_end - row_begin) * row_bytes bytes). Called from several threads at
  // once for disjoint row ranges.
  using RowFill = std::function<void(size_t index, uint64_t row_begin, uint64_t row_end, uint8_t* dst)>;
  using Progress = std::function<void(uint64_t done, uint64_t total)>;

  // Writes the whole file to `path` (through `path`.partial, renamed at the
  // end), filling tensor data with n_threads threads in blocks of about
  // chunk_bytes. Throws std::runtime_error on I/O errors.
  void write_file(const std::string& path, const RowFill& fill, int n_threads = 1,
                  const Progress& progress = nullptr, uint64_t chunk_bytes = 64ull << 20) const;
  // The whole file in memory.
  std::vector<uint8_t> write_memory(const RowFill& fill, int n_threads = 1) const;

 private:
  void key(const std::string& k, uint32_t type);
  void stream(const RowFill& fill, int n_threads, uint64_t chunk_bytes,
              const std::function<void(const uint8_t*, size_t)>& sink, const Progress& progress) const;

  uint32_t alignment_;
  uint32_t version_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;  // encoded metadata
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace gguf
}  // namespace qsp
