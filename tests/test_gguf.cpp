// The GGUF loader: round trips through the writer `qsp synth` uses, the
// model a file describes (hyperparameters, tensors, handles, tied
// embeddings, the weight cache), I/O errors and bad arguments. Broken files
// are in test_gguf_errors.cpp, the reader's type table and byte ranges in
// test_gguf_reader.cpp.
#include "gguf_test_util.h"

using namespace gguf_test;

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
  s.retype["blk.0.ffn_down.weight"] = uncomputable_type(preset("tiny").ffn);
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
  // The reader's table agrees with the format registry on every format qsp computes.
  for (const qsp::fmt::Format* const* f = qsp::fmt::all(); *f; ++f) {
    const qsp::gguf::TypeTraits& t = qsp::gguf::type_traits((*f)->dtype);
    INFO((*f)->name);
    CHECK(std::string(t.name ? t.name : "") == (*f)->name);
    CHECK(t.block_size == (*f)->block_elems);
    CHECK(t.type_size == (*f)->block_bytes);
  }
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
