// qsp synth's llama.cpp file-type mixes (synth_mix_type, synth_tensors): the
// rules of llama.cpp's llama_tensor_get_type as docs/GGUF.md lists them.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "gguf_write/gguf_synth.h"

using namespace qsp::gguf;

namespace {

enum : int32_t { F32 = 0, Q4_1 = 3, Q5_0 = 6, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

std::map<std::string, int32_t> types_of(const std::string& preset, const std::string& ftype) {
  const SynthFileType* f = find_synth_file_type(ftype);
  REQUIRE(f);
  std::map<std::string, int32_t> m;
  for (const SynthTensor& t : synth_tensors(*find_synth_preset(preset), SynthType(f->base, f->file_type), 1))
    m[t.name] = t.type;
  return m;
}

bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

}  // namespace

TEST_CASE("gguf synth mix: file type names, ids, case-insensitive") {
  const std::map<std::string, std::pair<int32_t, int32_t>> want = {
      {"q4_k_m", {15, Q4_K}}, {"q4_k_s", {14, Q4_K}}, {"q5_k_m", {17, Q5_K}}, {"q5_k_s", {16, Q5_K}},
      {"q6_k", {18, Q6_K}},   {"q3_k_m", {12, Q3_K}}, {"q2_k", {10, Q2_K}},   {"q4_1", {3, Q4_1}},
      {"q5_0", {8, Q5_0}},    {"q5_1", {9, 7}},
  };
  REQUIRE(synth_file_types().size() == want.size());
  for (const auto& w : want) {
    const SynthFileType* f = find_synth_file_type(w.first);
    REQUIRE(f);
    CHECK(f->file_type == w.second.first);
    CHECK(f->base == w.second.second);
  }
  CHECK(find_synth_file_type("Q4_K_M") == find_synth_file_type("q4_k_m"));
  CHECK(find_synth_file_type("q4_K") == nullptr);
  CHECK(find_synth_file_type("q4_k_l") == nullptr);
}

TEST_CASE("gguf synth mix: q4_k_m on a 28-layer qwen3 (qwen3-0.6b, tied)") {
  const auto m = types_of("qwen3-0.6b", "q4_k_m");
  CHECK(m.at("token_embd.weight") == Q6_K);  // tied: the LM head's rule
  CHECK(m.count("output.weight") == 0);
  // use_more_bits(i, 28): layers 0-2, 5, 8, ..., 23, 24-27.
  CHECK(m.at("blk.0.ffn_down.weight") == Q6_K);
  CHECK(m.at("blk.3.ffn_down.weight") == Q4_K);
  CHECK(m.at("blk.4.ffn_down.weight") == Q4_K);
  CHECK(m.at("blk.5.ffn_down.weight") == Q6_K);
  CHECK(m.at("blk.27.ffn_down.weight") == Q6_K);
  CHECK(m.at("blk.3.attn_v.weight") == Q4_K);
  CHECK(m.at("blk.5.attn_v.weight") == Q6_K);
  int n_q6 = 0;
  for (int l = 0; l < 28; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const int32_t more = more_bits(l, 28) ? Q6_K : Q4_K;
    n_q6 += more == Q6_K;
    CHECK(m.at(b + "attn_v.weight") == more);
    CHECK(m.at(b + "ffn_down.weight") == more);
    for (const char* t : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
      CHECK(m.at(b + t + ".weight") == Q4_K);
    CHECK(m.at(b + "attn_norm.weight") == F32);
  }
  CHECK(n_q6 == 14);  // 0-2, 5, 8, 11, 14, 17, 20, 23, 24-27
}

TEST_CASE("gguf synth mix: the other file types on llama3-8b (32 layers, untied, GQA 4)") {
  auto m = types_of("llama3-8b", "q4_k_s");
  CHECK(m.at("output.weight") == Q6_K);
  CHECK(m.at("token_embd.weight") == Q4_K);
  CHECK(m.at("blk.3.attn_v.weight") == Q5_K);
  CHECK(m.at("blk.4.attn_v.weight") == Q4_K);
  CHECK(m.at("blk.3.ffn_down.weight") == Q5_K);  // < 32/8
  CHECK(m.at("blk.4.ffn_down.weight") == Q4_K);
  m = types_of("llama3-8b", "q3_k_m");
  CHECK(m.at("blk.1.attn_v.weight") == Q5_K);
  CHECK(m.at("blk.2.attn_v.weight") == Q4_K);
  CHECK(m.at("blk.1.ffn_down.weight") == Q5_K);  // < 32/16
  CHECK(m.at("blk.2.ffn_down.weight") == Q4_K);
  CHECK(m.at("blk.9.attn_output.weight") == Q4_K);
  CHECK(m.at("blk.9.attn_q.weight") == Q3_K);
  m = types_of("llama3-8b", "q2_k");
  CHECK(m.at("blk.0.attn_v.weight") == Q4_K);  // n_gqa = 4
  CHECK(m.at("blk.0.ffn_down.weight") == Q3_K);
  CHECK(m.at("blk.0.attn_output.weight") == Q3_K);
  CHECK(m.at("blk.0.ffn_up.weight") == Q2_K);
  m = types_of("qwen3-8b", "q2_k");  // 32 / 8 heads: n_gqa 4 too
  CHECK(m.at("blk.0.attn_v.weight") == Q4_K);
  m = types_of("tiny", "q2_k");  // 4 / 2 heads: n_gqa 2
  CHECK(m.at("blk.0.attn_v.weight") == Q3_K);
  m = types_of("llama3-8b", "q5_k_m");
  CHECK(m.at("blk.6.attn_v.weight") == Q6_K);  // use_more_bits(i, 32): 0-3, 6, 9, ..., 27, 28-31
  CHECK(m.at("blk.5.attn_v.weight") == Q5_K);
  CHECK(m.at("blk.5.ffn_down.weight") == Q5_K);
  CHECK(m.at("blk.28.ffn_down.weight") == Q6_K);
  m = types_of("llama3-8b", "q5_0");
  CHECK(m.at("output.weight") == Q6_K);
  CHECK(m.at("blk.0.ffn_down.weight") == Q5_0);
  m = types_of("llama3-8b", "q6_k");
  for (const auto& t : m) CHECK((t.second == Q6_K || t.second == F32));
}

TEST_CASE("gguf synth mix: llama.cpp's fallback for columns not a multiple of 256 (micro, 32 columns)") {
  auto m = types_of("micro", "q4_k_m");
  CHECK(m.at("token_embd.weight") == Q8_0);       // tied LM head: q6_K -> q8_0
  CHECK(m.at("blk.0.attn_q.weight") == Q5_0);     // q4_K -> q5_0
  CHECK(m.at("blk.0.ffn_down.weight") == Q8_0);   // use_more_bits(0, 1): q6_K -> q8_0
  m = types_of("micro", "q5_k_s");
  CHECK(m.at("blk.0.attn_q.weight") == 7);        // q5_K -> q5_1
  m = types_of("micro", "q4_1");
  CHECK(m.at("token_embd.weight") == Q8_0);
  CHECK(m.at("blk.0.attn_q.weight") == Q4_1);
  CHECK_THROWS_AS(types_of("micro", "q2_k"), std::invalid_argument);  // q2_K -> iq4_nl: no quantizer
}
