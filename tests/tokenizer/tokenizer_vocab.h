// Small tokenizer vocabularies written as GGUF buffers in memory (the writer
// of tools/gguf_write): what the tokenizer unit tests (tokenizer_test_util.h)
// and the CLI tests' file writer (tests/cli/tok_gguf.cpp) build on. No
// Catch2 here: the CLI helper is a plain program.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf_format.h"
#include "gguf_write/gguf_writer.h"
#include "tokenizer/unicode.h"

namespace tok_test {

using Bytes = std::vector<uint8_t>;
using Ids = std::vector<int32_t>;

// GPT-2's byte-level spelling of raw bytes (the form tokens and merges take in
// a "gpt2" vocabulary).
inline std::string bl(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) qsp::tok::append_utf8(qsp::tok::byte_to_cp(c), &out);
  return out;
}

// An int32 array value (the writer has no typed helper for it).
inline Bytes i32_array(const std::vector<int32_t>& v) {
  Bytes b;
  auto put = [&](const void* p, size_t n) { b.insert(b.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
  const uint32_t t = qsp::gguf::kInt32;
  const uint64_t n = v.size();
  put(&t, 4);
  put(&n, 8);
  for (int32_t x : v) put(&x, 4);
  return b;
}

// A vocabulary to write: tokens (as stored), their types, optional scores and
// merges (as stored), special ids, flags, and any extra keys.
struct Vocab {
  std::string model = "gpt2";
  std::string pre = "qwen2";  // "" : no key
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // empty: no key
  std::vector<float> scores;   // empty: no key
  std::vector<std::string> merges;
  bool write_merges = true;
  int64_t bos = -1, eos = -1, eot = -1, unk = -1;  // -1: no key
  int add_bos = -1, add_eos = -1, add_space_prefix = -1;  // -1: no key
  std::string chat_template;

  int32_t add(const std::string& text, int32_t type = 1, float score = 0.0f) {
    tokens.push_back(text);
    types.push_back(type);
    scores.push_back(score);
    return int32_t(tokens.size() - 1);
  }
  int32_t id(const std::string& text) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == text) return int32_t(i);
    throw std::invalid_argument("tok_test::Vocab: no token " + text);  // a test's own typo
  }
};

// Byte-level BPE: the 256 byte tokens in byte order (id == byte), then for each
// merge (raw "a", raw "b") the merged token, in rank order.
inline Vocab bpe_vocab(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& pre = "qwen2") {
  Vocab v;
  v.pre = pre;
  for (int b = 0; b < 256; ++b) v.add(bl(std::string(1, char(b))));
  for (const auto& m : merges) {
    v.merges.push_back(bl(m.first) + " " + bl(m.second));
    bool have = false;
    for (const auto& t : v.tokens) have = have || t == bl(m.first + m.second);
    if (!have) v.add(bl(m.first + m.second));
  }
  v.scores.clear();
  return v;
}

inline Bytes write(const Vocab& v, bool write_tokens = true) {
  qsp::gguf::Writer w;
  w.add_string("general.architecture", "llama");
  if (!v.model.empty()) w.add_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.add_string("tokenizer.ggml.pre", v.pre);
  if (write_tokens) w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.types.empty()) w.add_raw("tokenizer.ggml.token_type", qsp::gguf::kArray, i32_array(v.types));
  if (!v.scores.empty() && v.model != "gpt2") w.add_f32_array("tokenizer.ggml.scores", v.scores);
  if (v.write_merges && v.model == "gpt2") w.add_string_array("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
  if (v.eot >= 0) w.add_u32("tokenizer.ggml.eot_token_id", uint32_t(v.eot));
  if (v.unk >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
  if (v.add_bos >= 0) w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos != 0);
  if (v.add_eos >= 0) w.add_bool("tokenizer.ggml.add_eos_token", v.add_eos != 0);
  if (v.add_space_prefix >= 0) w.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix != 0);
  if (!v.chat_template.empty()) w.add_string("tokenizer.chat_template", v.chat_template);
  return w.write_memory([](size_t, uint64_t, uint64_t, uint8_t*) {});
}

}  // namespace tok_test
