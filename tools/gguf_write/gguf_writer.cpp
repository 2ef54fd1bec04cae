#include "gguf_write/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "gguf/gguf_format.h"

namespace qsp {
namespace gguf {

namespace {

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const size_t n = b.size();
  b.resize(n + sizeof v);
  std::memcpy(b.data() + n, &v, sizeof v);  // little-endian hosts only (as the reader)
}

void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

uint64_t pad_to(uint64_t n, uint64_t a) { return (a - n % a) % a; }

}  // namespace

uint64_t Writer::Tensor::rows() const {
  uint64_t r = 1;
  for (size_t i = 1; i < ne.size(); ++i) r *= ne[i];
  return r;
}

void Writer::key(const std::string& k, uint32_t type) {
  put_str(kv_, k);
  put<uint32_t>(kv_, type);
  ++n_kv_;
}

void Writer::add_u32(const std::string& k, uint32_t v) { key(k, kUint32); put(kv_, v); }
void Writer::add_i32(const std::string& k, int32_t v) { key(k, kInt32); put(kv_, v); }
void Writer::add_u64(const std::string& k, uint64_t v) { key(k, kUint64); put(kv_, v); }
void Writer::add_f32(const std::string& k, float v) { key(k, kFloat32); put(kv_, v); }
void Writer::add_bool(const std::string& k, bool v) { key(k, kBool); put<uint8_t>(kv_, v ? 1 : 0); }
void Writer::add_string(const std::string& k, const std::string& v) { key(k, kString); put_str(kv_, v); }

void Writer::add_string_array(const std::string& k, const std::vector<std::string>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kString);
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_str(kv_, s);
}

void Writer::add_f32_array(const std::string& k, const std::vector<float>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kFloat32);
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}

void Writer::add_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kInt32);
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}

void Writer::add_raw(const std::string& k, uint32_t type, const std::vector<uint8_t>& value) {
  key(k, type);
  kv_.insert(kv_.end(), value.begin(), value.end());
}

size_t Writer::add_tensor(const std::string& name, int32_t type, const std::vector<uint64_t>& ne) {
  Tensor t;
  t.name = name;
  t.type = type;
  t.ne = ne;
  const uint64_t n0 = ne.empty() ? 1 : ne[0];
  const TypeTraits& tt = type_traits(type);
  if (!tt.name)
    throw std::invalid_argument("gguf writer: tensor " + name + ": unknown GGML type id " + std::to_string(type));
  const uint64_t row = row_bytes(type, n0);
  if (row == 0)
    throw std::invalid_argument("gguf writer: tensor " + name + ": ne[0] = " + std::to_string(n0) +
                                " is not a multiple of the " + tt.name + " block (" + std::to_string(tt.block_size) +
                                " elements)");
  t.n_bytes = row * t.rows();
  t.offset = data_size_;
  data_size_ += t.n_bytes + pad_to(t.n_bytes, alignment_);
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

std::vector<uint8_t> Writer::header() const {
  std::vector<uint8_t> b;
  put<uint32_t>(b, kMagic);
  put<uint32_t>(b, version_);
  put<uint64_t>(b, tensors_.size());
  put<uint64_t>(b, n_kv_);
  b.insert(b.end(), kv_.begin(), kv_.end());
  for (const Tensor& t : tensors_) {
    put_str(b, t.name);
    put<uint32_t>(b, uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(b, d);
    put<uint32_t>(b, uint32_t(t.type));
    put<uint64_t>(b, t.offset);
  }
  b.resize(b.size() + pad_to(b.size(), alignment_), 0);
  return b;
}

void Writer::stream(const RowFill& fill, int n_threads, uint64_t chunk_bytes,
                    const std::function<void(const uint8_t*, size_t)>& sink, const Progress& progress) const {
  n_threads = std::max(1, n_threads);
  const std::vector<uint8_t> head = header();
  sink(head.data(), head.size());
  const uint64_t total = head.size() + data_size_;
  uint64_t done = head.size();
  if (progress) progress(done, total);

  // Double buffering: one block is written (on a helper thread) while the
  // next is generated.
  std::vector<uint8_t> buf[2];
  int cur = 0;
  std::future<void> pending;
  auto emit = [&](std::vector<uint8_t>& b, size_t n) {
    if (pending.valid()) pending.get();
    pending = std::async(std::launch::async, [&sink, &b, n] { sink(b.data(), n); });
  };
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    const uint64_t rb = t.row_bytes(), rows = t.rows();
    const uint64_t per_chunk = std::max<uint64_t>(1, chunk_bytes / std::max<uint64_t>(1, rb));
    for (uint64_t r0 = 0; r0 < rows; r0 += per_chunk) {
      const uint64_t r1 = std::min(rows, r0 + per_chunk);
      const bool last = r1 == rows;
      const uint64_t pad = last ? pad_to(t.n_bytes, alignment_) : 0;
      const size_t n = size_t((r1 - r0) * rb + pad);
      std::vector<uint8_t>& b = buf[cur];
      // b is free: emit() waited for the write of the block before last.
      b.resize(n);
      std::fill(b.end() - ptrdiff_t(pad), b.end(), uint8_t(0));
      const uint64_t nr = r1 - r0;
      const int nt = int(std::min<uint64_t>(uint64_t(n_threads), nr));
      if (nt <= 1) {
        fill(i, r0, r1, b.data());
      } else {
        std::vector<std::thread> th;
        std::exception_ptr err;
        std::mutex mu;
        for (int k = 0; k < nt; ++k) {
          const uint64_t a = r0 + nr * uint64_t(k) / uint64_t(nt), z = r0 + nr * uint64_t(k + 1) / uint64_t(nt);
          th.emplace_back([&, a, z] {
            try {
              fill(i, a, z, b.data() + (a - r0) * rb);
            } catch (...) {
              std::lock_guard<std::mutex> l(mu);
              err = std::current_exception();
            }
          });
        }
        for (auto& x : th) x.join();
        if (err) std::rethrow_exception(err);
      }
      emit(b, n);
      cur ^= 1;
      done += n;
      if (progress) progress(done, total);
    }
  }
  if (pending.valid()) pending.get();
}

void Writer::write_file(const std::string& path, const RowFill& fill, int n_threads, const Progress& progress,
                        uint64_t chunk_bytes) const {
  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
  bool ok = true;
  int err = 0;
  try {
    stream(fill, n_threads, chunk_bytes,
           [&](const uint8_t* p, size_t n) {
             if (ok && n && std::fwrite(p, 1, n, f) != n) {
               ok = false;
               err = errno;
             }
           },
           progress);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
}

std::vector<uint8_t> Writer::write_memory(const RowFill& fill, int n_threads) const {
  std::vector<uint8_t> out;
  out.reserve(size_t(file_size()));
  std::mutex mu;
  stream(fill, n_threads, 16ull << 20,
         [&](const uint8_t* p, size_t n) {
           std::lock_guard<std::mutex> l(mu);
           out.insert(out.end(), p, p + n);
         },
         nullptr);
  return out;
}

}  // namespace gguf
}  // namespace qsp
