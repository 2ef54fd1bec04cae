#include "gguf/gguf_reader.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "common/printable.h"
#include "gguf/gguf_format.h"

namespace qsp {
namespace gguf {

void fail(qsp_status status, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw Error(status, buf);
}

namespace {

using ull = unsigned long long;

// Untrusted text made printable and bounded, for messages (common/printable.h).
std::string printable(const std::string& s, size_t max = 96) { return qsp::printable(s, max); }

// Reads little-endian values from the buffer; every read is bounds-checked.
// `where_` names the entry being read, for messages.
class Cursor {
 public:
  Cursor(const uint8_t* d, uint64_t n) : d_(d), n_(n) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }
  std::string where_;

  void need(uint64_t k, const char* what) const {
    if (k > n_ - pos_)
      fail(QSP_ERR_BAD_FORMAT,
           "truncated file: %s%s%s at offset %llu needs %llu bytes, but only %llu remain (file size %llu)", what,
           where_.empty() ? "" : " of ", where_.c_str(), ull(pos_), ull(k), ull(n_ - pos_), ull(n_));
  }
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v;
    std::memcpy(&v, d_ + pos_, 4);
    pos_ += 4;
    return v;
  }
  uint64_t u64(const char* what) {
    need(8, what);
    uint64_t v;
    std::memcpy(&v, d_ + pos_, 8);
    pos_ += 8;
    return v;
  }
  void skip(uint64_t k, const char* what) {
    need(k, what);
    pos_ += k;
  }
  std::string str(const char* what) {
    const uint64_t len = u64(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(d_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }
  void skip_str(const char* what) {
    const uint64_t len = u64(what);
    skip(len, what);
  }

 private:
  const uint8_t* d_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

constexpr int kMaxArrayDepth = 4;

void skip_array(Cursor& c, uint32_t elem, uint64_t n, int depth);

void skip_value(Cursor& c, uint32_t type, int depth) {
  if (uint32_t sz = scalar_size(type)) {
    c.skip(sz, "a value");
  } else if (type == kString) {
    c.skip_str("a string value");
  } else if (type == kArray) {
    if (depth >= kMaxArrayDepth)
      fail(QSP_ERR_BAD_FORMAT, "%s: arrays nested deeper than %d levels", c.where_.c_str(), kMaxArrayDepth);
    const uint32_t elem = c.u32("an array element type");
    const uint64_t n = c.u64("an array length");
    skip_array(c, elem, n, depth + 1);
  } else {
    fail(QSP_ERR_BAD_FORMAT, "%s has unknown value type %u", c.where_.c_str(), type);
  }
}

void skip_array(Cursor& c, uint32_t elem, uint64_t n, int depth) {
  // Each element takes at least `min` bytes: a length that cannot fit in the
  // rest of the file is rejected before any loop runs.
  uint64_t min = scalar_size(elem);
  if (elem == kString) min = 8;
  if (elem == kArray) min = 12;
  if (min == 0) fail(QSP_ERR_BAD_FORMAT, "%s: array of unknown element type %u", c.where_.c_str(), elem);
  if (n > c.left() / min)
    fail(QSP_ERR_BAD_FORMAT,
         "truncated file: %s declares an array of %llu %s values at offset %llu, which needs at least %llu "
         "bytes per value, but only %llu bytes remain",
         c.where_.c_str(), ull(n), value_type_name(elem), ull(c.pos()), ull(min), ull(c.left()));
  if (elem == kString) {
    for (uint64_t i = 0; i < n; ++i) c.skip_str("an array string");
  } else if (elem == kArray) {
    for (uint64_t i = 0; i < n; ++i) skip_value(c, kArray, depth);
  } else {
    c.skip(n * min, "array data");
  }
}

// a * b, or false on overflow.
bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  *out = a * b;
  return true;
}

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

}  // namespace

uint64_t file_identity(uint64_t dev, uint64_t ino, uint64_t size, int64_t mtime_s, int64_t mtime_ns) {
  uint64_t h = 0x6767756669646e74ull;  // "ggufidnt"
  for (uint64_t v : {dev, ino, size, uint64_t(mtime_s), uint64_t(mtime_ns)}) h = mix64(h ^ v) + 0x9E3779B97F4A7C15ull;
  return h;
}

uint64_t content_identity(const uint8_t* data, uint64_t size) {
  // Four independent lanes of 8-byte words (xxhash64-style rounds): a few GB/s.
  const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t lane[4] = {P1 + P2, P2, 0, 0 - P1};
  uint64_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, data + i + 8 * k, 8);
      lane[k] = rotl(lane[k] + w * P2, 31) * P1;
    }
  }
  uint64_t h = size;
  for (int k = 0; k < 4; ++k) h = mix64(h ^ lane[k]);
  return mix64(fnv1a64(data + i, size - i, h));
}

std::unique_ptr<File> File::parse(const uint8_t* data, uint64_t size, uint64_t identity) {
  std::unique_ptr<File> f(new File);
  f->data_ = data;
  f->size_ = size;
  Cursor c(data, size);

  c.where_ = "the header";
  if (size < 4)
    fail(QSP_ERR_BAD_FORMAT, "truncated file: %llu bytes, not a GGUF file (a GGUF header takes 24 bytes)",
         ull(size));
  const uint32_t magic = c.u32("the magic");
  if (magic != kMagic) {
    char shown[8];
    for (int i = 0; i < 4; ++i) {
      const unsigned char ch = data[i];
      shown[i] = ch >= 0x20 && ch < 0x7f ? char(ch) : '?';
    }
    shown[4] = 0;
    fail(QSP_ERR_BAD_FORMAT, "not a GGUF file: the magic is \"%s\" (0x%08x), expected \"GGUF\"", shown, magic);
  }
  const uint32_t version = c.u32("the version");
  if (version == 0x02000000u || version == 0x03000000u)
    fail(QSP_ERR_UNSUPPORTED, "this is a big-endian GGUF file; qsp reads little-endian GGUF only");
  if (version == 1)
    fail(QSP_ERR_BAD_FORMAT, "GGUF version 1 is not supported (qsp reads versions 2 and 3; re-convert the model)");
  if (version != 2 && version != 3)
    fail(QSP_ERR_BAD_FORMAT, "unsupported GGUF version %u (qsp reads versions 2 and 3)", version);
  f->version_ = version;
  const uint64_t n_tensors = c.u64("the tensor count");
  const uint64_t n_kv = c.u64("the metadata count");

  // ---- metadata --------------------------------------------------------------
  // The smallest entry: an empty key (8), a type (4), a 1-byte value.
  if (n_kv > c.left() / 13)
    fail(QSP_ERR_BAD_FORMAT,
         "truncated file: the header declares %llu metadata entries, more than the %llu bytes that follow can hold",
         ull(n_kv), ull(c.left()));
  f->kvs_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.where_ = "metadata entry " + std::to_string(i);
    KeyValue kv;
    kv.key = c.str("the key");
    if (kv.key.find('\0') != std::string::npos)
      fail(QSP_ERR_BAD_FORMAT, "metadata key \"%s\" contains a NUL byte", printable(kv.key).c_str());
    c.where_ = "metadata key \"" + printable(kv.key) + "\"";
    kv.type = c.u32("the value type");
    kv.offset = c.pos();
    if (kv.type == kArray) {
      kv.array_type = c.u32("the array element type");
      kv.array_count = c.u64("the array length");
      skip_array(c, kv.array_type, kv.array_count, 1);
    } else {
      skip_value(c, kv.type, 0);
    }
    if (!f->kv_index_.emplace(kv.key, f->kvs_.size()).second)
      fail(QSP_ERR_BAD_FORMAT, "duplicate metadata key \"%s\"", printable(kv.key).c_str());
    f->kvs_.push_back(std::move(kv));
  }
  c.where_.clear();

  uint64_t align = kDefaultAlignment;
  if (f->get_uint("general.alignment", &align)) {
    if (align == 0 || align > (1u << 30) || (align & (align - 1)) != 0)
      fail(QSP_ERR_BAD_FORMAT, "general.alignment = %llu is not a power of two (at most 2^30)", ull(align));
  }
  f->alignment_ = uint32_t(align);

  // ---- tensor directory ------------------------------------------------------
  // The smallest entry: an empty name (8), n_dims (4), a type (4), an offset (8).
  if (n_tensors > c.left() / 24)
    fail(QSP_ERR_BAD_FORMAT,
         "truncated file: the header declares %llu tensors, more than the %llu bytes that follow can describe",
         ull(n_tensors), ull(c.left()));
  f->tensors_.reserve(size_t(n_tensors));
  std::vector<uint64_t> rel_offsets;
  rel_offsets.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.where_ = "tensor info " + std::to_string(i);
    TensorInfo t;
    t.name = c.str("the tensor name");
    const std::string shown = printable(t.name);
    if (t.name.find('\0') != std::string::npos)
      fail(QSP_ERR_BAD_FORMAT, "tensor name \"%s\" contains a NUL byte", shown.c_str());
    c.where_ = "tensor " + shown;
    t.n_dims = c.u32("the number of dimensions");
    if (t.n_dims > kMaxDims)
      fail(QSP_ERR_BAD_FORMAT, "tensor %s has %u dimensions; GGUF allows at most %u", shown.c_str(), t.n_dims,
           kMaxDims);
    for (uint32_t d = 0; d < t.n_dims; ++d) t.ne[d] = c.u64("a dimension");
    const uint32_t type = c.u32("the type");
    const uint64_t rel = c.u64("the data offset");
    if (type >= uint32_t(kTypeCount))
      fail(QSP_ERR_UNSUPPORTED,
           "tensor %s has type id %u, which is newer than this reader (it knows GGML type ids up to %d, %s)",
           shown.c_str(), type, kTypeCount - 1, type_traits(kTypeCount - 1).name);
    if (!type_valid(int32_t(type)))
      fail(QSP_ERR_UNSUPPORTED,
           "tensor %s has type id %u, a GGML type that was removed (ids 4, 5, 31-33 and 36-38 are no longer "
           "used); re-convert the model",
           shown.c_str(), type);
    t.type = int32_t(type);
    const TypeTraits& tt = type_traits(t.type);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < kMaxDims; ++d)
      if (!mul_ok(elems, t.ne[d], &elems) || elems > (uint64_t(1) << 62))
        fail(QSP_ERR_BAD_FORMAT, "tensor %s: shape [%llu, %llu, %llu, %llu] has too many elements",
             shown.c_str(), ull(t.ne[0]), ull(t.ne[1]), ull(t.ne[2]), ull(t.ne[3]));
    if (t.ne[0] % tt.block_size != 0)
      fail(QSP_ERR_BAD_FORMAT, "tensor %s: ne[0] = %llu is not a multiple of the %s block size %u", shown.c_str(),
           ull(t.ne[0]), tt.name, tt.block_size);
    uint64_t row = 0;
    if (!mul_ok(t.ne[0] / tt.block_size, tt.type_size, &row) || !mul_ok(row, t.rows(), &t.n_bytes))
      fail(QSP_ERR_BAD_FORMAT, "tensor %s: its byte size overflows", shown.c_str());
    if (rel % f->alignment_ != 0)
      fail(QSP_ERR_BAD_FORMAT, "tensor %s: data offset %llu is not a multiple of the alignment %u", shown.c_str(),
           ull(rel), f->alignment_);
    if (!f->tensor_index_.emplace(t.name, f->tensors_.size()).second)
      fail(QSP_ERR_BAD_FORMAT, "duplicate tensor name %s", shown.c_str());
    f->tensors_.push_back(std::move(t));
    rel_offsets.push_back(rel);
  }
  c.where_.clear();

  // ---- data section ----------------------------------------------------------
  const uint64_t header_end = c.pos();
  const uint64_t pad = (f->alignment_ - header_end % f->alignment_) % f->alignment_;
  f->data_offset_ = header_end + pad;  // header_end <= size < 2^64 - 2^30: no overflow
  // Every tensor's byte range [offset, offset + n_bytes) must lie inside the
  // data section, zero-sized tensors included: a tensor with a zero dimension
  // is accepted, and its offset is checked like any other (docs/GGUF.md).
  if (f->data_offset_ > size && !f->tensors_.empty())
    fail(QSP_ERR_BAD_FORMAT,
         "truncated file: the tensor data section would start at offset %llu (the tensor infos end at %llu, "
         "aligned to %u), past the end of the file (%llu bytes)",
         ull(f->data_offset_), ull(header_end), f->alignment_, ull(size));
  const uint64_t data_size = f->data_offset_ <= size ? size - f->data_offset_ : 0;
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    TensorInfo& t = f->tensors_[i];
    const uint64_t rel = rel_offsets[i];
    if (rel > data_size || t.n_bytes > data_size - rel)
      fail(QSP_ERR_BAD_FORMAT,
           "tensor %s: its data (%llu bytes at offset %llu of the data section) ends past the end of the file: "
           "the data section holds %llu bytes (truncated file?)",
           printable(t.name).c_str(), ull(t.n_bytes), ull(rel), ull(data_size));
    t.offset = f->data_offset_ + rel;
  }

  // ---- handles ---------------------------------------------------------------
  const uint64_t id = mix64(identity ^ content_identity(data, header_end));
  for (TensorInfo& t : f->tensors_) {
    t.handle = mix64(id ^ mix64(fnv1a64(t.name.data(), t.name.size())));
    if (t.handle == 0) t.handle = 1;
  }
  return f;
}

const KeyValue* File::find_kv(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t File::tensor_index(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? -1 : int64_t(it->second);
}

// Values were bounds-checked by parse(): reading them needs no more checks.
bool File::get_uint(const std::string& key, uint64_t* out) const {
  const KeyValue* kv = find_kv(key);
  if (!kv) return false;
  const uint8_t* p = data_ + kv->offset;
  int64_t s = 0;
  switch (kv->type) {
    case kUint8: *out = p[0]; return true;
    case kUint16: { uint16_t v; std::memcpy(&v, p, 2); *out = v; return true; }
    case kUint32: { uint32_t v; std::memcpy(&v, p, 4); *out = v; return true; }
    case kUint64: { uint64_t v; std::memcpy(&v, p, 8); *out = v; return true; }
    case kInt8: { int8_t v; std::memcpy(&v, p, 1); s = v; break; }
    case kInt16: { int16_t v; std::memcpy(&v, p, 2); s = v; break; }
    case kInt32: { int32_t v; std::memcpy(&v, p, 4); s = v; break; }
    case kInt64: { int64_t v; std::memcpy(&v, p, 8); s = v; break; }
    default:
      fail(QSP_ERR_BAD_FORMAT, "metadata key %s has type %s; expected an integer", printable(key).c_str(),
           value_type_name(kv->type));
  }
  if (s < 0) fail(QSP_ERR_BAD_FORMAT, "metadata key %s = %lld must not be negative", printable(key).c_str(), (long long)s);
  *out = uint64_t(s);
  return true;
}

bool File::get_float(const std::string& key, double* out) const {
  const KeyValue* kv = find_kv(key);
  if (!kv) return false;
  const uint8_t* p = data_ + kv->offset;
  if (kv->type == kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    *out = v;
    return true;
  }
  if (kv->type == kFloat64) {
    std::memcpy(out, p, 8);
    return true;
  }
  if (kv->type == kBool || kv->type == kString || kv->type == kArray)
    fail(QSP_ERR_BAD_FORMAT, "metadata key %s has type %s; expected a number", printable(key).c_str(),
         value_type_name(kv->type));
  uint64_t u = 0;
  get_uint(key, &u);
  *out = double(u);
  return true;
}

bool File::get_string(const std::string& key, std::string* out) const {
  const KeyValue* kv = find_kv(key);
  if (!kv) return false;
  if (kv->type != kString)
    fail(QSP_ERR_BAD_FORMAT, "metadata key %s has type %s; expected a string", printable(key).c_str(),
         value_type_name(kv->type));
  uint64_t len;
  std::memcpy(&len, data_ + kv->offset, 8);
  out->assign(reinterpret_cast<const char*>(data_ + kv->offset + 8), size_t(len));
  return true;
}

bool File::get_array_count(const std::string& key, uint64_t* out) const {
  const KeyValue* kv = find_kv(key);
  if (!kv) return false;
  if (kv->type != kArray)
    fail(QSP_ERR_BAD_FORMAT, "metadata key %s has type %s; expected an array", printable(key).c_str(),
         value_type_name(kv->type));
  *out = kv->array_count;
  return true;
}

bool File::get_bool(const std::string& key, bool* out) const {
  const KeyValue* kv = find_kv(key);
  if (!kv) return false;
  if (kv->type == kBool) {
    *out = data_[kv->offset] != 0;
    return true;
  }
  if (kv->type == kFloat32 || kv->type == kFloat64 || kv->type == kString || kv->type == kArray)
    fail(QSP_ERR_BAD_FORMAT, "metadata key %s has type %s; expected a bool", printable(key).c_str(),
         value_type_name(kv->type));
  uint64_t u = 0;
  get_uint(key, &u);
  *out = u != 0;
  return true;
}

namespace {
// The array key `key` with elements of one of `ok` types (a list ending in
// kValueTypeCount); returns nullptr when absent.
const KeyValue* array_kv(const File& f, const std::string& key, std::initializer_list<uint32_t> ok,
                         const char* expected) {
  const KeyValue* kv = f.find_kv(key);
  if (!kv) return nullptr;
  if (kv->type != kArray)
    fail(QSP_ERR_BAD_FORMAT, "metadata key %s has type %s; expected an array of %s", printable(key).c_str(),
         value_type_name(kv->type), expected);
  for (uint32_t t : ok)
    if (kv->array_type == t) return kv;
  fail(QSP_ERR_BAD_FORMAT, "metadata key %s is an array of %s; expected an array of %s", printable(key).c_str(),
       value_type_name(kv->array_type), expected);
}
}  // namespace

// Array values were bounds-checked by parse() (skip_array): element reads need
// no more checks. Array data starts after the element type (4) and count (8).
bool File::get_string_array(const std::string& key, std::vector<std::string>* out) const {
  const KeyValue* kv = array_kv(*this, key, {kString}, "strings");
  if (!kv) return false;
  out->clear();
  out->reserve(size_t(kv->array_count));
  uint64_t pos = kv->offset + 12;
  for (uint64_t i = 0; i < kv->array_count; ++i) {
    uint64_t len;
    std::memcpy(&len, data_ + pos, 8);
    out->emplace_back(reinterpret_cast<const char*>(data_ + pos + 8), size_t(len));
    pos += 8 + len;
  }
  return true;
}

bool File::get_int_array(const std::string& key, std::vector<int64_t>* out) const {
  const KeyValue* kv =
      array_kv(*this, key, {kUint8, kInt8, kUint16, kInt16, kUint32, kInt32, kUint64, kInt64, kBool}, "integers");
  if (!kv) return false;
  out->clear();
  out->resize(size_t(kv->array_count));
  const uint8_t* p = data_ + kv->offset + 12;
  const uint32_t sz = scalar_size(kv->array_type);
  for (uint64_t i = 0; i < kv->array_count; ++i, p += sz) {
    int64_t v = 0;
    switch (kv->array_type) {
      case kUint8: case kBool: v = p[0]; break;
      case kInt8: { int8_t x; std::memcpy(&x, p, 1); v = x; break; }
      case kUint16: { uint16_t x; std::memcpy(&x, p, 2); v = x; break; }
      case kInt16: { int16_t x; std::memcpy(&x, p, 2); v = x; break; }
      case kUint32: { uint32_t x; std::memcpy(&x, p, 4); v = x; break; }
      case kInt32: { int32_t x; std::memcpy(&x, p, 4); v = x; break; }
      case kInt64: std::memcpy(&v, p, 8); break;
      default: {
        uint64_t x;
        std::memcpy(&x, p, 8);
        if (x > uint64_t(INT64_MAX))
          fail(QSP_ERR_BAD_FORMAT, "metadata key %s: element %llu = %llu does not fit an int64",
               printable(key).c_str(), ull(i), ull(x));
        v = int64_t(x);
      }
    }
    (*out)[size_t(i)] = v;
  }
  return true;
}

bool File::get_float_array(const std::string& key, std::vector<float>* out) const {
  const KeyValue* kv = array_kv(*this, key, {kFloat32, kFloat64}, "floats");
  if (!kv) return false;
  out->clear();
  out->resize(size_t(kv->array_count));
  const uint8_t* p = data_ + kv->offset + 12;
  for (uint64_t i = 0; i < kv->array_count; ++i) {
    if (kv->array_type == kFloat32) {
      std::memcpy(&(*out)[size_t(i)], p + 4 * i, 4);
    } else {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      (*out)[size_t(i)] = float(d);
    }
  }
  return true;
}

bool File::try_uint(const std::string& key, uint64_t* out) const {
  try {
    return get_uint(key, out);
  } catch (const Error&) {
    return false;
  }
}
bool File::try_float(const std::string& key, double* out) const {
  try {
    return get_float(key, out);
  } catch (const Error&) {
    return false;
  }
}
bool File::try_string(const std::string& key, std::string* out) const {
  try {
    return get_string(key, out);
  } catch (const Error&) {
    return false;
  }
}
bool File::try_array_count(const std::string& key, uint64_t* out) const {
  try {
    return get_array_count(key, out);
  } catch (const Error&) {
    return false;
  }
}

}  // namespace gguf
}  // namespace qsp
