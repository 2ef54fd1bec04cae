// The GGUF loader: round trips through the writer `qsp synth` uses, the
// model a file describes (hyperparameters, tensors, handles, tied
// embeddings, the weight cache), and every kind of broken file — each must
// give its documented status and a message naming the problem, never a crash.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/quant.h"
#include "gguf/gguf_format.h"
#include "gguf/gguf_synth.h"
#include "gguf/gguf_writer.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

namespace {

using qsp::gguf::SynthPreset;
using qsp::gguf::SynthTensor;
using qsp::gguf::Writer;
using Bytes = std::vector<uint8_t>;

const SynthPreset& preset(const char* name) {
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
TempDir& tmp() {
  static TempDir d;
  return d;
}

void write_bytes(const std::string& path, const Bytes& b) {
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
std::unique_ptr<Opened> open_mem(const Bytes& b) {
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
Check load(const Bytes& b) {
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

Bytes build(const Spec& s) {
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
Bytes one_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                 size_t data_bytes) {
  Raw r;
  r.header(1, 1).kv_str("general.architecture", "qwen3").tensor(name, ne, type, offset).pad().zeros(data_bytes);
  return r.b;
}

// ---- the C API directly, for reference logits ----------------------------------
std::vector<float> direct_logits(const SynthPreset& p, int32_t wtype, uint64_t seed, const std::vector<int32_t>& tok) {
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
qsp_context* gguf_context(const qsp_gguf* g, uint32_t max_seq = 64) {
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

std::vector<float> gguf_logits(const qsp_gguf* g, const std::vector<int32_t>& tok) {
  qsp_context* ctx = gguf_context(g);
  REQUIRE(qsp_prefill(ctx, tok.data(), uint32_t(tok.size())) == QSP_OK);
  const float* l = nullptr;
  uint32_t n = 0;
  REQUIRE(qsp_get_logits(ctx, &l, &n) == QSP_OK);
  std::vector<float> out(l, l + n);
  qsp_context_destroy(ctx);
  return out;
}

uint64_t cpu_uploads() {
  qsp_cache_stats s;
  qsp_cache_stats_init(&s);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &s) == QSP_OK);
  return s.n_uploads;
}

const std::vector<int32_t> kPrompt = {1, 7, 42, 3, 1000, 5, 9, 11, 2047, 0, 64, 128, 256, 17, 33, 99};
const std::vector<int32_t> kMicroPrompt = {1, 7, 42, 3, 63, 5, 9, 11};

}  // namespace

// =============================================================================
TEST_CASE("gguf: a synthesized tiny model round-trips through memory", "[gguf]") {
  const SynthPreset& p = preset("tiny");
  const Bytes file = qsp::gguf::synth_memory(p, QSP_DTYPE_Q4_0, 1, 2);
  auto o = open_mem(file);
  REQUIRE(o->st == QSP_OK);

  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  REQUIRE(qsp_gguf_get_info(o->g, &info) == QSP_OK);
  CHECK(info.version == 3);
  CHECK(info.file_size == file.size());
  CHECK(std::string(info.architecture) == "qwen3");
  CHECK(info.known_architecture == 1);
  CHECK(std::string(info.name) == "qsp synth tiny (q4_0, seed 1)");
  CHECK(info.alignment == 32);
  CHECK(info.n_layers == p.n_layers);
  CHECK(info.hidden_size == p.hidden);
  CHECK(info.intermediate_size == p.ffn);
  CHECK(info.n_heads == p.n_heads);
  CHECK(info.n_kv_heads == p.n_kv_heads);
  CHECK(info.head_dim == p.head_dim);
  CHECK(info.vocab_size == p.vocab);
  CHECK(info.context_length == p.context_length);
  CHECK(info.rope_theta == p.rope_theta);
  CHECK(info.rms_eps == p.rms_eps);
  CHECK(info.rope_style == QSP_ROPE_NEOX);
  CHECK(info.qk_norm == 1);
  CHECK(info.tied_embeddings == 0);
  CHECK(info.file_type == 2);  // LLAMA_FTYPE_MOSTLY_Q4_0
  CHECK(info.data_offset % 32 == 0);

  // Every tensor: name, type, shape, data identical to the generator's.
  const auto ts = qsp::gguf::synth_tensors(p, QSP_DTYPE_Q4_0, 1);
  REQUIRE(qsp_gguf_tensor_count(o->g) == ts.size());
  REQUIRE(info.tensor_count == ts.size());
  uint64_t total = 0;
  std::set<uint64_t> handles;
  for (size_t i = 0; i < ts.size(); ++i) {
    qsp_gguf_tensor_desc d;
    qsp_gguf_tensor_desc_init(&d);
    REQUIRE(qsp_gguf_tensor_info(o->g, i, &d) == QSP_OK);
    CHECK(std::string(d.name) == ts[i].name);
    CHECK(d.type == ts[i].type);
    CHECK(std::string(d.type_name) == qsp_dtype_name(ts[i].type));
    CHECK(d.n_dims == (ts[i].vector ? 1u : 2u));
    CHECK(d.n_cols == ts[i].cols);
    CHECK(d.n_rows == ts[i].rows);
    CHECK(d.ne[0] == ts[i].cols);
    CHECK(d.offset % 32 == 0);
    CHECK(d.offset >= info.data_offset);
    const Bytes want = qsp::gguf::synth_tensor_bytes(ts[i]);
    REQUIRE(d.n_bytes == want.size());
    CHECK(d.n_bytes == qsp_dtype_size(d.type, d.n_rows, d.n_cols));
    CHECK(std::memcmp(d.data, want.data(), want.size()) == 0);
    CHECK(d.data == file.data() + d.offset);
    CHECK(d.handle != 0);
    handles.insert(d.handle);
    total += d.n_bytes;
    uint64_t idx = 99;
    REQUIRE(qsp_gguf_find_tensor(o->g, d.name, &idx) == QSP_OK);
    CHECK(idx == i);
  }
  CHECK(handles.size() == ts.size());
  CHECK(info.weight_bytes == total);

  // The model shape, into caller-initialized params.
  qsp_context_params params;
  qsp_context_params_init(&params);
  params.backend = QSP_BACKEND_CPU;
  params.n_threads = 3;
  params.device_index = 0;
  REQUIRE(qsp_gguf_fill_params(o->g, &params) == QSP_OK);
  CHECK(params.n_layers == p.n_layers);
  CHECK(params.hidden_size == p.hidden);
  CHECK(params.intermediate_size == p.ffn);
  CHECK(params.n_heads == p.n_heads);
  CHECK(params.n_kv_heads == p.n_kv_heads);
  CHECK(params.head_dim == p.head_dim);
  CHECK(params.vocab_size == p.vocab);
  CHECK(params.max_seq_len == p.context_length);  // 4096 < the 8192 default cap
  CHECK(params.rope_style == QSP_ROPE_NEOX);
  CHECK(params.qk_norm == 1);
  CHECK(params.backend == QSP_BACKEND_CPU);
  CHECK(params.n_threads == 3);

  // The same logits as uploading the generator's tensors directly.
  const std::vector<float> a = gguf_logits(o->g, kPrompt);
  const std::vector<float> b = direct_logits(p, QSP_DTYPE_Q4_0, 1, kPrompt);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("gguf: a llama q8_0 file on disk round-trips", "[gguf]") {
  const SynthPreset& p = preset("tiny-llama");
  const std::string path = tmp().file("tiny-llama-q8.gguf");
  qsp::gguf::synth_file(path, p, QSP_DTYPE_Q8_0, 7, 2);
  qsp_gguf* g = nullptr;
  REQUIRE(qsp_gguf_open(path.c_str(), &g) == QSP_OK);
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  REQUIRE(qsp_gguf_get_info(g, &info) == QSP_OK);
  CHECK(std::string(info.architecture) == "llama");
  CHECK(info.rope_style == QSP_ROPE_INTERLEAVED);
  CHECK(info.qk_norm == 0);
  CHECK(info.rope_theta == 5e5f);
  CHECK(info.file_size == std::filesystem::file_size(path));
  qsp_context_params params;
  qsp_context_params_init(&params);
  REQUIRE(qsp_gguf_fill_params(g, &params) == QSP_OK);
  CHECK(params.rope_style == QSP_ROPE_INTERLEAVED);
  CHECK(params.qk_norm == 0);
  CHECK(params.rms_eps == 1e-5f);
  const std::vector<float> a = gguf_logits(g, kPrompt);
  const std::vector<float> b = direct_logits(p, QSP_DTYPE_Q8_0, 7, kPrompt);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  qsp_gguf_close(g);
}

TEST_CASE("gguf: f32 f16 bf16 weights and GGUF v2", "[gguf]") {
  const SynthPreset& p = preset("micro");
  for (int32_t t : {QSP_DTYPE_F32, QSP_DTYPE_F16, QSP_DTYPE_BF16}) {
    INFO(qsp_dtype_name(t));
    const Bytes f = qsp::gguf::synth_memory(p, t, 3);
    auto o = open_mem(f);
    REQUIRE(o->st == QSP_OK);
    const std::vector<float> a = gguf_logits(o->g, kMicroPrompt);
    const std::vector<float> b = direct_logits(p, t, 3, kMicroPrompt);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  Spec s;
  s.version = 2;
  const Bytes v2 = build(s);
  auto o = open_mem(v2);
  REQUIRE(o->st == QSP_OK);
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  REQUIRE(qsp_gguf_get_info(o->g, &info) == QSP_OK);
  CHECK(info.version == 2);
  CHECK(load(v2).st == QSP_OK);
}

TEST_CASE("gguf: tied embeddings are stored once and a second context uploads nothing", "[gguf]") {
  const SynthPreset& p = preset("micro");  // tied, 13 tensors
  REQUIRE(p.tied);
  const std::string path = tmp().file("micro-tied.gguf");
  qsp::gguf::synth_file(path, p, QSP_DTYPE_Q4_0, 11, 1);
  qsp_gguf* g = nullptr;
  REQUIRE(qsp_gguf_open(path.c_str(), &g) == QSP_OK);
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  REQUIRE(qsp_gguf_get_info(g, &info) == QSP_OK);
  CHECK(info.tied_embeddings == 1);
  REQUIRE(qsp_gguf_tensor_count(g) == 13);
  uint64_t idx = 0;
  CHECK(qsp_gguf_find_tensor(g, "output.weight", &idx) == QSP_ERR_OUT_OF_RANGE);

  const uint64_t u0 = cpu_uploads();
  qsp_context* a = gguf_context(g);
  CHECK(cpu_uploads() - u0 == 13);  // the LM head is the embedding: not a 14th tensor
  qsp_context* b = gguf_context(g);
  CHECK(cpu_uploads() - u0 == 13);  // shared through the handles

  // A second open of the same file derives the same handles.
  qsp_gguf* g2 = nullptr;
  REQUIRE(qsp_gguf_open(path.c_str(), &g2) == QSP_OK);
  qsp_context* c = gguf_context(g2);
  CHECK(cpu_uploads() - u0 == 13);
  for (uint64_t i = 0; i < 13; ++i) {
    qsp_gguf_tensor_desc d1, d2;
    qsp_gguf_tensor_desc_init(&d1);
    qsp_gguf_tensor_desc_init(&d2);
    REQUIRE(qsp_gguf_tensor_info(g, i, &d1) == QSP_OK);
    REQUIRE(qsp_gguf_tensor_info(g2, i, &d2) == QSP_OK);
    CHECK(d1.handle == d2.handle);
  }

  // Another file of the same shapes (another seed) shares nothing and conflicts with nothing.
  const std::string other = tmp().file("micro-other.gguf");
  qsp::gguf::synth_file(other, p, QSP_DTYPE_Q4_0, 12, 1);
  qsp_gguf* g3 = nullptr;
  REQUIRE(qsp_gguf_open(other.c_str(), &g3) == QSP_OK);
  qsp_context* d = gguf_context(g3);
  CHECK(cpu_uploads() - u0 == 26);
  for (qsp_context* ctx : {a, d}) REQUIRE(qsp_prefill(ctx, kMicroPrompt.data(), 8) == QSP_OK);
  const float *la = nullptr, *ld = nullptr;
  REQUIRE(qsp_get_logits(a, &la, nullptr) == QSP_OK);
  REQUIRE(qsp_get_logits(d, &ld, nullptr) == QSP_OK);
  CHECK(std::memcmp(la, ld, p.vocab * sizeof(float)) != 0);
  for (qsp_context* ctx : {a, b, c, d}) qsp_context_destroy(ctx);
  for (qsp_gguf* x : {g, g2, g3}) qsp_gguf_close(x);

  // Two buffers with the same bytes share (content identity); another seed does not.
  const Bytes m1 = qsp::gguf::synth_memory(p, QSP_DTYPE_Q8_0, 21), m2 = m1;
  const Bytes m3 = qsp::gguf::synth_memory(p, QSP_DTYPE_Q8_0, 22);
  auto o1 = open_mem(m1), o2 = open_mem(m2), o3 = open_mem(m3);
  qsp_gguf_tensor_desc x, y, z;
  for (auto* t : {&x, &y, &z}) qsp_gguf_tensor_desc_init(t);
  REQUIRE(qsp_gguf_tensor_info(o1->g, 0, &x) == QSP_OK);
  REQUIRE(qsp_gguf_tensor_info(o2->g, 0, &y) == QSP_OK);
  REQUIRE(qsp_gguf_tensor_info(o3->g, 0, &z) == QSP_OK);
  CHECK(x.handle == y.handle);
  CHECK(x.handle != z.handle);
}

TEST_CASE("gguf: fill_params max_seq_len policy and execution settings", "[gguf]") {
  auto seq = [](const Bytes& f, uint32_t want) {
    auto o = open_mem(f);
    REQUIRE(o->st == QSP_OK);
    qsp_context_params p;
    qsp_context_params_init(&p);
    p.max_seq_len = want;
    p.backend = QSP_BACKEND_CPU;
    p.n_threads = 5;
    REQUIRE(qsp_gguf_fill_params(o->g, &p) == QSP_OK);
    CHECK(p.backend == QSP_BACKEND_CPU);
    CHECK(p.n_threads == 5);
    return p.max_seq_len;
  };
  Spec s;  // micro: context_length 256
  const Bytes f = build(s);
  CHECK(seq(f, 0) == 256);
  CHECK(seq(f, 100) == 100);
  CHECK(seq(f, 100000) == 256);
  s.set_u32["qwen3.context_length"] = 40960;
  const Bytes big = build(s);
  CHECK(seq(big, 0) == 8192);
  CHECK(seq(big, 20000) == 20000);
  s.drop_keys.insert("qwen3.context_length");
  s.set_u32.clear();
  CHECK(seq(build(s), 0) == 4096);  // the documented default context length
}

TEST_CASE("gguf: qsp_context_create_from_gguf", "[gguf]") {
  const std::string path = tmp().file("micro-create.gguf");
  qsp::gguf::synth_file(path, preset("micro"), QSP_DTYPE_Q8_0, 5, 1);
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create_from_gguf(path.c_str(), nullptr, &ctx) == QSP_OK);
  REQUIRE(qsp_prefill(ctx, kMicroPrompt.data(), 8) == QSP_OK);
  qsp_context_destroy(ctx);

  qsp_context_params exec;
  qsp_context_params_init(&exec);
  exec.backend = QSP_BACKEND_CPU;
  exec.n_threads = 1;
  exec.max_seq_len = 10;
  exec.n_layers = 999;  // model-shape fields are ignored
  REQUIRE(qsp_context_create_from_gguf(path.c_str(), &exec, &ctx) == QSP_OK);
  qsp_context_info ci;
  qsp_context_info_init(&ci);
  REQUIRE(qsp_context_get_info(ctx, &ci) == QSP_OK);
  CHECK(ci.n_threads == 1);
  std::vector<int32_t> eleven(11, 3);
  CHECK(qsp_prefill(ctx, eleven.data(), 11) == QSP_ERR_CONTEXT_FULL);
  CHECK(qsp_prefill(ctx, eleven.data(), 10) == QSP_OK);
  qsp_context_destroy(ctx);

  ctx = reinterpret_cast<qsp_context*>(&exec);  // must be reset to NULL on failure
  const std::string missing = tmp().file("does-not-exist.gguf");
  CHECK(qsp_context_create_from_gguf(missing.c_str(), nullptr, &ctx) == QSP_ERR_IO);
  CHECK(ctx == nullptr);
  CHECK(std::string(qsp_gguf_last_error()).find("does-not-exist.gguf") != std::string::npos);
  CHECK(std::string(qsp_gguf_last_error()).find("No such file") != std::string::npos);

  const std::string gpt2 = tmp().file("gpt2.gguf");
  Spec s;
  s.arch = "gpt2";
  write_bytes(gpt2, build(s));
  CHECK(qsp_context_create_from_gguf(gpt2.c_str(), nullptr, &ctx) == QSP_ERR_BAD_FORMAT);
  CHECK(std::string(qsp_gguf_last_error()).find("gpt2.gguf: unknown architecture \"gpt2\"") != std::string::npos);
}

TEST_CASE("gguf: upload progress and upload into a context of another shape", "[gguf]") {
  const Bytes tiny = qsp::gguf::synth_memory(preset("tiny"), QSP_DTYPE_Q4_0, 1);
  auto o = open_mem(tiny);
  REQUIRE(o->st == QSP_OK);
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.backend = QSP_BACKEND_CPU;
  p.max_seq_len = 16;
  REQUIRE(qsp_gguf_fill_params(o->g, &p) == QSP_OK);
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  struct Seen {
    std::vector<uint64_t> done;
    uint64_t total = 0;
  } seen;
  REQUIRE(qsp_gguf_upload(o->g, ctx,
                          [](uint64_t d, uint64_t t, void* u) {
                            auto* s = static_cast<Seen*>(u);
                            s->done.push_back(d);
                            s->total = t;
                          },
                          &seen) == QSP_OK);
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  REQUIRE(qsp_gguf_get_info(o->g, &info) == QSP_OK);
  REQUIRE(seen.done.size() >= 4);  // 2 layers, embedding, output
  CHECK(std::is_sorted(seen.done.begin(), seen.done.end()));
  CHECK(seen.done.back() == seen.total);
  CHECK(seen.total == info.weight_bytes);  // untied: every tensor is used

  // micro's weights into tiny's context: the engine's shape check, named by layer.
  const Bytes micro = qsp::gguf::synth_memory(preset("micro"), QSP_DTYPE_Q4_0, 1);
  auto om = open_mem(micro);
  const qsp_status st = qsp_gguf_upload(om->g, ctx, nullptr, nullptr);
  CHECK(st == QSP_ERR_SHAPE);
  CHECK(std::string(qsp_gguf_last_error()).find("blk.0") != std::string::npos);
  // The context still holds tiny's weights and runs.
  CHECK(qsp_prefill(ctx, kPrompt.data(), 16) == QSP_OK);

  // An unsupported model fails before touching the context.
  Spec s;
  s.preset = "tiny";
  s.retype["blk.0.ffn_down.weight"] = 14;
  const Bytes bad = build(s);
  auto ob = open_mem(bad);
  REQUIRE(ob->st == QSP_OK);
  CHECK(qsp_gguf_upload(ob->g, ctx, nullptr, nullptr) == QSP_ERR_UNSUPPORTED);
  uint32_t len = 0;
  REQUIRE(qsp_kv_length(ctx, &len) == QSP_OK);
  CHECK(len == 16);
  qsp_context_destroy(ctx);
}

TEST_CASE("gguf: concurrent uploads of one file into two contexts", "[gguf]") {
  const Bytes f = qsp::gguf::synth_memory(preset("tiny"), QSP_DTYPE_Q8_0, 31);
  auto o = open_mem(f);
  REQUIRE(o->st == QSP_OK);
  std::vector<float> r[2];
  qsp_status st[2] = {QSP_ERR_INTERNAL, QSP_ERR_INTERNAL};
  std::vector<std::thread> th;
  for (int i = 0; i < 2; ++i)
    th.emplace_back([&, i] {
      qsp_context* ctx = nullptr;
      qsp_context_params p;
      qsp_context_params_init(&p);
      p.backend = QSP_BACKEND_CPU;
      p.n_threads = 1;
      p.max_seq_len = 32;
      st[i] = qsp_gguf_fill_params(o->g, &p);
      if (st[i] == QSP_OK) st[i] = qsp_context_create(&p, &ctx);
      if (st[i] == QSP_OK) st[i] = qsp_gguf_upload(o->g, ctx, nullptr, nullptr);
      if (st[i] == QSP_OK) st[i] = qsp_prefill(ctx, kPrompt.data(), 16);
      if (st[i] == QSP_OK) {
        r[i].resize(2048);
        st[i] = qsp_copy_logits(ctx, r[i].data(), r[i].size());
      }
      qsp_context_destroy(ctx);
    });
  for (auto& t : th) t.join();
  CHECK(st[0] == QSP_OK);
  CHECK(st[1] == QSP_OK);
  CHECK(r[0] == r[1]);
}

// ---- bad files ----------------------------------------------------------------
TEST_CASE("gguf: header errors", "[gguf][bad]") {
  Raw magic;
  magic.u32(0x58554747u).u32(3).u64(0).u64(0);  // "GGUX"
  CHECK_FAILS(magic.b, QSP_ERR_BAD_FORMAT, "not a GGUF file", "GGUX");
  Raw v1, v4, be;
  v1.header(0, 0, 1);
  v4.header(0, 0, 4);
  be.u32(qsp::gguf::kMagic).u32(0x03000000u).u64(0).u64(0);
  CHECK_FAILS(v1.b, QSP_ERR_BAD_FORMAT, "version 1");
  CHECK_FAILS(v4.b, QSP_ERR_BAD_FORMAT, "version 4");
  CHECK_FAILS(be.b, QSP_ERR_UNSUPPORTED, "big-endian");
  CHECK_FAILS(Bytes{}, QSP_ERR_BAD_FORMAT, "truncated");
  CHECK_FAILS(Bytes({'G', 'G', 'U'}), QSP_ERR_BAD_FORMAT, "truncated");
  Raw h;
  h.header(0, 0);
  for (size_t n : {4, 8, 12, 20, 23}) CHECK_FAILS(Bytes(h.b.begin(), h.b.begin() + long(n)), QSP_ERR_BAD_FORMAT, "truncated");
  // An empty but valid GGUF opens; it is not a model.
  auto o = open_mem(h.b);
  CHECK(o->st == QSP_OK);
  CHECK_FAILS(h.b, QSP_ERR_BAD_FORMAT, "general.architecture");
  Raw huge_kv, huge_t;
  huge_kv.header(0, uint64_t(1) << 60);
  huge_t.header(uint64_t(1) << 60, 0);
  CHECK_FAILS(huge_kv.b, QSP_ERR_BAD_FORMAT, "truncated", "metadata entries");
  CHECK_FAILS(huge_t.b, QSP_ERR_BAD_FORMAT, "truncated", "tensors");
}

TEST_CASE("gguf: metadata errors", "[gguf][bad]") {
  Raw long_key;
  long_key.header(0, 1).u64(uint64_t(1) << 40).put("abcdefghijklmnopqrstuvwxyz", 26);
  CHECK_FAILS(long_key.b, QSP_ERR_BAD_FORMAT, "truncated", "metadata entry 0");
  Raw long_val;
  long_val.header(0, 1).str("general.architecture").u32(8).u64(1000).put("qwen3", 5);
  CHECK_FAILS(long_val.b, QSP_ERR_BAD_FORMAT, "truncated", "general.architecture");
  Raw bad_type;
  bad_type.header(0, 1).str("some.key").u32(13).u32(0);
  CHECK_FAILS(bad_type.b, QSP_ERR_BAD_FORMAT, "some.key", "unknown value type 13");
  Raw huge_array;
  huge_array.header(0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(uint64_t(1) << 61);
  CHECK_FAILS(huge_array.b, QSP_ERR_BAD_FORMAT, "truncated", "tokenizer.ggml.tokens");
  Raw huge_f32_array;
  huge_f32_array.header(0, 1).str("x").u32(9).u32(6).u64(UINT64_MAX / 2);
  CHECK_FAILS(huge_f32_array.b, QSP_ERR_BAD_FORMAT, "truncated");
  Raw bad_elem;
  bad_elem.header(0, 1).str("x").u32(9).u32(77).u64(1).u32(0);
  CHECK_FAILS(bad_elem.b, QSP_ERR_BAD_FORMAT, "unknown element type 77");
  Raw deep;  // arrays of arrays of ...
  deep.header(0, 1).str("deep").u32(9);
  for (int i = 0; i < 8; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  CHECK_FAILS(deep.b, QSP_ERR_BAD_FORMAT, "nested");
  Raw nested_ok;  // one level of nesting is valid GGUF and skipped
  nested_ok.header(0, 2).str("n").u32(9).u32(9).u64(2).u32(4).u64(1).u32(7).u32(8).u64(1).str("s");
  nested_ok.kv_str("general.architecture", "qwen3");
  CHECK(open_mem(nested_ok.b)->st == QSP_OK);
  Raw dup;
  dup.header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  CHECK_FAILS(dup.b, QSP_ERR_BAD_FORMAT, "duplicate metadata key", "a.b");
  Raw nul;
  nul.header(0, 1).str(std::string("a\0b", 3)).u32(4).u32(1);
  CHECK_FAILS(nul.b, QSP_ERR_BAD_FORMAT, "NUL");
  for (uint32_t a : {0u, 3u, 48u}) {
    Raw al;
    al.header(0, 1).kv_u32("general.alignment", a);
    CHECK_FAILS(al.b, QSP_ERR_BAD_FORMAT, "general.alignment");
  }
  Raw al_type;
  al_type.header(0, 1).kv_str("general.alignment", "32");
  CHECK_FAILS(al_type.b, QSP_ERR_BAD_FORMAT, "general.alignment", "expected an integer");
  // Truncated inside the metadata of a real file.
  const Bytes f = build(Spec{});
  for (size_t cut : {size_t(30), size_t(60), size_t(200)})
    CHECK_FAILS(Bytes(f.begin(), f.begin() + long(cut)), QSP_ERR_BAD_FORMAT, "truncated", "metadata");
}

TEST_CASE("gguf: tensor directory errors", "[gguf][bad]") {
  CHECK(load(one_tensor("t", {32}, 0, 0, 128)).st == QSP_ERR_BAD_FORMAT);  // fine as a file, not a model
  CHECK(open_mem(one_tensor("t", {32}, 0, 0, 128))->st == QSP_OK);
  CHECK_FAILS(one_tensor("blk.0.attn_q.weight", {32, 1, 1, 1, 1}, 0, 0, 128), QSP_ERR_BAD_FORMAT,
              "blk.0.attn_q.weight", "5 dimensions");
  CHECK_FAILS(one_tensor("w", {32}, 0, 64, 128), QSP_ERR_BAD_FORMAT, "tensor w", "ends past the end");
  CHECK_FAILS(one_tensor("w", {32}, 0, uint64_t(1) << 63, 128), QSP_ERR_BAD_FORMAT, "tensor w", "ends past the end");
  CHECK_FAILS(one_tensor("w", {32, 1000}, 0, 0, 128), QSP_ERR_BAD_FORMAT, "tensor w", "ends past the end");
  CHECK_FAILS(one_tensor("w", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0, 128), QSP_ERR_BAD_FORMAT, "tensor w",
              "too many elements");
  CHECK_FAILS(one_tensor("w", {uint64_t(1) << 61}, 28, 0, 128), QSP_ERR_BAD_FORMAT, "tensor w");  // f64: 2^64 bytes
  CHECK_FAILS(one_tensor("w", {32}, 0, 16, 160), QSP_ERR_BAD_FORMAT, "tensor w", "not a multiple of the alignment");
  CHECK_FAILS(one_tensor("w", {33}, 2, 0, 128), QSP_ERR_BAD_FORMAT, "tensor w", "not a multiple of the q4_0 block");
  CHECK_FAILS(one_tensor("w", {32}, 200, 0, 128), QSP_ERR_UNSUPPORTED, "tensor w", "type id 200");
  CHECK_FAILS(one_tensor("w", {32}, 4, 0, 128), QSP_ERR_UNSUPPORTED, "tensor w", "type id 4");  // removed Q4_2
  CHECK_FAILS(one_tensor("w", {32}, 0x80000000u, 0, 128), QSP_ERR_UNSUPPORTED, "tensor w");
  CHECK_FAILS(one_tensor(std::string("w\0x", 3), {32}, 0, 0, 128), QSP_ERR_BAD_FORMAT, "NUL");
  Raw dup;
  dup.header(2, 0).tensor("w", {32}, 0, 0).tensor("w", {32}, 0, 128).pad().zeros(256);
  CHECK_FAILS(dup.b, QSP_ERR_BAD_FORMAT, "duplicate tensor name w");
  Raw long_name;
  long_name.header(1, 0).u64(uint64_t(1) << 50).zeros(40);
  CHECK_FAILS(long_name.b, QSP_ERR_BAD_FORMAT, "truncated", "tensor info 0");
  // Truncated in the tensor infos and in the data of a real file.
  const Bytes f = build(Spec{});
  auto o = open_mem(f);
  REQUIRE(o->st == QSP_OK);
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  REQUIRE(qsp_gguf_get_info(o->g, &info) == QSP_OK);
  const size_t infos = size_t(info.data_offset) - 100;
  CHECK_FAILS(Bytes(f.begin(), f.begin() + long(infos)), QSP_ERR_BAD_FORMAT, "truncated", "tensor");
  CHECK_FAILS(Bytes(f.begin(), f.end() - 10), QSP_ERR_BAD_FORMAT, "output_norm.weight", "truncated file?");
  CHECK_FAILS(Bytes(f.begin(), f.begin() + long(info.data_offset) + 100), QSP_ERR_BAD_FORMAT, "ends past the end");
}

TEST_CASE("gguf: every truncation of a valid file fails cleanly", "[gguf][bad]") {
  const Bytes f = qsp::gguf::synth_memory(preset("micro"), QSP_DTYPE_Q4_0, 1);
  REQUIRE(open_mem(f)->st == QSP_OK);
  size_t failures = 0;
  for (size_t n = 0; n < f.size(); ++n) {
    Bytes cut(f.begin(), f.begin() + long(n));  // its own allocation: ASan sees any overread
    qsp_gguf* g = nullptr;
    const qsp_status st = qsp_gguf_open_memory(cut.data(), cut.size(), &g);
    if (st == QSP_ERR_BAD_FORMAT && g == nullptr) ++failures;
    qsp_gguf_close(g);
  }
  CHECK(failures == f.size());
}

TEST_CASE("gguf: random corruption never crashes", "[gguf][bad]") {
  const Bytes f = qsp::gguf::synth_memory(preset("micro"), QSP_DTYPE_Q4_0, 1);
  uint64_t s = 12345;
  auto rnd = [&] {
    s = qsp::gguf::mix64(s + 0x9E3779B97F4A7C15ull);
    return s;
  };
  int opened = 0, runnable = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes m = f;
    const int flips = 1 + int(rnd() % 4);
    for (int k = 0; k < flips; ++k) {
      // Mostly the header (where the structure is); sometimes anywhere.
      const size_t at = size_t(rnd() % (rnd() % 4 ? 1200 : m.size()));
      m[at] = rnd() % 2 ? uint8_t(rnd()) : uint8_t(m[at] ^ (1u << (rnd() % 8)));
    }
    qsp_gguf* g = nullptr;
    const qsp_status st = qsp_gguf_open_memory(m.data(), m.size(), &g);
    CHECK((st == QSP_OK || st == QSP_ERR_BAD_FORMAT || st == QSP_ERR_UNSUPPORTED));
    if (st != QSP_OK) {
      CHECK(std::strlen(qsp_gguf_last_error()) > 0);
      continue;
    }
    ++opened;
    qsp_gguf_info info;
    qsp_gguf_info_init(&info);
    CHECK(qsp_gguf_get_info(g, &info) == QSP_OK);
    for (uint64_t i = 0; i < qsp_gguf_tensor_count(g); ++i) {
      qsp_gguf_tensor_desc d;
      qsp_gguf_tensor_desc_init(&d);
      REQUIRE(qsp_gguf_tensor_info(g, i, &d) == QSP_OK);
      CHECK(d.offset + d.n_bytes <= m.size());
    }
    qsp_context_params p;
    qsp_context_params_init(&p);
    p.backend = QSP_BACKEND_CPU;
    p.n_threads = 1;
    p.max_seq_len = 4;
    const qsp_status fs = qsp_gguf_fill_params(g, &p);
    INFO("fill_params: " << fs << " " << qsp_gguf_last_error());
    CHECK((fs == QSP_OK || fs == QSP_ERR_BAD_FORMAT || fs == QSP_ERR_UNSUPPORTED));
    if (fs == QSP_OK && (iter % 10 == 0)) {
      qsp_context* ctx = nullptr;
      if (qsp_context_create(&p, &ctx) == QSP_OK) {
        if (qsp_gguf_upload(g, ctx, nullptr, nullptr) == QSP_OK) {
          ++runnable;
          const int32_t t = 1;
          qsp_prefill(ctx, &t, 1);
        }
        qsp_context_destroy(ctx);
      }
    }
    qsp_gguf_close(g);
  }
  CHECK(opened > 0);
}

TEST_CASE("gguf: model errors name the tensor", "[gguf][bad]") {
  {
    Spec s;
    s.arch = "gpt2";
    const Bytes f = build(s);
    auto o = open_mem(f);
    REQUIRE(o->st == QSP_OK);  // a valid GGUF file ...
    qsp_gguf_info info;
    qsp_gguf_info_init(&info);
    REQUIRE(qsp_gguf_get_info(o->g, &info) == QSP_OK);
    CHECK(std::string(info.architecture) == "gpt2");
    CHECK(info.known_architecture == 0);
    CHECK(info.rope_style == -1);
    CHECK_FAILS(f, QSP_ERR_BAD_FORMAT, "unknown architecture \"gpt2\"");  // ... qsp cannot run
  }
  {
    Spec s;
    s.drop_keys.insert("general.architecture");
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "missing metadata key general.architecture");
  }
  {
    Spec s;
    s.preset = "tiny";
    s.retype["blk.0.ffn_down.weight"] = 14;  // q6_K
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED,
                "tensor blk.0.ffn_down.weight has type q6_K (14), qsp supports f32, f16, bf16, q4_0, q8_0");
  }
  {
    Spec s;
    s.retype["blk.0.attn_k.weight"] = 3;  // q4_1
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED, "tensor blk.0.attn_k.weight has type q4_1 (3)");
  }
  {
    Spec s;
    s.retype["blk.0.attn_norm.weight"] = QSP_DTYPE_Q8_0;
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED, "blk.0.attn_norm.weight", "norm weights must be f32, f16 or bf16");
  }
  {
    Spec s;
    s.preset = "tiny";
    s.drop_tensors.insert("blk.1.ffn_up.weight");
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "missing tensor blk.1.ffn_up.weight");
  }
  for (const char* t : {"token_embd.weight", "output_norm.weight", "blk.0.attn_q_norm.weight"}) {
    Spec s;
    s.drop_tensors.insert(t);
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "missing tensor", t);
  }
  {
    Spec s;
    s.reshape["blk.0.attn_q.weight"] = {32, 64};
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "tensor blk.0.attn_q.weight has shape [32, 64], expected [32, 32]");
  }
  {
    Spec s;
    s.reshape["blk.0.ffn_norm.weight"] = {32, 2};
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "tensor blk.0.ffn_norm.weight has shape [32, 2], expected [32]");
  }
  {
    Spec s;
    s.reshape["token_embd.weight"] = {32, 65};
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "token_embd.weight", "expected [32, 64]");
  }
}

TEST_CASE("gguf: metadata errors of the model name the key", "[gguf][bad]") {
  {
    Spec s;
    s.drop_keys.insert("qwen3.block_count");
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "missing metadata key qwen3.block_count");
  }
  {
    Spec s;
    s.set_u32["qwen3.block_count"] = 2;  // micro has one layer of tensors
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "missing tensor blk.1.attn_norm.weight");
  }
  {
    Spec s;
    s.set_u32["qwen3.attention.head_count_kv"] = 3;
    CHECK_FAILS(build(s), QSP_ERR_BAD_FORMAT, "head_count_kv");
  }
  {
    Spec s;
    s.set_u32["qwen3.expert_count"] = 8;
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED, "mixture-of-experts");
  }
  {
    Spec s;
    s.set_u32["qwen3.rope.dimension_count"] = 8;
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED, "partial RoPE");
  }
  {
    Spec s;
    s.extra_tensors.push_back("blk.0.attn_q.bias");
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED, "blk.0.attn_q.bias", "bias");
  }
  {
    Spec s;  // unrelated extra tensors are ignored
    s.extra_tensors.push_back("rope_freqs.weight");
    CHECK(load(build(s)).st == QSP_OK);
  }
  {
    // A key of the wrong type.
    Writer w;
    w.add_string("general.architecture", "qwen3");
    w.add_string("qwen3.block_count", "one");
    const Bytes f = w.write_memory([](size_t, uint64_t, uint64_t, uint8_t*) {});
    auto o = open_mem(f);  // the buffer must outlive the qsp_gguf
    REQUIRE(o->st == QSP_OK);
    qsp_context_params p;
    qsp_context_params_init(&p);
    CHECK(qsp_gguf_fill_params(o->g, &p) == QSP_ERR_BAD_FORMAT);
    CHECK(std::string(qsp_gguf_last_error()).find("qwen3.block_count has type string; expected an integer") !=
          std::string::npos);
  }
  {
    // Without <arch>.vocab_size the vocabulary comes from the tokenizer, then from token_embd.
    Spec s;
    s.drop_keys.insert("qwen3.vocab_size");
    CHECK(load(build(s)).st == QSP_OK);
  }
  {
    // Defaults: no rope.freq_base means 1e6 for qwen3.
    Spec s;
    s.drop_keys.insert("qwen3.rope.freq_base");
    const Bytes f = build(s);
    auto o = open_mem(f);
    qsp_context_params p;
    qsp_context_params_init(&p);
    p.rope_theta = 1.0f;
    REQUIRE(qsp_gguf_fill_params(o->g, &p) == QSP_OK);
    CHECK(p.rope_theta == 1e6f);
  }
}

TEST_CASE("gguf: I/O errors and bad arguments", "[gguf]") {
  qsp_gguf* g = reinterpret_cast<qsp_gguf*>(&g);
  CHECK(qsp_gguf_open(tmp().file("nope.gguf").c_str(), &g) == QSP_ERR_IO);
  CHECK(g == nullptr);
  CHECK(std::string(qsp_gguf_last_error()).find("nope.gguf") != std::string::npos);
  CHECK(qsp_gguf_open(tmp().path.string().c_str(), &g) == QSP_ERR_IO);
  CHECK(std::string(qsp_gguf_last_error()).find("directory") != std::string::npos);
  const std::string empty = tmp().file("empty.gguf");
  write_bytes(empty, {});
  CHECK(qsp_gguf_open(empty.c_str(), &g) == QSP_ERR_BAD_FORMAT);
  CHECK(std::string(qsp_gguf_last_error()).find("empty.gguf: truncated") != std::string::npos);
  const std::string junk = tmp().file("junk.gguf");
  write_bytes(junk, Bytes(100, 'x'));
  CHECK(qsp_gguf_open(junk.c_str(), &g) == QSP_ERR_BAD_FORMAT);
  CHECK(std::string(qsp_gguf_last_error()).find("junk.gguf: not a GGUF file") != std::string::npos);

  CHECK(qsp_gguf_open(nullptr, &g) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_gguf_open("x", nullptr) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_gguf_open_memory(nullptr, 10, &g) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_gguf_open_memory(nullptr, 0, &g) == QSP_ERR_BAD_FORMAT);
  qsp_gguf_close(nullptr);
  qsp_gguf_info_init(nullptr);
  qsp_gguf_tensor_desc_init(nullptr);
  CHECK(qsp_gguf_tensor_count(nullptr) == 0);

  const Bytes f = build(Spec{});
  auto o = open_mem(f);
  REQUIRE(o->st == QSP_OK);
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  info.struct_size = 8;
  CHECK(qsp_gguf_get_info(o->g, &info) == QSP_ERR_STRUCT_SIZE);
  CHECK(qsp_gguf_get_info(nullptr, &info) == QSP_ERR_INVALID_ARGUMENT);
  qsp_gguf_tensor_desc d;
  qsp_gguf_tensor_desc_init(&d);
  CHECK(qsp_gguf_tensor_info(o->g, 13, &d) == QSP_ERR_OUT_OF_RANGE);
  CHECK(std::string(qsp_gguf_last_error()).find("13") != std::string::npos);
  d.struct_size = 0;
  CHECK(qsp_gguf_tensor_info(o->g, 0, &d) == QSP_ERR_STRUCT_SIZE);
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.struct_size = 4;
  CHECK(qsp_gguf_fill_params(o->g, &p) == QSP_ERR_STRUCT_SIZE);
  CHECK(qsp_gguf_fill_params(o->g, nullptr) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_gguf_upload(o->g, nullptr, nullptr, nullptr) == QSP_ERR_INVALID_ARGUMENT);
  uint64_t idx = 0;
  CHECK(qsp_gguf_find_tensor(o->g, "nope", &idx) == QSP_ERR_OUT_OF_RANGE);
  CHECK(qsp_gguf_find_tensor(o->g, nullptr, &idx) == QSP_ERR_INVALID_ARGUMENT);

  CHECK(std::string(qsp_gguf_type_name(0)) == "f32");
  CHECK(std::string(qsp_gguf_type_name(14)) == "q6_K");
  CHECK(std::string(qsp_gguf_type_name(30)) == "bf16");
  CHECK(std::string(qsp_gguf_type_name(39)) == "mxfp4");
  CHECK(std::string(qsp_gguf_type_name(4)) == "unknown");
  CHECK(std::string(qsp_gguf_type_name(-1)) == "unknown");
  CHECK(std::string(qsp_gguf_type_name(1000)) == "unknown");
  // The block tables agree with qsp's own for the five types it runs.
  for (int32_t t : {0, 1, 2, 8, 30}) CHECK(qsp::gguf::row_bytes(t, 64) == qsp_dtype_size(t, 1, 64));
}

TEST_CASE("gguf: the last error is per thread and separate from qsp_last_error", "[gguf]") {
  // A failing qsp.h call sets qsp_last_error ...
  qsp_context_params p;
  qsp_context_params_init(&p);
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) != QSP_OK);
  const std::string before = qsp_last_error();
  REQUIRE(!before.empty());
  // ... which a failing qsp_gguf call leaves alone.
  Raw magic;
  magic.u32(0).u32(3).u64(0).u64(0);
  CHECK(load(magic.b).st == QSP_ERR_BAD_FORMAT);
  CHECK(std::string(qsp_last_error()) == before);
  const std::string mine = qsp_gguf_last_error();
  CHECK(mine.find("not a GGUF file") != std::string::npos);
  std::string other = "unset";
  std::thread([&] { other = qsp_gguf_last_error(); }).join();
  CHECK(other.empty());
  // Success does not clear it.
  CHECK(open_mem(build(Spec{}))->st == QSP_OK);
  CHECK(std::string(qsp_gguf_last_error()) == mine);
}
