// The GGUF parser (internal): turns a byte buffer into a validated directory
// of metadata and tensors, and maps a parsed file onto a qsp model (the
// architecture, its hyperparameters, the tensor of every weight slot). It
// reads only the buffer it is given, checking every count, length, offset and
// size (overflow-safe) before use; failures throw qsp::Error with a status.
//
// What it takes from the rest of the library: the error type
// (common/error.h), the engine's table of weight slots (engine/slots.h: which
// tensors a model has, their GGUF names and shape rules) and the format
// registry (formats/format.h: which tensor types qsp computes). Contexts are
// created and weights uploaded through the public C API only (gguf_api.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "engine/slots.h"
#include "qsp/qsp.h"

namespace qsp {
namespace gguf {

// Throws qsp::Error(status, printf-formatted message).
[[noreturn]] void fail(qsp_status status, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

struct KeyValue {
  std::string key;
  uint32_t type = 0;         // ValueType
  uint64_t offset = 0;       // buffer offset of the value (after its type field)
  uint32_t array_type = 0;   // arrays: element type
  uint64_t array_count = 0;  // arrays: element count
};

struct TensorInfo {
  std::string name;
  int32_t type = 0;          // GGML type id (one type_traits() knows)
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};
  uint64_t offset = 0;       // absolute buffer offset of the data
  uint64_t n_bytes = 0;
  uint64_t handle = 0;       // derived from the file identity and the name; never 0

  uint64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t cols() const { return ne[0]; }
};

// A parsed GGUF file. The buffer is borrowed: it must outlive the File.
class File {
 public:
  // Parses and validates `size` bytes at `data`. `identity` names the file's
  // contents for weight handles (see file_identity / content_identity); the
  // header bytes are mixed in as well. Throws Error.
  static std::unique_ptr<File> parse(const uint8_t* data, uint64_t size, uint64_t identity);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  const uint8_t* bytes() const { return data_; }

  const std::vector<KeyValue>& kvs() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const KeyValue* find_kv(const std::string& key) const;
  const TensorInfo* find_tensor(const std::string& name) const;
  int64_t tensor_index(const std::string& name) const;  // -1 if absent

  // Typed metadata access. `get_*` return false when the key is absent and
  // throw BAD_FORMAT when it has an incompatible type or its value does not
  // fit; the `try_*` variants return false in both cases.
  bool get_uint(const std::string& key, uint64_t* out) const;   // any integer type, >= 0
  bool get_float(const std::string& key, double* out) const;    // f32, f64 or an integer
  bool get_string(const std::string& key, std::string* out) const;
  bool get_array_count(const std::string& key, uint64_t* out) const;
  bool get_bool(const std::string& key, bool* out) const;  // bool or an integer (0 / not 0)
  // Arrays, element by element (the parser bounded their counts by the file
  // size): strings; any integer type (as int64; u64 values above INT64_MAX
  // are BAD_FORMAT); f32 or f64 (as float). A key of another type or an array
  // of other elements is BAD_FORMAT.
  bool get_string_array(const std::string& key, std::vector<std::string>* out) const;
  bool get_int_array(const std::string& key, std::vector<int64_t>* out) const;
  bool get_float_array(const std::string& key, std::vector<float>* out) const;
  bool try_uint(const std::string& key, uint64_t* out) const;
  bool try_float(const std::string& key, double* out) const;
  bool try_string(const std::string& key, std::string* out) const;
  bool try_array_count(const std::string& key, uint64_t* out) const;

 private:
  File() = default;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> kv_index_, tensor_index_;
};

// Identity of a file on disk: device, inode, size and modification time.
uint64_t file_identity(uint64_t dev, uint64_t ino, uint64_t size, int64_t mtime_s, int64_t mtime_ns);
// Identity of a buffer: a hash of all its bytes.
uint64_t content_identity(const uint8_t* data, uint64_t size);

// ---- The model a file describes ---------------------------------------------
struct Hyper {  // as the metadata states them (best effort; 0 = unknown)
  std::string arch;
  bool known_arch = false;
  uint32_t n_layers = 0, hidden = 0, ffn = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, vocab = 0,
           context_length = 0;
  float rms_eps = 0, rope_theta = 0;
  int32_t rope_style = -1, qk_norm = -1;
  bool tied = false;
};
// Reads the hyperparameters without failing (missing or ill-typed: 0).
Hyper read_hyper(const File& f);

struct Model {
  Hyper h;  // fully validated
  // Tensor indices by slot (engine/slots.h); -1: the slot is not part of this
  // model (q/k norms of llama). kLmHead == kTokenEmbd's index when tied.
  std::vector<std::array<int64_t, kLayerSlotCount>> layers;
  std::array<int64_t, kModelSlotCount> model{};
};
// Checks everything qsp needs from the file; throws BAD_FORMAT / UNSUPPORTED.
Model resolve_model(const File& f);

}  // namespace gguf
}  // namespace qsp
