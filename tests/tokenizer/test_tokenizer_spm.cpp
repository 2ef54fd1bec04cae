// SentencePiece-style vocabularies ("llama"): score-ordered merges, the dummy
// prefix, byte fallback, BOS by default, detokenization. Expected ids are
// derived by hand from the scores, step by step in the comments, following
// llama.cpp's llm_tokenizer_spm (highest score first; ties: the leftmost).
#include <catch2/catch.hpp>
#include <cstdio>

#include "tokenizer/tokenizer_test_util.h"

using namespace tok_test;

namespace {

const std::string S = "\xE2\x96\x81";  // U+2581, SPM's space

struct Spm {
  Vocab v;
  int32_t unk, bos, eos, byte0;
  Spm() {
    v.model = "llama";
    v.pre = "";
    unk = v.add("<unk>", 2);
    bos = v.add("<s>", 3);
    eos = v.add("</s>", 3);
    byte0 = int32_t(v.tokens.size());
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      v.add(buf, 6);
    }
    v.bos = bos;
    v.eos = eos;
    v.unk = unk;
    for (const char* c : {"h", "e", "l", "o", "w", "r", "d"}) v.add(c, 1, -10.0f);
    v.add(S, 1, -10.0f);
    v.add(S + "h", 1, -1.0f);
    v.add("ll", 1, -2.0f);
    v.add(S + "he", 1, -3.0f);
    v.add("llo", 1, -4.0f);
    v.add("lo", 1, -0.5f);
    v.add(S + "w", 1, -1.5f);
    v.add("or", 1, -1.5f);
  }
  int32_t id(const std::string& s) const { return v.id(s); }
  int32_t byte(int b) const { return byte0 + b; }
};

}  // namespace

TEST_CASE("spm: merges by score, the dummy prefix, BOS by default", "[tokenizer][spm]") {
  Spm s;
  auto m = make(s.v);
  REQUIRE(m->st == QSP_OK);
  // "hello" -> ▁ h e l l o. Pairs that are tokens: ▁h (-1), ll (-2), lo (-0.5).
  // lo first -> ▁ h e l [lo]; new pair l+lo = llo (-4). ▁h next -> [▁h] e l [lo];
  // new ▁h+e = ▁he (-3). ll is stale (its right symbol grew). ▁he -> [▁he] l [lo];
  // ▁he+l is no token. llo -> [▁he] [llo].
  CHECK(tokenize(m->t, "hello") == Ids{s.id(S + "he"), s.id("llo")});
  CHECK(tokenize(m->t, "hello", QSP_TOKENIZE_ADD_SPECIAL) == Ids{s.bos, s.id(S + "he"), s.id("llo")});
  // "hello world" -> ▁ h e l l o ▁ w o r l d: as above for ▁hello (o+▁ is no
  // token); ▁w (-1.5) and or (-1.5) merge after ▁h; ▁w+o, ▁w+or, or+l are no
  // tokens. Result [▁he] [llo] [▁w] [or] l d.
  CHECK(tokenize(m->t, "hello world") ==
        Ids{s.id(S + "he"), s.id("llo"), s.id(S + "w"), s.id("or"), s.id("l"), s.id("d")});
  CHECK(tokenize(m->t, "") == Ids{});
  CHECK(tokenize(m->t, "", QSP_TOKENIZE_ADD_SPECIAL) == Ids{s.bos});
  qsp_tokenizer_info info;
  qsp_tokenizer_info_init(&info);
  REQUIRE(qsp_tokenizer_get_info(m->t, &info) == QSP_OK);
  CHECK(info.kind == QSP_TOKENIZER_SPM);
  CHECK(info.add_bos == 1);
  CHECK(info.add_eos == 0);
  CHECK(std::string(info.pre).empty());
}

TEST_CASE("spm: byte fallback for what the vocabulary lacks", "[tokenizer][spm]") {
  Spm s;
  auto m = make(s.v);
  // "hi!" -> ▁ h i !: ▁h merges; i and ! are no tokens: <0x69> <0x21>.
  CHECK(tokenize(m->t, "hi!") == Ids{s.id(S + "h"), s.byte('i'), s.byte('!')});
  // é (C3 A9) is not a token: its two bytes.
  CHECK(tokenize(m->t, "\xC3\xA9") == Ids{s.id(S), s.byte(0xC3), s.byte(0xA9)});
  // Invalid UTF-8 is U+FFFD first (EF BF BD).
  CHECK(tokenize(m->t, "\xFF") == Ids{s.id(S), s.byte(0xEF), s.byte(0xBF), s.byte(0xBD)});
  // Without byte tokens: the unknown token.
  Vocab v;
  v.model = "llama";
  v.pre = "";
  v.unk = 0;
  v.add("<unk>", 2);
  v.add(S, 1, -1.0f);
  v.add("a", 1, -1.0f);
  auto n = make(v);
  REQUIRE(n->st == QSP_OK);
  CHECK(tokenize(n->t, "ab") == Ids{1, 2, 0});
}

TEST_CASE("spm: add_space_prefix false: no dummy prefix", "[tokenizer][spm]") {
  Spm s;
  s.v.add_space_prefix = 0;
  auto m = make(s.v);
  // h e l l o: lo, then llo (-4); he is no token; ll stale. h e [llo].
  CHECK(tokenize(m->t, "hello") == Ids{s.id("h"), s.id("e"), s.id("llo")});
  CHECK(detokenize(m->t, tokenize(m->t, " hello")) == " hello");
}

TEST_CASE("spm: specials split the text, each text piece gets the prefix", "[tokenizer][spm]") {
  Spm s;
  auto m = make(s.v);
  // llama.cpp adds the dummy prefix to the first text and to each one after a special token.
  CHECK(tokenize(m->t, "h</s>h", QSP_TOKENIZE_PARSE_SPECIAL) == Ids{s.id(S + "h"), s.eos, s.id(S + "h")});
}

TEST_CASE("spm: detokenize drops the dummy prefix once", "[tokenizer][spm]") {
  Spm s;
  auto m = make(s.v);
  const Ids ids = tokenize(m->t, "hello world", QSP_TOKENIZE_ADD_SPECIAL);
  CHECK(detokenize(m->t, ids, QSP_DETOKENIZE_SKIP_SPECIAL) == "hello world");
  CHECK(detokenize(m->t, ids) == "<s>hello world");
  CHECK(stream(m->t, ids) == "<s>hello world");
  CHECK(stream(m->t, ids, QSP_DETOKENIZE_SKIP_SPECIAL) == "hello world");
  CHECK(detokenize(m->t, Ids{ids.begin() + 1, ids.end()}) == "hello world");
  CHECK(piece(m->t, s.id(S + "he")) == " he");
  CHECK(piece(m->t, s.byte(0xC3)) == "\xC3");
  // Byte tokens spell UTF-8 across tokens; a stream holds the first byte back.
  const Ids e = {s.bos, s.id(S), s.byte(0xC3), s.byte(0xA9), s.id("h")};
  CHECK(detokenize(m->t, e, QSP_DETOKENIZE_SKIP_SPECIAL) == "\xC3\xA9h");
  CHECK(stream(m->t, e, QSP_DETOKENIZE_SKIP_SPECIAL) == "\xC3\xA9h");
  // Round trips of texts the vocabulary covers through byte fallback.
  for (const char* t : {"hello", "a b  c", "  lead", "trail  ", "\xE4\xB8\x96\xE7\x95\x8C!", "x\ny"}) {
    CHECK(detokenize(m->t, tokenize(m->t, t, QSP_TOKENIZE_ADD_SPECIAL), QSP_DETOKENIZE_SKIP_SPECIAL) == t);
    CHECK(stream(m->t, tokenize(m->t, t)) == t);
  }
}
