// Every kind of broken GGUF file: each must give its documented status and a
// message naming the problem, never a crash.
#include "gguf_test_util.h"

using namespace gguf_test;

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
    const int32_t t = uncomputable_type(preset("tiny").ffn);
    s.retype["blk.0.ffn_down.weight"] = t;
    const std::string want = "tensor blk.0.ffn_down.weight has type " + std::string(qsp_gguf_type_name(t)) + " (" +
                             std::to_string(t) + "), qsp supports " + qsp::fmt::names();
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED, want.c_str());
  }
  {
    Spec s;
    const int32_t t = uncomputable_type(preset("micro").hidden);
    s.retype["blk.0.attn_k.weight"] = t;
    const std::string want = "tensor blk.0.attn_k.weight has type " + std::string(qsp_gguf_type_name(t));
    CHECK_FAILS(build(s), QSP_ERR_UNSUPPORTED, want.c_str());
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
