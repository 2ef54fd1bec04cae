// Byte-level BPE ("gpt2" vocabularies) through the C API: merge order,
// ignore_merges, special tokens, ADD_SPECIAL, NFC, invalid input,
// detokenization, streaming and the size-query protocol.
//
// The vocabularies are built by bpe_vocab(): ids 0..255 are the 256 bytes
// (id == byte value), then the merged tokens in merge order. Expected ids are
// derived by hand from those merges, as each case explains.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <random>

#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

using namespace tok_test;

namespace {

Ids bytes_of(const std::string& s) {
  Ids out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE("bpe: merges apply by rank, not by position", "[tokenizer][bpe]") {
  // "abc": pairs (a,b) and (b,c). Whichever merge has the lower rank wins.
  {
    auto m = make(bpe_vocab({{"b", "c"}, {"a", "b"}}));  // bc = 256, ab = 257
    REQUIRE(m->st == QSP_OK);
    CHECK(tokenize(m->t, "abc") == Ids{'a', 256});
  }
  {
    auto m = make(bpe_vocab({{"a", "b"}, {"b", "c"}}));  // ab = 256, bc = 257
    REQUIRE(m->st == QSP_OK);
    CHECK(tokenize(m->t, "abc") == Ids{256, 'c'});
  }
  // Equal pairs merge leftmost first: "aaa" -> aa a; "aaaa" -> aa aa.
  {
    auto m = make(bpe_vocab({{"a", "a"}}));
    CHECK(tokenize(m->t, "aaa") == Ids{256, 'a'});
    CHECK(tokenize(m->t, "aaaa") == Ids{256, 256});
  }
  // A chain: he(256) ll(257) hell(258) hello(259); " " + "w" (260).
  {
    auto m = make(bpe_vocab({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}}));
    CHECK(tokenize(m->t, "hello") == Ids{259});
    CHECK(tokenize(m->t, "hello world") == Ids{259, 260, 'o', 'r', 'l', 'd'});
    CHECK(tokenize(m->t, "helo") == Ids{256, 'l', 'o'});
    // The pre-tokenizer keeps words apart: "he" + "llo" never merge across "he llo".
    CHECK(tokenize(m->t, "he llo") == Ids{256, ' ', 257, 'o'});
  }
}

TEST_CASE("bpe: ignore_merges (llama-bpe) emits a pre-token that is a token", "[tokenizer][bpe]") {
  // "abc" is in the vocabulary but no merge builds it (only a+b exists).
  for (const char* pre : {"llama-bpe", "qwen2"}) {
    Vocab v = bpe_vocab({{"a", "b"}}, pre);  // ab = 256
    const int32_t abc = v.add(bl("abc"));
    auto m = make(v);
    REQUIRE(m->st == QSP_OK);
    if (std::string(pre) == "llama-bpe") {
      CHECK(tokenize(m->t, "abc") == Ids{abc});
      CHECK(tokenize(m->t, "abd") == Ids{256, 'd'});  // not a token: merged as usual
    } else {
      CHECK(tokenize(m->t, "abc") == Ids{256, 'c'});
    }
  }
}

namespace {

// A reference BPE on strings, independent of the library's: repeatedly merge
// the adjacent pair of lowest rank, leftmost on ties.
std::vector<std::string> reference_bpe(const std::string& word, const std::map<std::pair<std::string, std::string>, int>& rank) {
  std::vector<std::string> s;
  for (char c : word) s.push_back(std::string(1, c));
  for (;;) {
    int best = -1, best_rank = 0;
    for (size_t k = 0; k + 1 < s.size(); ++k) {
      auto it = rank.find({s[k], s[k + 1]});
      if (it != rank.end() && (best < 0 || it->second < best_rank)) {
        best = int(k);
        best_rank = it->second;
      }
    }
    if (best < 0) return s;
    s[size_t(best)] += s[size_t(best) + 1];
    s.erase(s.begin() + best + 1);
  }
}

}  // namespace

TEST_CASE("bpe: short-word and heap paths agree with a reference, any length", "[tokenizer][bpe]") {
  std::mt19937 rng(1234);
  // Random merges over "abc": each joins two tokens that exist already.
  std::vector<std::string> toks = {"a", "b", "c"};
  std::vector<std::pair<std::string, std::string>> merges;
  std::map<std::pair<std::string, std::string>, int> rank;
  std::set<std::string> have(toks.begin(), toks.end());
  while (merges.size() < 60) {
    const std::string x = toks[rng() % toks.size()];
    const std::string y = toks[rng() % toks.size()];
    if (x.size() + y.size() > 8 || rank.count({x, y}) || have.count(x + y)) continue;
    rank[{x, y}] = int(merges.size());
    merges.push_back({x, y});
    toks.push_back(x + y);
    have.insert(x + y);
  }
  const Vocab v = bpe_vocab(merges);
  const Bytes file = write(v);
  auto f = qsp::gguf::File::parse(file.data(), file.size(), 1);
  auto t = qsp::tok::Tokenizer::load(*f);
  for (int iter = 0; iter < 400; ++iter) {
    const size_t len = 1 + rng() % (iter < 200 ? 32 : 300);
    std::string w;
    for (size_t i = 0; i < len; ++i) w += char('a' + rng() % 3);
    Ids want;
    for (const std::string& s : reference_bpe(w, rank)) want.push_back(v.id(bl(s)));
    Ids fast, heap;
    t->bpe_word(w.data(), w.size(), &fast);
    t->bpe_word(w.data(), w.size(), &heap, true);
    INFO(w);
    CHECK(fast == want);
    CHECK(heap == want);
  }
}

TEST_CASE("bpe: control tokens need PARSE_SPECIAL, user-defined ones always match", "[tokenizer][bpe]") {
  Vocab v = bpe_vocab({});
  const int32_t im_start = v.add("<|im_start|>", 3);
  const int32_t im_end = v.add("<|im_end|>", 3);
  const int32_t think = v.add("<think>", 4);
  const int32_t x = v.add("<x>", 3);
  const int32_t xy = v.add("<x>y", 3);
  auto m = make(v);
  REQUIRE(m->st == QSP_OK);
  CHECK(tokenize(m->t, "<|im_start|>hi") == bytes_of("<|im_start|>hi"));
  CHECK(tokenize(m->t, "<|im_start|>hi", QSP_TOKENIZE_PARSE_SPECIAL) == Ids{im_start, 'h', 'i'});
  CHECK(tokenize(m->t, "a<think>b") == Ids{'a', think, 'b'});
  CHECK(tokenize(m->t, "a<think>b", QSP_TOKENIZE_PARSE_SPECIAL) == Ids{'a', think, 'b'});
  CHECK(tokenize(m->t, "<|im_end|><|im_end|>", QSP_TOKENIZE_PARSE_SPECIAL) == Ids{im_end, im_end});
  // The longest token at a position wins.
  CHECK(tokenize(m->t, "<x>yz", QSP_TOKENIZE_PARSE_SPECIAL) == Ids{xy, 'z'});
  CHECK(tokenize(m->t, "<x>z", QSP_TOKENIZE_PARSE_SPECIAL) == Ids{x, 'z'});
  // Detokenize: control text unless skipped; user-defined text always.
  CHECK(detokenize(m->t, {im_start, 'h', think}) == "<|im_start|>h<think>");
  CHECK(detokenize(m->t, {im_start, 'h', think}, QSP_DETOKENIZE_SKIP_SPECIAL) == "h<think>");
  CHECK(piece(m->t, im_end) == "<|im_end|>");
  CHECK(piece(m->t, im_end, QSP_DETOKENIZE_SKIP_SPECIAL).empty());
  CHECK(piece(m->t, ' ') == " ");
  qsp_tokenizer_info info;
  qsp_tokenizer_info_init(&info);
  REQUIRE(qsp_tokenizer_get_info(m->t, &info) == QSP_OK);
  CHECK(info.eot_id == im_end);  // recognized by its text, the key being absent
  CHECK(info.max_piece_bytes == 12);
}

TEST_CASE("bpe: ADD_SPECIAL adds BOS / EOS as the keys say", "[tokenizer][bpe]") {
  Vocab v = bpe_vocab({});
  v.bos = v.add("<s>", 3);
  v.eos = v.add("</s>", 3);
  {
    auto m = make(v);  // gpt2 without add_bos_token: no BOS
    CHECK(tokenize(m->t, "a", QSP_TOKENIZE_ADD_SPECIAL) == Ids{'a'});
    qsp_tokenizer_info info;
    qsp_tokenizer_info_init(&info);
    REQUIRE(qsp_tokenizer_get_info(m->t, &info) == QSP_OK);
    CHECK(info.kind == QSP_TOKENIZER_BPE);
    CHECK(info.add_bos == 0);
    CHECK(info.bos_id == v.bos);
    CHECK(info.eos_id == v.eos);
    CHECK(info.n_vocab == v.tokens.size());
    CHECK(std::string(info.model) == "gpt2");
    CHECK(std::string(info.pre) == "qwen2");
    CHECK(std::string(info.chat_template).empty());
  }
  v.add_bos = 1;
  v.add_eos = 1;
  v.chat_template = "{{ messages }}";
  {
    auto m = make(v);
    CHECK(tokenize(m->t, "a", QSP_TOKENIZE_ADD_SPECIAL) == Ids{int32_t(v.bos), 'a', int32_t(v.eos)});
    CHECK(tokenize(m->t, "", QSP_TOKENIZE_ADD_SPECIAL) == Ids{int32_t(v.bos), int32_t(v.eos)});
    CHECK(tokenize(m->t, "a") == Ids{'a'});
    qsp_tokenizer_info info;
    qsp_tokenizer_info_init(&info);
    REQUIRE(qsp_tokenizer_get_info(m->t, &info) == QSP_OK);
    CHECK(info.add_bos == 1);
    CHECK(info.add_eos == 1);
    CHECK(std::string(info.chat_template) == "{{ messages }}");
  }
}

TEST_CASE("bpe: qwen2 normalizes to NFC first, the others do not", "[tokenizer][bpe]") {
  auto q = make(bpe_vocab({}, "qwen2"));
  auto g = make(bpe_vocab({}, "gpt-2"));
  auto l = make(bpe_vocab({}, "llama-bpe"));
  const std::string nfd = "cafe\xCC\x81", nfc = "caf\xC3\xA9";
  CHECK(tokenize(q->t, nfd) == bytes_of(nfc));
  CHECK(tokenize(q->t, nfc) == bytes_of(nfc));
  CHECK(tokenize(g->t, nfd) == bytes_of(nfd));
  CHECK(tokenize(l->t, nfd) == bytes_of(nfd));
}

TEST_CASE("bpe: invalid UTF-8 is tokenized as U+FFFD", "[tokenizer][bpe]") {
  auto m = make(bpe_vocab({}));  // no merges: the ids are the bytes
  CHECK(tokenize(m->t, "a\xFF" "b") == tokenize(m->t, "a\xEF\xBF\xBD" "b"));
  CHECK(tokenize(m->t, "x\xF0\x9F\x98") == bytes_of("x\xEF\xBF\xBD"));
  CHECK(tokenize(m->t, "\xC0\xAF") == bytes_of("\xEF\xBF\xBD\xEF\xBF\xBD"));
}

namespace {

// Random valid UTF-8 from a mix of scripts, spaces, digits and punctuation.
std::string random_text(std::mt19937& rng, size_t n) {
  static const std::vector<uint32_t> pool = {
      'a', 'b', 'e', 'l', 'o', 'T', 'h', ' ', ' ', ' ', '\n', '\r', '\t', '\'', 's', 'L', '1', '2', '9', '.', ',',
      '!', '(', 0xE9, 0x301, 0x4E16, 0x754C, 0x1F600, 0x1F3FD, 0xA0, 0x3000, 0x85, 0x2028, 0x17F, 0x0663, 0xBD, 0xFFFD, 0};
  std::string s;
  for (size_t i = 0; i < n; ++i) qsp::tok::append_utf8(pool[rng() % pool.size()], &s);
  return s;
}

}  // namespace

TEST_CASE("bpe: tokenize then detokenize gives the text back, streams equal detokenize", "[tokenizer][bpe]") {
  std::mt19937 rng(99);
  // Merges that touch multi-byte characters, so pieces end inside UTF-8 sequences.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "a"}, {"\xE4", "\xB8"}, {"\xF0", "\x9F"}, {"\xF0\x9F", "\x98"}, {"l", "l"}, {"e", "\xCC"}, {"\n", "\n"}};
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2"}) {
    Vocab v = bpe_vocab(merges, pre);
    v.bos = v.add("<s>", 3);
    v.add("<think>", 4);
    auto m = make(v);
    REQUIRE(m->st == QSP_OK);
    for (int iter = 0; iter < 150; ++iter) {
      std::string text = random_text(rng, rng() % 40);
      if (iter % 5 == 0) text += "<think>";
      if (std::string(pre) == "qwen2") text = qsp::tok::nfc(text.data(), text.size());  // qwen2 returns NFC
      const Ids ids = tokenize(m->t, text);
      INFO(pre << ": " << text);
      CHECK(detokenize(m->t, ids) == text);
      CHECK(stream(m->t, ids) == text);
      // Random ids (bytes of split characters, specials): the stream equals detokenize.
      Ids r;
      for (size_t k = rng() % 12; k > 0; --k) r.push_back(int32_t(rng() % v.tokens.size()));
      CHECK(stream(m->t, r) == detokenize(m->t, r));
      CHECK(stream(m->t, r, QSP_DETOKENIZE_SKIP_SPECIAL) == detokenize(m->t, r, QSP_DETOKENIZE_SKIP_SPECIAL));
    }
  }
}

TEST_CASE("bpe: streams hold back incomplete characters, a small buffer changes nothing", "[tokenizer][bpe]") {
  auto m = make(bpe_vocab({}));
  qsp_text_stream* s = nullptr;
  REQUIRE(qsp_text_stream_create(m->t, 0, &s) == QSP_OK);
  char buf[8];
  uint64_t n = 99;
  REQUIRE(qsp_text_stream_push(s, 0xE4, nullptr, 0, &n) == QSP_OK);  // 世 = E4 B8 96
  CHECK(n == 0);
  REQUIRE(qsp_text_stream_push(s, 0xB8, nullptr, 0, &n) == QSP_OK);
  CHECK(n == 0);
  CHECK(qsp_text_stream_push(s, 0x96, buf, 2, &n) == QSP_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 3);
  REQUIRE(qsp_text_stream_push(s, 0x96, buf, sizeof buf, &n) == QSP_OK);
  CHECK(std::string(buf, size_t(n)) == "\xE4\xB8\x96");
  // An incomplete sequence followed by ASCII: the raw bytes come out.
  REQUIRE(qsp_text_stream_push(s, 0xC3, buf, sizeof buf, &n) == QSP_OK);
  CHECK(n == 0);
  REQUIRE(qsp_text_stream_push(s, 'x', buf, sizeof buf, &n) == QSP_OK);
  CHECK(std::string(buf, size_t(n)) == "\xC3x");
  // Flush writes what is held back and resets.
  REQUIRE(qsp_text_stream_push(s, 0xF0, buf, sizeof buf, &n) == QSP_OK);
  CHECK(qsp_text_stream_flush(s, buf, 0, &n) == QSP_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 1);
  REQUIRE(qsp_text_stream_flush(s, buf, sizeof buf, &n) == QSP_OK);
  CHECK(std::string(buf, size_t(n)) == "\xF0");
  REQUIRE(qsp_text_stream_flush(s, buf, sizeof buf, &n) == QSP_OK);
  CHECK(n == 0);
  CHECK(qsp_text_stream_push(s, 256, buf, sizeof buf, &n) == QSP_ERR_OUT_OF_RANGE);
  CHECK(qsp_text_stream_push(s, -1, buf, sizeof buf, &n) == QSP_ERR_OUT_OF_RANGE);
  qsp_text_stream_destroy(s);
  // Every split of multi-byte characters into byte tokens streams to the same text.
  const std::string text = "a\xC3\xA9\xE4\xB8\x96\xF0\x9F\x98\x80z";
  CHECK(stream(m->t, bytes_of(text)) == text);
}

TEST_CASE("bpe: BUFFER_TOO_SMALL reports the size and writes nothing", "[tokenizer][bpe]") {
  auto m = make(bpe_vocab({{"h", "i"}}));
  int32_t ids[4] = {-5, -5, -5, -5};
  uint64_t n = 0;
  CHECK(qsp_tokenize(m->t, "hi there", 8, 0, ids, 2, &n) == QSP_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 7);  // qwen2 splits "hi" | " there"; hi merges (256), " there" is 6 bytes
  CHECK(ids[0] == -5);
  CHECK(ids[1] == -5);
  const Ids want = tokenize(m->t, "hi there");
  CHECK(want.size() == n);
  CHECK(want.front() == 256);
  char buf[4] = {'#', '#', '#', '#'};
  uint64_t len = 0;
  CHECK(qsp_detokenize(m->t, want.data(), want.size(), 0, buf, 4, &len) == QSP_ERR_BUFFER_TOO_SMALL);
  CHECK(len == 8);
  CHECK(buf[0] == '#');
  CHECK(qsp_token_piece(m->t, 256, 0, buf, 1, &len) == QSP_ERR_BUFFER_TOO_SMALL);
  CHECK(len == 2);
  CHECK(buf[0] == '#');
  CHECK(qsp_tokenize(m->t, nullptr, 0, 0, nullptr, 0, &n) == QSP_OK);
  CHECK(n == 0);
}
