// The pre-tokenizers against the regexes they implement.
//
// How the expectations were obtained: each case's pieces are what Python's
// `regex` module (2026.5.9; \s = White_Space, \p{L} / \p{N} by general
// category, (?i) with simple case folding, as the Rust regex crate and
// Oniguruma behave) returns for regex.findall(PATTERN, text) with the
// pattern of that pre-tokenizer, printed as C++ literals by this script:
//
//   import regex
//   P = {'kGpt2':   r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
//        'kLlama3': r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
//                   r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
//        'kQwen2':  the kLlama3 pattern with \p{N} for \p{N}{1,3}}
//   for kind, pat in P.items():
//     for text in CASES:
//       pieces = regex.findall(pat, text); assert ''.join(pieces) == text
//       print('{PreKind::%s, %s, {%s}},' % (kind, lit(text), ', '.join(map(lit, pieces))))
//
// (lit() writes the UTF-8 bytes as a C++ literal.) The pre-tokenizers run
// here without qwen2's NFC step, which test_tokenizer_bpe.cpp covers; the
// NFD inputs below are split as they are.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"

using qsp::tok::PreKind;

namespace {

struct Case {
  PreKind kind;
  std::string text;
  std::vector<std::string> pieces;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
  // kGpt2
    {PreKind::kGpt2, "Hello world", {"Hello", " world"}},
    {PreKind::kGpt2, "I'm here, it's John's; WE'LL SEE'S 'S 'Ve 'LL 'd'x", {"I", "'m", " here", ",", " it", "'s", " John", "'s", ";", " WE", "'", "LL", " SEE", "'", "S", " '", "S", " '", "Ve", " '", "LL", " '", "d", "'", "x"}},
    {PreKind::kGpt2, "don't'sam 'twas", {"don", "'t", "'s", "am", " '", "twas"}},
    {PreKind::kGpt2, "12345 1234567 3.14159 x2y", {"12345", " 1234567", " 3", ".", "14159", " x", "2", "y"}},
    {PreKind::kGpt2, "a  b   c    ", {"a", " ", " b", "  ", " c", "    "}},
    {PreKind::kGpt2, "   leading and trailing   ", {"  ", " leading", " and", " trailing", "   "}},
    {PreKind::kGpt2, "tab\tand\t\tnl\n\nend\n", {"tab", "\t", "and", "\t", "\t", "nl", "\n", "\n", "end", "\n"}},
    {PreKind::kGpt2, "line1\r\nline2\r\n\r\n  \n x", {"line", "1", "\r", "\n", "line", "2", "\r\n\r\n  \n", " x"}},
    {PreKind::kGpt2, "!!!\n\n??? ... --\r\n\tx", {"!!!", "\n", "\n", "???", " ...", " --", "\r\n", "\t", "x"}},
    {PreKind::kGpt2, "  \n\n  word", {"  \n\n ", " word"}},
    {PreKind::kGpt2, "(parens) [brackets] {braces} \"quotes\"", {"(", "parens", ")", " [", "brackets", "]", " {", "braces", "}", " \"", "quotes", "\""}},
    {PreKind::kGpt2, "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85 \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", {"\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7", " \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85", " \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", " \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82"}},
    {PreKind::kGpt2, "e\xcc\x81t\xc3\xa9 cafe\xcc\x81 na\xcc\x88ive", {"e", "\xcc\x81", "t\xc3\xa9", " cafe", "\xcc\x81", " na", "\xcc\x88", "ive"}},
    {PreKind::kGpt2, "emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x81 x\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbdy", {"emoji", " \xf0\x9f\x98\x80\xf0\x9f\x98\x81", " x", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "y"}},
    {PreKind::kGpt2, "\xc2\xa0nbsp\xe3\x80\x80ideo\xe2\x80\xa8ls \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4 \xc2\xbd\xe2\x85\xa7", {"\xc2\xa0", "nbsp", "\xe3\x80\x80", "ideo", "\xe2\x80\xa8", "ls", " \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4", " \xc2\xbd\xe2\x85\xa7"}},
    {PreKind::kGpt2, "'\xc5\xbf long s", {"'", "\xc5\xbf", " long", " s"}},
    {PreKind::kGpt2, "x\xc2\x85y \xef\xbb\xbfz", {"x", "\xc2\x85", "y", " \xef\xbb\xbf", "z"}},
    {PreKind::kGpt2, "MixedCASE_snake_case camelCase123abc", {"MixedCASE", "_", "snake", "_", "case", " camelCase", "123", "abc"}},
    {PreKind::kGpt2, "    ", {"    "}},
    {PreKind::kGpt2, "\n", {"\n"}},
    {PreKind::kGpt2, "a\n", {"a", "\n"}},
    {PreKind::kGpt2, " ", {" "}},
    {PreKind::kGpt2, "$100,000.00 #hashtag @user", {"$", "100", ",", "000", ".", "00", " #", "hashtag", " @", "user"}},
  // kLlama3
    {PreKind::kLlama3, "Hello world", {"Hello", " world"}},
    {PreKind::kLlama3, "I'm here, it's John's; WE'LL SEE'S 'S 'Ve 'LL 'd'x", {"I", "'m", " here", ",", " it", "'s", " John", "'s", ";", " WE", "'LL", " SEE", "'S", " '", "S", " '", "Ve", " '", "LL", " '", "d", "'x"}},
    {PreKind::kLlama3, "don't'sam 'twas", {"don", "'t", "'s", "am", " '", "twas"}},
    {PreKind::kLlama3, "12345 1234567 3.14159 x2y", {"123", "45", " ", "123", "456", "7", " ", "3", ".", "141", "59", " x", "2", "y"}},
    {PreKind::kLlama3, "a  b   c    ", {"a", " ", " b", "  ", " c", "    "}},
    {PreKind::kLlama3, "   leading and trailing   ", {"  ", " leading", " and", " trailing", "   "}},
    {PreKind::kLlama3, "tab\tand\t\tnl\n\nend\n", {"tab", "\tand", "\t", "\tnl", "\n\n", "end", "\n"}},
    {PreKind::kLlama3, "line1\r\nline2\r\n\r\n  \n x", {"line", "1", "\r\n", "line", "2", "\r\n\r\n  \n", " x"}},
    {PreKind::kLlama3, "!!!\n\n??? ... --\r\n\tx", {"!!!\n\n", "???", " ...", " --\r\n", "\tx"}},
    {PreKind::kLlama3, "  \n\n  word", {"  \n\n", " ", " word"}},
    {PreKind::kLlama3, "(parens) [brackets] {braces} \"quotes\"", {"(parens", ")", " [", "brackets", "]", " {", "braces", "}", " \"", "quotes", "\""}},
    {PreKind::kLlama3, "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85 \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", {"\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7", " \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85", " \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", " \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82"}},
    {PreKind::kLlama3, "e\xcc\x81t\xc3\xa9 cafe\xcc\x81 na\xcc\x88ive", {"e", "\xcc\x81t\xc3\xa9", " cafe", "\xcc\x81", " na", "\xcc\x88ive"}},
    {PreKind::kLlama3, "emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x81 x\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbdy", {"emoji", " \xf0\x9f\x98\x80\xf0\x9f\x98\x81", " x", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "y"}},
    {PreKind::kLlama3, "\xc2\xa0nbsp\xe3\x80\x80ideo\xe2\x80\xa8ls \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4 \xc2\xbd\xe2\x85\xa7", {"\xc2\xa0nbsp", "\xe3\x80\x80ideo", "\xe2\x80\xa8ls", " ", "\xd9\xa1\xd9\xa2\xd9\xa3", "\xd9\xa4", " ", "\xc2\xbd\xe2\x85\xa7"}},
    {PreKind::kLlama3, "'\xc5\xbf long s", {"'\xc5\xbf", " long", " s"}},
    {PreKind::kLlama3, "x\xc2\x85y \xef\xbb\xbfz", {"x", "\xc2\x85y", " \xef\xbb\xbf", "z"}},
    {PreKind::kLlama3, "MixedCASE_snake_case camelCase123abc", {"MixedCASE", "_snake", "_case", " camelCase", "123", "abc"}},
    {PreKind::kLlama3, "    ", {"    "}},
    {PreKind::kLlama3, "\n", {"\n"}},
    {PreKind::kLlama3, "a\n", {"a", "\n"}},
    {PreKind::kLlama3, " ", {" "}},
    {PreKind::kLlama3, "$100,000.00 #hashtag @user", {"$", "100", ",", "000", ".", "00", " #", "hashtag", " @", "user"}},
  // kQwen2
    {PreKind::kQwen2, "Hello world", {"Hello", " world"}},
    {PreKind::kQwen2, "I'm here, it's John's; WE'LL SEE'S 'S 'Ve 'LL 'd'x", {"I", "'m", " here", ",", " it", "'s", " John", "'s", ";", " WE", "'LL", " SEE", "'S", " '", "S", " '", "Ve", " '", "LL", " '", "d", "'x"}},
    {PreKind::kQwen2, "don't'sam 'twas", {"don", "'t", "'s", "am", " '", "twas"}},
    {PreKind::kQwen2, "12345 1234567 3.14159 x2y", {"1", "2", "3", "4", "5", " ", "1", "2", "3", "4", "5", "6", "7", " ", "3", ".", "1", "4", "1", "5", "9", " x", "2", "y"}},
    {PreKind::kQwen2, "a  b   c    ", {"a", " ", " b", "  ", " c", "    "}},
    {PreKind::kQwen2, "   leading and trailing   ", {"  ", " leading", " and", " trailing", "   "}},
    {PreKind::kQwen2, "tab\tand\t\tnl\n\nend\n", {"tab", "\tand", "\t", "\tnl", "\n\n", "end", "\n"}},
    {PreKind::kQwen2, "line1\r\nline2\r\n\r\n  \n x", {"line", "1", "\r\n", "line", "2", "\r\n\r\n  \n", " x"}},
    {PreKind::kQwen2, "!!!\n\n??? ... --\r\n\tx", {"!!!\n\n", "???", " ...", " --\r\n", "\tx"}},
    {PreKind::kQwen2, "  \n\n  word", {"  \n\n", " ", " word"}},
    {PreKind::kQwen2, "(parens) [brackets] {braces} \"quotes\"", {"(parens", ")", " [", "brackets", "]", " {", "braces", "}", " \"", "quotes", "\""}},
    {PreKind::kQwen2, "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85 \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", {"\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7", " \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85", " \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", " \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82"}},
    {PreKind::kQwen2, "e\xcc\x81t\xc3\xa9 cafe\xcc\x81 na\xcc\x88ive", {"e", "\xcc\x81t\xc3\xa9", " cafe", "\xcc\x81", " na", "\xcc\x88ive"}},
    {PreKind::kQwen2, "emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x81 x\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbdy", {"emoji", " \xf0\x9f\x98\x80\xf0\x9f\x98\x81", " x", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "y"}},
    {PreKind::kQwen2, "\xc2\xa0nbsp\xe3\x80\x80ideo\xe2\x80\xa8ls \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4 \xc2\xbd\xe2\x85\xa7", {"\xc2\xa0nbsp", "\xe3\x80\x80ideo", "\xe2\x80\xa8ls", " ", "\xd9\xa1", "\xd9\xa2", "\xd9\xa3", "\xd9\xa4", " ", "\xc2\xbd", "\xe2\x85\xa7"}},
    {PreKind::kQwen2, "'\xc5\xbf long s", {"'\xc5\xbf", " long", " s"}},
    {PreKind::kQwen2, "x\xc2\x85y \xef\xbb\xbfz", {"x", "\xc2\x85y", " \xef\xbb\xbf", "z"}},
    {PreKind::kQwen2, "MixedCASE_snake_case camelCase123abc", {"MixedCASE", "_snake", "_case", " camelCase", "1", "2", "3", "abc"}},
    {PreKind::kQwen2, "    ", {"    "}},
    {PreKind::kQwen2, "\n", {"\n"}},
    {PreKind::kQwen2, "a\n", {"a", "\n"}},
    {PreKind::kQwen2, " ", {" "}},
    {PreKind::kQwen2, "$100,000.00 #hashtag @user", {"$", "1", "0", "0", ",", "0", "0", "0", ".", "0", "0", " #", "hashtag", " @", "user"}},
  };
  return c;
}

std::vector<std::string> split(PreKind kind, const std::string& text) {
  std::vector<uint32_t> ends;
  qsp::tok::pretokenize(kind, text.data(), text.size(), &ends);
  std::vector<std::string> out;
  uint32_t b = 0;
  for (uint32_t e : ends) {
    REQUIRE(e > b);
    out.push_back(text.substr(b, e - b));
    b = e;
  }
  REQUIRE(b == text.size());
  return out;
}

}  // namespace

TEST_CASE("pretokenize: every case splits as the regex does", "[tokenizer][pretok]") {
  for (const Case& c : cases()) {
    INFO("kind " << int(c.kind) << " text \"" << c.text << "\"");
    CHECK(split(c.kind, c.text) == c.pieces);
  }
}

TEST_CASE("pretokenize: empty text gives no pieces", "[tokenizer][pretok]") {
  for (PreKind k : {PreKind::kGpt2, PreKind::kLlama3, PreKind::kQwen2}) CHECK(split(k, "").empty());
}
