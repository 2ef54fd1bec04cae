// Helpers of the GGUF tests (test_gguf*.cpp): files built with the writer
// (a configurable synthetic model, or byte by byte), opening and checking
// them, and reference logits from the C API directly.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/quant.h"
#include "formats/format.h"
#include "gguf/gguf_format.h"
#include "gguf_write/gguf_synth.h"
#include "gguf_write/gguf_writer.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

namespace gguf_test {

using qsp::gguf::SynthPreset;
using qsp::gguf::SynthTensor;
using qsp::gguf::Writer;
using Bytes = std::vector<uint8_t>;

inline const SynthPreset& preset(const char* name) {
  const SynthPreset* p = qsp::gguf::find_synth_preset(name);
  REQUIRE(p != nullptr);
  return *p;
}

// A temporary directory for the test process, removed at exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("qsp_test_gguf_" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};
inline TempDir& tmp() {
  static TempDir d;
  return d;
}

inline void write_bytes(const std::string& path, const Bytes& b) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!b.empty()) REQUIRE(std::fwrite(b.data(), 1, b.size(), f) == b.size());
  REQUIRE(std::fclose(f) == 0);
}

// Opens a buffer; the returned handle owns the qsp_gguf (the buffer must outlive it).
struct Opened {
  qsp_gguf* g = nullptr;
  qsp_status st = QSP_OK;
  std::string msg;
  Opened() = default;
  Opened(const Opened&) = delete;
  ~Opened() { qsp_gguf_close(g); }
};
inline std::unique_ptr<Opened> open_mem(const Bytes& b) {
  std::unique_ptr<Opened> o(new Opened);
  o->st = qsp_gguf_open_memory(b.data(), b.size(), &o->g);
  o->msg = qsp_gguf_last_error();
  if (o->st != QSP_OK) CHECK(o->g == nullptr);
  return o;
}

// Opens and fills params: the status and message of the first failing step.
struct Check {
  qsp_status st;
  std::string msg;
};
inline Check load(const Bytes& b) {
  auto o = open_mem(b);
  if (o->st != QSP_OK) return {o->st, o->msg};
  qsp_context_params p;
  qsp_context_params_init(&p);
  const qsp_status st = qsp_gguf_fill_params(o->g, &p);
  return {st, st == QSP_OK ? "" : qsp_gguf_last_error()};
}

#define CHECK_FAILS(bytes, status, ...)                                            \
  do {                                                                             \
    const Check c_ = load(bytes);                                                  \
    INFO("message: " << c_.msg);                                                   \
    CHECK(c_.st == (status));                                                      \
    for (const char* s_ : {__VA_ARGS__}) CHECK(c_.msg.find(s_) != std::string::npos); \
  } while (0)

// ---- a configurable synthetic model (mirrors synth_writer) ------------------
struct Spec {
  std::string preset = "micro";
  int32_t wtype = QSP_DTYPE_Q4_0;
  uint64_t seed = 1;
  uint32_t version = 3;
  std::string arch;                                      // "" = the preset's
  std::set<std::string> drop_keys, drop_tensors;
  std::map<std::string, int32_t> retype;                 // tensor -> GGML type
  std::map<std::string, std::vector<uint64_t>> reshape;  // tensor -> ne
  std::map<std::string, uint32_t> set_u32;               // extra / replaced keys
  std::vector<std::string> extra_tensors;                // f32 [hidden]
};

inline Bytes build(const Spec& s) {
  const SynthPreset& p = preset(s.preset.c_str());
  const std::string arch = s.arch.empty() ? p.arch : s.arch;
  const std::string a = p.arch + ".";
  Writer w(32, s.version);
  std::map<std::string, uint32_t> u32 = {
      {a + "block_count", p.n_layers},          {a + "context_length", p.context_length},
      {a + "embedding_length", p.hidden},       {a + "feed_forward_length", p.ffn},
      {a + "attention.head_count", p.n_heads},  {a + "attention.head_count_kv", p.n_kv_heads},
      {a + "attention.key_length", p.head_dim}, {a + "vocab_size", p.vocab}};
  for (const auto& kv : s.set_u32) u32[kv.first] = kv.second;
  if (!s.drop_keys.count("general.architecture")) w.add_string("general.architecture", arch);
  w.add_string("general.name", "test");
  w.add_u32("general.alignment", 32);
  for (const auto& kv : u32)
    if (!s.drop_keys.count(kv.first)) w.add_u32(kv.first, kv.second);
  if (!s.drop_keys.count(a + "rope.freq_base")) w.add_f32(a + "rope.freq_base", p.rope_theta);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  w.add_string("tokenizer.ggml.model", "none");

  std::vector<SynthTensor> ts = qsp::gguf::synth_tensors(p, s.wtype, s.seed);
  std::vector<SynthTensor> kept;
  std::vector<bool> synth_data;
  for (SynthTensor t : ts) {
    if (s.drop_tensors.count(t.name)) continue;
    std::vector<uint64_t> ne = t.vector ? std::vector<uint64_t>{t.cols} : std::vector<uint64_t>{t.cols, t.rows};
    bool same = true;
    if (s.retype.count(t.name)) {
      t.type = s.retype.at(t.name);
      same = false;
    }
    if (s.reshape.count(t.name)) {
      ne = s.reshape.at(t.name);
      same = false;
    }
    w.add_tensor(t.name, t.type, ne);
    kept.push_back(t);
    synth_data.push_back(same);
  }
  for (const auto& n : s.extra_tensors) {
    w.add_tensor(n, QSP_DTYPE_F32, {p.hidden});
    kept.push_back(SynthTensor{});
    synth_data.push_back(false);
  }
  return w.write_memory([&](size_t i, uint64_t r0, uint64_t r1, uint8_t* dst) {
    if (synth_data[i])
      qsp::gguf::synth_rows(kept[i], r0, r1, dst);
    else
      std::memset(dst, 0, size_t((r1 - r0) * w.tensors()[i].row_bytes()));
  });
}

// ---- a hand-made file, byte by byte ------------------------------------------
struct Raw {
  Bytes b;
  Raw& u32(uint32_t v) { return put(&v, 4); }
  Raw& u64(uint64_t v) { return put(&v, 8); }
  Raw& put(const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return *this;
  }
  Raw& str(const std::string& s) {
    u64(s.size());
    return put(s.data(), s.size());
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(qsp::gguf::kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  Raw& kv_str(const std::string& k, const std::string& v) { return str(k).u32(8).str(v); }
  Raw& kv_u32(const std::string& k, uint32_t v) { return str(k).u32(4).u32(v); }
  Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Raw& pad(size_t align = 32) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

// One tensor (any name, shape, type, offset) after a minimal header, then data_bytes of zeros.
inline Bytes one_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                 size_t data_bytes) {
  Raw r;
  r.header(1, 1).kv_str("general.architecture", "qwen3").tensor(name, ne, type, offset).pad().zeros(data_bytes);
  return r.b;
}

// ---- the C API directly, for reference logits ----------------------------------
inline std::vector<float> direct_logits(const SynthPreset& p, int32_t wtype, uint64_t seed, const std::vector<int32_t>& tok) {
  qsp_context_params params;
  qsp_context_params_init(&params);
  params.n_layers = p.n_layers;
  params.hidden_size = p.hidden;
  params.intermediate_size = p.ffn;
  params.n_heads = p.n_heads;
  params.n_kv_heads = p.n_kv_heads;
  params.head_dim = p.head_dim;
  params.vocab_size = p.vocab;
  params.max_seq_len = 64;
  params.rms_eps = p.rms_eps;
  params.rope_theta = p.rope_theta;
  const bool qwen3 = p.arch == "qwen3";
  params.rope_style = qwen3 ? QSP_ROPE_NEOX : QSP_ROPE_INTERLEAVED;
  params.qk_norm = qwen3 ? 1 : 0;
  params.backend = QSP_BACKEND_CPU;
  params.n_threads = 2;
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&params, &ctx) == QSP_OK);
  const auto ts = qsp::gguf::synth_tensors(p, wtype, seed);
  std::vector<Bytes> bytes;
  std::vector<qsp_tensor> v;
  uint64_t h = 0xd1ec700000000000ull + (seed << 24) + (uint64_t(wtype) << 16);
  for (const auto& t : ts) {
    bytes.push_back(qsp::gguf::synth_tensor_bytes(t));
    qsp_tensor x{};
    x.handle = ++h;
    x.dtype = t.type;
    x.n_rows = t.rows;
    x.n_cols = t.cols;
    x.data = bytes.back().data();
    x.n_bytes = bytes.back().size();
    v.push_back(x);
  }
  size_t i = 0;
  const qsp_tensor embd = v[i++];
  for (uint32_t l = 0; l < p.n_layers; ++l) {
    qsp_layer_weights w;
    qsp_layer_weights_init(&w);
    w.attn_norm = v[i++];
    w.wq = v[i++];
    w.wk = v[i++];
    w.wv = v[i++];
    if (qwen3) {
      w.q_norm = v[i++];
      w.k_norm = v[i++];
    }
    w.wo = v[i++];
    w.ffn_norm = v[i++];
    w.w_gate = v[i++];
    w.w_up = v[i++];
    w.w_down = v[i++];
    REQUIRE(qsp_upload_layer(ctx, l, &w) == QSP_OK);
  }
  REQUIRE(qsp_upload_embedding(ctx, &embd) == QSP_OK);
  qsp_output_weights o;
  qsp_output_weights_init(&o);
  o.norm = v[i++];
  o.lm_head = p.tied ? embd : v[i++];
  REQUIRE(qsp_upload_output(ctx, &o) == QSP_OK);
  REQUIRE(qsp_prefill(ctx, tok.data(), uint32_t(tok.size())) == QSP_OK);
  std::vector<float> out(p.vocab);
  REQUIRE(qsp_copy_logits(ctx, out.data(), out.size()) == QSP_OK);
  qsp_context_destroy(ctx);
  return out;
}

// A CPU context for an open file, with its weights uploaded.
inline qsp_context* gguf_context(const qsp_gguf* g, uint32_t max_seq = 64) {
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.backend = QSP_BACKEND_CPU;
  p.n_threads = 2;
  p.max_seq_len = max_seq;
  REQUIRE(qsp_gguf_fill_params(g, &p) == QSP_OK);
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  const qsp_status st = qsp_gguf_upload(g, ctx, nullptr, nullptr);
  INFO(qsp_gguf_last_error());
  REQUIRE(st == QSP_OK);
  return ctx;
}

inline std::vector<float> gguf_logits(const qsp_gguf* g, const std::vector<int32_t>& tok) {
  qsp_context* ctx = gguf_context(g);
  REQUIRE(qsp_prefill(ctx, tok.data(), uint32_t(tok.size())) == QSP_OK);
  const float* l = nullptr;
  uint32_t n = 0;
  REQUIRE(qsp_get_logits(ctx, &l, &n) == QSP_OK);
  std::vector<float> out(l, l + n);
  qsp_context_destroy(ctx);
  return out;
}

inline uint64_t cpu_uploads() {
  qsp_cache_stats s;
  qsp_cache_stats_init(&s);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &s) == QSP_OK);
  return s.n_uploads;
}

// A quantized GGML type the reader knows and qsp does not compute (no record
// in the format registry), whose block divides `cols`: what a model qsp
// cannot run carries, whatever formats the registry holds today.
inline int32_t uncomputable_type(uint64_t cols) {
  for (int32_t t = 0; t < qsp::gguf::kTypeCount; ++t) {
    const qsp::gguf::TypeTraits& tt = qsp::gguf::type_traits(t);
    if (tt.name && tt.block_size > 1 && cols % tt.block_size == 0 && !qsp::fmt::find(t)) return t;
  }
  FAIL("every GGML type is computable");
  return -1;
}

inline const std::vector<int32_t> kPrompt = {1, 7, 42, 3, 1000, 5, 9, 11, 2047, 0, 64, 128, 256, 17, 33, 99};
inline const std::vector<int32_t> kMicroPrompt = {1, 7, 42, 3, 63, 5, 9, 11};

}  // namespace gguf_test

