// The C boundary of the GGUF loader (include/qsp/qsp_gguf.h). It maps files,
// runs the parser inside one guard per call (qsp::run_guarded) and turns
// every exception into a status plus a thread-local message. Contexts are
// created and weights uploaded through the public C API only (qsp.h), slot by
// slot from the engine's table (engine/slots.h), so this file is also the
// reference example of driving that API with real model files.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "common/error.h"
#include "engine/slots.h"
#include "gguf/gguf_api_internal.h"
#include "gguf/gguf_format.h"
#include "gguf/gguf_reader.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

using qsp::Error;
using qsp::gguf::File;
using qsp::gguf::TensorInfo;

struct qsp_gguf {
  std::unique_ptr<File> file;
  void* map = nullptr;  // owned mapping (files); nullptr for borrowed buffers
  size_t map_size = 0;

  qsp_gguf() = default;
  qsp_gguf(const qsp_gguf&) = delete;
  qsp_gguf& operator=(const qsp_gguf&) = delete;
  ~qsp_gguf() {
    if (map) munmap(map, map_size);
  }
};

namespace {

constexpr uint32_t kDefaultMaxSeq = 8192;

thread_local std::string t_last_error;

qsp_status set_error(qsp_status st, const char* msg) {
  try {
    t_last_error = msg;
  } catch (...) {
  }
  return st;
}

// Runs f(); a failure's message becomes this thread's qsp_gguf_last_error().
template <class F>
qsp_status guarded(F&& f) {
  std::string msg;
  const qsp_status st = qsp::run_guarded(std::forward<F>(f), &msg);
  return st == QSP_OK ? st : set_error(st, msg.c_str());
}

#define GGUF_CHECK_PTR(p) \
  do {                    \
    if ((p) == nullptr) return set_error(QSP_ERR_INVALID_ARGUMENT, #p " is NULL"); \
  } while (0)

#define GGUF_CHECK_SIZE(p, type)                                                                              \
  do {                                                                                                        \
    if ((p)->struct_size < sizeof(type) || (p)->struct_size > (1u << 16)) {                                   \
      char m_[160];                                                                                           \
      std::snprintf(m_, sizeof m_, #type ".struct_size is %u; expected %zu (use " #type "_init)",             \
                    (p)->struct_size, sizeof(type));                                                          \
      return set_error(QSP_ERR_STRUCT_SIZE, m_);                                                              \
    }                                                                                                         \
  } while (0)

// strerror_r comes in a GNU and an XSI flavour; both overloads are handled.
[[maybe_unused]] inline const char* strerror_pick(int, const char* buf) { return buf; }  // XSI: int return
[[maybe_unused]] inline const char* strerror_pick(const char* s, const char*) { return s; }  // GNU: char* return
std::string errno_string(int e) {
  char buf[256] = {0};
  return strerror_pick(strerror_r(e, buf, sizeof buf), buf);
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

qsp_tensor view(const qsp_gguf* g, const TensorInfo& t) {
  qsp_tensor x;
  std::memset(&x, 0, sizeof x);
  x.handle = t.handle;
  x.dtype = t.type;
  x.n_rows = t.rows();
  x.n_cols = t.cols();
  x.data = g->file->bytes() + t.offset;
  x.n_bytes = t.n_bytes;
  return x;
}

// Asks the OS to read a range of the mapping ahead (files only).
void prefetch(const qsp_gguf* g, uint64_t begin, uint64_t end) {
  if (!g->map || begin >= end) return;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096);
  const uint64_t b = begin / page * page;
  madvise(static_cast<char*>(g->map) + b, size_t(end - b), MADV_WILLNEED);
}

qsp_status open_file(const char* path, qsp_gguf** out) {
  *out = nullptr;
  std::unique_ptr<qsp_gguf> g;
  std::string prefix;
  qsp_status st = guarded([&] {
    prefix = std::string(path) + ": ";
    g.reset(new qsp_gguf);
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(QSP_ERR_IO, "cannot open " + std::string(path) + ": " + errno_string(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
      const int e = errno;
      ::close(fd);
      throw Error(QSP_ERR_IO, "cannot stat " + std::string(path) + ": " + errno_string(e));
    }
    if (!S_ISREG(sb.st_mode)) {
      ::close(fd);
      throw Error(QSP_ERR_IO, std::string(path) + (S_ISDIR(sb.st_mode) ? " is a directory" : " is not a regular file"));
    }
    const uint64_t size = uint64_t(sb.st_size);
    if (size > uint64_t(SIZE_MAX)) {
      ::close(fd);
      throw Error(QSP_ERR_IO, std::string(path) + " is too large to map on this platform");
    }
    if (size > 0) {
      void* m = mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
      const int e = errno;
      ::close(fd);
      if (m == MAP_FAILED) throw Error(QSP_ERR_IO, "cannot map " + std::string(path) + ": " + errno_string(e));
      g->map = m;
      g->map_size = size_t(size);
    } else {
      ::close(fd);
    }
    const uint64_t id = qsp::gguf::file_identity(uint64_t(sb.st_dev), uint64_t(sb.st_ino), size,
                                                 int64_t(sb.st_mtim.tv_sec), int64_t(sb.st_mtim.tv_nsec));
    try {
      g->file = File::parse(static_cast<const uint8_t*>(g->map), size, id);
    } catch (const Error& e) {
      throw Error(e.status(), prefix + e.what());
    }
  });
  if (st == QSP_OK) *out = g.release();
  return st;
}

}  // namespace

const File* qsp::gguf::file_of(const qsp_gguf* g) { return g->file.get(); }
qsp_status qsp::gguf::set_last_error(qsp_status st, const char* msg) { return set_error(st, msg); }

extern "C" {

const char* qsp_gguf_last_error(void) { return t_last_error.c_str(); }

qsp_status qsp_gguf_open(const char* path, qsp_gguf** out) {
  if (out) *out = nullptr;
  GGUF_CHECK_PTR(out);
  GGUF_CHECK_PTR(path);
  return open_file(path, out);
}

qsp_status qsp_gguf_open_memory(const void* data, uint64_t size, qsp_gguf** out) {
  if (out) *out = nullptr;
  GGUF_CHECK_PTR(out);
  if (data == nullptr && size > 0) return set_error(QSP_ERR_INVALID_ARGUMENT, "data is NULL");
  std::unique_ptr<qsp_gguf> g;
  qsp_status st = guarded([&] {
    g.reset(new qsp_gguf);
    const uint8_t* p = static_cast<const uint8_t*>(data);
    g->file = File::parse(p, size, size ? qsp::gguf::content_identity(p, size) : 0);
  });
  if (st == QSP_OK) *out = g.release();
  return st;
}

void qsp_gguf_close(qsp_gguf* g) { delete g; }

void qsp_gguf_info_init(qsp_gguf_info* info) {
  if (!info) return;
  std::memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

qsp_status qsp_gguf_get_info(const qsp_gguf* g, qsp_gguf_info* info) {
  GGUF_CHECK_PTR(g);
  GGUF_CHECK_PTR(info);
  GGUF_CHECK_SIZE(info, qsp_gguf_info);
  return guarded([&] {
    const File& f = *g->file;
    const qsp::gguf::Hyper h = qsp::gguf::read_hyper(f);
    qsp_gguf_info r;
    qsp_gguf_info_init(&r);
    r.version = f.version();
    r.file_size = f.size();
    r.tensor_count = f.tensors().size();
    r.kv_count = f.kvs().size();
    r.data_offset = f.data_offset();
    for (const TensorInfo& t : f.tensors()) r.weight_bytes += t.n_bytes;
    r.alignment = f.alignment();
    r.known_architecture = h.known_arch ? 1 : 0;
    copy_str(r.architecture, sizeof r.architecture, h.arch);
    std::string name;
    f.try_string("general.name", &name);
    copy_str(r.name, sizeof r.name, name);
    r.n_layers = h.n_layers;
    r.hidden_size = h.hidden;
    r.intermediate_size = h.ffn;
    r.n_heads = h.n_heads;
    r.n_kv_heads = h.n_kv_heads;
    r.head_dim = h.head_dim;
    r.vocab_size = h.vocab;
    r.context_length = h.context_length;
    r.rms_eps = h.rms_eps;
    r.rope_theta = h.rope_theta;
    r.rope_style = h.rope_style;
    r.qk_norm = h.qk_norm;
    r.tied_embeddings = h.tied ? 1 : 0;
    uint64_t ft = 0;
    r.file_type = f.try_uint("general.file_type", &ft) && ft <= INT32_MAX ? int32_t(ft) : -1;
    *info = r;
  });
}

uint64_t qsp_gguf_tensor_count(const qsp_gguf* g) { return g ? g->file->tensors().size() : 0; }

void qsp_gguf_tensor_desc_init(qsp_gguf_tensor_desc* d) {
  if (!d) return;
  std::memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
}

qsp_status qsp_gguf_tensor_info(const qsp_gguf* g, uint64_t index, qsp_gguf_tensor_desc* desc) {
  GGUF_CHECK_PTR(g);
  GGUF_CHECK_PTR(desc);
  GGUF_CHECK_SIZE(desc, qsp_gguf_tensor_desc);
  const auto& ts = g->file->tensors();
  if (index >= ts.size()) {
    char m[128];
    std::snprintf(m, sizeof m, "tensor index %llu out of range (the file has %llu tensors)",
                  (unsigned long long)index, (unsigned long long)ts.size());
    return set_error(QSP_ERR_OUT_OF_RANGE, m);
  }
  const TensorInfo& t = ts[size_t(index)];
  qsp_gguf_tensor_desc d;
  qsp_gguf_tensor_desc_init(&d);
  d.type = t.type;
  d.n_dims = t.n_dims;
  d.name = t.name.c_str();
  d.type_name = qsp_gguf_type_name(t.type);
  for (int i = 0; i < 4; ++i) d.ne[i] = t.ne[i];
  d.n_rows = t.rows();
  d.n_cols = t.cols();
  d.offset = t.offset;
  d.n_bytes = t.n_bytes;
  d.handle = t.handle;
  d.data = g->file->bytes() ? g->file->bytes() + t.offset : nullptr;
  *desc = d;
  return QSP_OK;
}

qsp_status qsp_gguf_find_tensor(const qsp_gguf* g, const char* name, uint64_t* index) {
  GGUF_CHECK_PTR(g);
  GGUF_CHECK_PTR(name);
  GGUF_CHECK_PTR(index);
  int64_t i = -1;
  qsp_status st = guarded([&] { i = g->file->tensor_index(name); });
  if (st != QSP_OK) return st;
  if (i < 0) {
    std::string m = "no tensor named ";
    m += name;
    return set_error(QSP_ERR_OUT_OF_RANGE, m.c_str());
  }
  *index = uint64_t(i);
  return QSP_OK;
}

const char* qsp_gguf_type_name(int32_t type) {
  const char* n = qsp::gguf::type_traits(type).name;
  return n ? n : "unknown";
}

qsp_status qsp_gguf_fill_params(const qsp_gguf* g, qsp_context_params* params) {
  GGUF_CHECK_PTR(g);
  GGUF_CHECK_PTR(params);
  GGUF_CHECK_SIZE(params, qsp_context_params);
  return guarded([&] {
    const qsp::gguf::Model m = qsp::gguf::resolve_model(*g->file);
    const qsp::gguf::Hyper& h = m.h;
    params->n_layers = h.n_layers;
    params->hidden_size = h.hidden;
    params->intermediate_size = h.ffn;
    params->n_heads = h.n_heads;
    params->n_kv_heads = h.n_kv_heads;
    params->head_dim = h.head_dim;
    params->vocab_size = h.vocab;
    const uint32_t want = params->max_seq_len;
    params->max_seq_len = want ? std::min(want, h.context_length) : std::min(h.context_length, kDefaultMaxSeq);
    params->rms_eps = h.rms_eps;
    params->rope_theta = h.rope_theta;
    params->rope_style = h.rope_style;
    params->qk_norm = h.qk_norm;
  });
}

qsp_status qsp_gguf_upload(const qsp_gguf* g, qsp_context* ctx, qsp_gguf_progress_callback progress,
                           void* user_data) {
  GGUF_CHECK_PTR(g);
  GGUF_CHECK_PTR(ctx);
  return guarded([&] {
    const File& f = *g->file;
    const qsp::gguf::Model m = qsp::gguf::resolve_model(f);
    const auto& ts = f.tensors();
    auto T = [&](int64_t i) -> const TensorInfo& { return ts[size_t(i)]; };

    using qsp::kLayerSlotCount;
    using qsp::kLayerSlots;
    using qsp::kModelSlots;
    const int64_t embd = m.model[qsp::kTokenEmbd], norm = m.model[qsp::kOutputNorm], head = m.model[qsp::kLmHead];
    const bool tied = head == embd;

    uint64_t total = T(embd).n_bytes + T(norm).n_bytes + (tied ? 0 : T(head).n_bytes);
    for (const auto& L : m.layers)
      for (int64_t i : L)
        if (i >= 0) total += T(i).n_bytes;
    uint64_t done = 0;
    auto check = [&](qsp_status st, const std::string& what) {
      if (st != QSP_OK) throw Error(st, what + ": " + qsp_context_last_error(ctx));
    };

    for (uint32_t l = 0; l < m.layers.size(); ++l) {
      const auto& L = m.layers[l];
      uint64_t lo = UINT64_MAX, hi = 0, bytes = 0;
      for (int64_t i : L)
        if (i >= 0) {
          lo = std::min(lo, T(i).offset);
          hi = std::max(hi, T(i).offset + T(i).n_bytes);
          bytes += T(i).n_bytes;
        }
      prefetch(g, lo, hi);
      qsp_layer_weights w;
      qsp_layer_weights_init(&w);
      for (int s = 0; s < kLayerSlotCount; ++s)
        if (L[size_t(s)] >= 0) qsp::api_tensor(w, kLayerSlots[s]) = view(g, T(L[size_t(s)]));
      check(qsp_upload_layer(ctx, l, &w), "uploading blk." + std::to_string(l));
      done += bytes;
      if (progress) progress(done, total, user_data);
    }

    const TensorInfo& e = T(embd);
    prefetch(g, e.offset, e.offset + e.n_bytes);
    const qsp_tensor embd_view = view(g, e);
    check(qsp_upload_embedding(ctx, &embd_view), "uploading " + e.name);
    done += e.n_bytes;
    if (progress) progress(done, total, user_data);

    qsp_output_weights o;
    qsp_output_weights_init(&o);
    qsp::api_tensor(o, kModelSlots[qsp::kOutputNorm]) = view(g, T(norm));
    qsp::api_tensor(o, kModelSlots[qsp::kLmHead]) = view(g, T(head));  // tied: the embedding itself, same handle
    if (!tied) prefetch(g, T(head).offset, T(head).offset + T(head).n_bytes);
    check(qsp_upload_output(ctx, &o), tied ? "uploading " + T(norm).name + " (LM head tied to " + e.name + ")"
                                           : "uploading " + T(norm).name + " / " + T(head).name);
    done = total;
    if (progress) progress(done, total, user_data);
  });
}

qsp_status qsp_context_create_from_gguf(const char* path, const qsp_context_params* exec, qsp_context** out) {
  if (out) *out = nullptr;
  GGUF_CHECK_PTR(out);
  GGUF_CHECK_PTR(path);
  qsp_context_params p;
  qsp_context_params_init(&p);
  if (exec) {
    GGUF_CHECK_SIZE(exec, qsp_context_params);
    std::memcpy(&p, exec, sizeof p);
    p.struct_size = sizeof p;
  }
  qsp_gguf* g = nullptr;
  qsp_status st = qsp_gguf_open(path, &g);
  if (st != QSP_OK) return st;
  std::unique_ptr<qsp_gguf> hold(g);
  st = qsp_gguf_fill_params(g, &p);
  if (st != QSP_OK) {
    std::string m = std::string(path) + ": " + t_last_error;
    return set_error(st, m.c_str());
  }
  qsp_context* ctx = nullptr;
  st = qsp_context_create(&p, &ctx);
  if (st != QSP_OK) {
    std::string m = std::string(path) + ": creating the context: " + qsp_last_error();
    return set_error(st, m.c_str());
  }
  st = qsp_gguf_upload(g, ctx, nullptr, nullptr);
  if (st != QSP_OK) {
    qsp_context_destroy(ctx);
    std::string m = std::string(path) + ": " + t_last_error;
    return set_error(st, m.c_str());
  }
  *out = ctx;
  return QSP_OK;
}

}  // extern "C"
