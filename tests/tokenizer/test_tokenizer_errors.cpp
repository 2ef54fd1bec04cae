// The tokenizer's error statuses: files without a tokenizer, unsupported
// models and pre-tokenizers, malformed arrays, bad ids, NULLs, flags, sizes.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <thread>

#include "tokenizer/tokenizer_test_util.h"

using namespace tok_test;

namespace {

bool mentions(const std::string& msg, const std::string& what) { return msg.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("tokenizer errors: no tokenizer, unsupported model or pre", "[tokenizer][errors]") {
  {
    Vocab v = bpe_vocab({});
    v.model = "";
    auto m = make(v);
    CHECK(m->st == QSP_ERR_UNSUPPORTED);
    CHECK(mentions(m->msg, "no tokenizer"));
  }
  {
    Vocab v = bpe_vocab({});
    v.model = "none";
    auto m = make(v);
    CHECK(m->st == QSP_ERR_UNSUPPORTED);
    CHECK(mentions(m->msg, "none"));
  }
  {
    Vocab v = bpe_vocab({});
    v.model = "bert";
    auto m = make(v);
    CHECK(m->st == QSP_ERR_UNSUPPORTED);
    CHECK(mentions(m->msg, "bert"));
  }
  {
    auto m = make(bpe_vocab({}, "deepseek-llm"));
    CHECK(m->st == QSP_ERR_UNSUPPORTED);
    CHECK(mentions(m->msg, "deepseek-llm"));
    CHECK(mentions(m->msg, "qwen2"));
  }
  {
    auto m = make(bpe_vocab({}, ""));  // no pre key: GPT-2's split
    CHECK(m->st == QSP_OK);
  }
}

TEST_CASE("tokenizer errors: malformed arrays are BAD_FORMAT naming the key", "[tokenizer][errors]") {
  {
    auto m = make(write(bpe_vocab({}), false));
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "tokenizer.ggml.tokens"));
  }
  {
    Vocab v = bpe_vocab({});
    v.types.pop_back();
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "tokenizer.ggml.token_type"));
  }
  {
    Vocab v = bpe_vocab({});
    v.types[3] = 9;
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "token_type[3]"));
  }
  {
    Vocab v = bpe_vocab({});
    v.merges.push_back(bl("a") + " " + bl("zz"));  // "zz" is no token
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "tokenizer.ggml.merges[0]"));
  }
  {
    Vocab v = bpe_vocab({});
    v.merges.push_back(bl("a") + " " + bl("b"));  // "ab" is no token
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
  }
  {
    Vocab v = bpe_vocab({});
    v.merges.push_back("ab");  // no separator
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
  }
  {
    Vocab v = bpe_vocab({});
    v.write_merges = false;
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "tokenizer.ggml.merges"));
  }
  {
    Vocab v = bpe_vocab({});
    v.eos = 100000;
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "eos_token_id"));
  }
  {
    Vocab v;
    v.model = "llama";
    v.add("a", 1, 0.0f);
    v.scores.push_back(1.0f);
    auto m = make(v);
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "tokenizer.ggml.scores"));
  }
  {
    // tokens of the wrong type.
    qsp::gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.tokens", "not an array");
    auto m = make(w.write_memory([](size_t, uint64_t, uint64_t, uint8_t*) {}));
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
    CHECK(mentions(m->msg, "tokenizer.ggml.tokens"));
  }
  {
    qsp::gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_f32_array("tokenizer.ggml.tokens", {1.0f});
    auto m = make(w.write_memory([](size_t, uint64_t, uint64_t, uint8_t*) {}));
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
  }
  {
    qsp::gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", {});
    auto m = make(w.write_memory([](size_t, uint64_t, uint64_t, uint8_t*) {}));
    CHECK(m->st == QSP_ERR_BAD_FORMAT);
  }
}

TEST_CASE("tokenizer errors: arguments, flags, ids, struct size", "[tokenizer][errors]") {
  auto m = make(bpe_vocab({}));
  REQUIRE(m->st == QSP_OK);
  const qsp_tokenizer* t = m->t;
  int32_t ids[8];
  char buf[8];
  uint64_t n = 0;
  qsp_tokenizer* out = reinterpret_cast<qsp_tokenizer*>(&n);
  CHECK(qsp_tokenizer_create(nullptr, &out) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(out == nullptr);
  CHECK(qsp_tokenize(nullptr, "a", 1, 0, ids, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_tokenize(t, "a", 1, 0, ids, 8, nullptr) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_tokenize(t, nullptr, 1, 0, ids, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_tokenize(t, "a", 1, 0, nullptr, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_tokenize(t, "a", 1, 4u, ids, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(mentions(qsp_gguf_last_error(), "flags"));
  CHECK(qsp_token_piece(t, 256, 0, buf, 8, &n) == QSP_ERR_OUT_OF_RANGE);
  CHECK(qsp_token_piece(t, -1, 0, buf, 8, &n) == QSP_ERR_OUT_OF_RANGE);
  CHECK(qsp_token_piece(t, 1, 2u, buf, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_token_piece(t, 1, 0, nullptr, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  const int32_t bad[2] = {1, 999};
  CHECK(qsp_detokenize(t, bad, 2, 0, buf, 8, &n) == QSP_ERR_OUT_OF_RANGE);
  CHECK(mentions(qsp_gguf_last_error(), "999"));
  CHECK(qsp_detokenize(t, nullptr, 2, 0, buf, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_detokenize(t, bad, 1, 8u, buf, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_detokenize(t, nullptr, 0, 0, nullptr, 0, &n) == QSP_OK);
  CHECK(n == 0);
  qsp_text_stream* s = reinterpret_cast<qsp_text_stream*>(&n);
  CHECK(qsp_text_stream_create(t, 2u, &s) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(s == nullptr);
  CHECK(qsp_text_stream_create(nullptr, 0, &s) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_text_stream_push(nullptr, 1, buf, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(qsp_text_stream_flush(nullptr, buf, 8, &n) == QSP_ERR_INVALID_ARGUMENT);
  qsp_text_stream_destroy(nullptr);
  qsp_tokenizer_destroy(nullptr);
  qsp_tokenizer_info_init(nullptr);
  qsp_tokenizer_info info;
  qsp_tokenizer_info_init(&info);
  info.struct_size = 8;
  CHECK(qsp_tokenizer_get_info(t, &info) == QSP_ERR_STRUCT_SIZE);
  CHECK(qsp_tokenizer_get_info(nullptr, &info) == QSP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(qsp_status_string(QSP_ERR_BUFFER_TOO_SMALL)) == "buffer too small");
}

TEST_CASE("tokenizer: a file's tokenizer outlives the file, works from many threads", "[tokenizer][errors]") {
  Vocab v = bpe_vocab({{"a", "b"}});
  std::unique_ptr<Made> m;
  {
    Bytes file = write(v);
    m = make(file);
    std::fill(file.begin(), file.end(), 0);  // the tokenizer kept copies
  }
  REQUIRE(m->st == QSP_OK);
  const Ids want = tokenize(m->t, "abab cab");
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        int32_t ids[16];
        uint64_t n = 0;
        if (qsp_tokenize(m->t, "abab cab", 8, 0, ids, 16, &n) != QSP_OK || Ids(ids, ids + n) != want) ++bad;
      }
    });
  for (auto& x : th) x.join();
  CHECK(bad == 0);
}
