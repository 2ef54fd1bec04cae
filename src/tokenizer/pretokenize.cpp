#include "tokenizer/pretokenize.h"

#include <cstdint>

#include "common/error.h"
#include "tokenizer/unicode.h"

namespace qsp {
namespace tok {

namespace {

// The text decoded once: code points, their classes and byte offsets.
struct Decoded {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> off;  // cp.size() + 1 entries
  size_t n = 0;

  void decode(const char* text, size_t len) {
    const auto* s = reinterpret_cast<const unsigned char*>(text);
    cp.clear(), cls.clear(), off.clear();
    cp.reserve(len), cls.reserve(len), off.reserve(len + 1);
    size_t i = 0;
    while (i < len) {
      off.push_back(uint32_t(i));
      const uint32_t c = next_cp(s, &i);
      cp.push_back(c);
      cls.push_back(char_class(c));
    }
    off.push_back(uint32_t(len));
    n = cp.size();
  }
  bool is(size_t i, uint8_t c) const { return i < n && (cls[i] & c); }
  bool space(size_t i) const { return is(i, kSpace); }
  bool letter(size_t i) const { return is(i, kLetter); }
  bool number(size_t i) const { return is(i, kNumber); }
  // [^\s\p{L}\p{N}]
  bool other(size_t i) const { return i < n && cls[i] == 0; }
  bool crlf(size_t i) const { return i < n && (cp[i] == '\r' || cp[i] == '\n'); }
  uint32_t at(size_t i) const { return i < n ? cp[i] : 0; }
};

// ASCII letter c, either case (the (?i:...) of the contractions).
bool ieq(uint32_t x, char c) { return x == uint32_t(c) || x == uint32_t(c - 32); }

// 's|'t|'re|'ve|'m|'ll|'d at i; case-insensitive when `ci`: then the ASCII
// letters of either case and U+017F (long s, whose simple case fold is 's', as
// the Rust regex crate and Oniguruma fold) match. Returns the length or 0.
size_t contraction(const Decoded& d, size_t i, bool ci) {
  if (d.at(i) != '\'') return 0;
  const uint32_t a = d.at(i + 1), b = d.at(i + 2);
  auto eq = [ci](uint32_t x, char c) { return ci ? ieq(x, c) : x == uint32_t(c); };
  if (eq(a, 's') || (ci && a == 0x17F) || eq(a, 't') || eq(a, 'm') || eq(a, 'd')) return 2;
  if ((eq(a, 'r') && eq(b, 'e')) || (eq(a, 'v') && eq(b, 'e')) || (eq(a, 'l') && eq(b, 'l'))) return 3;
  return 0;
}

// The end of the whitespace run starting at i.
size_t space_run(const Decoded& d, size_t i) {
  while (d.space(i)) ++i;
  return i;
}

// \s+(?!\S)|\s+ at i (d.space(i) holds): the whole run when it ends the text
// or is one character; otherwise all but its last character, which the next
// piece takes (backtracking of \s+ until (?!\S) holds).
size_t spaces(const Decoded& d, size_t i) {
  const size_t e = space_run(d, i);
  if (e == d.n || e - i == 1) return e;
  return e - 1;
}

size_t match_gpt2(const Decoded& d, size_t i) {
  if (size_t k = contraction(d, i, false)) return i + k;
  const size_t j = i + (d.at(i) == ' ' ? 1 : 0);  // the optional leading space
  size_t e = j;
  if (d.letter(j)) {  //  ?\p{L}+
    while (d.letter(e)) ++e;
    return e;
  }
  if (d.number(j)) {  //  ?\p{N}+
    while (d.number(e)) ++e;
    return e;
  }
  if (d.other(j)) {  //  ?[^\s\p{L}\p{N}]+
    while (d.other(e)) ++e;
    return e;
  }
  return spaces(d, i);  // \s+(?!\S)|\s+ (d.space(i): every other case matched above)
}

size_t match_llama3(const Decoded& d, size_t i, size_t max_digits) {
  if (size_t k = contraction(d, i, true)) return i + k;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (!d.letter(j) && !d.number(j) && !d.crlf(j) && d.letter(j + 1)) ++j;
    if (d.letter(j)) {
      while (d.letter(j)) ++j;
      return j;
    }
  }
  // \p{N}{1,max}
  if (d.number(i)) {
    size_t e = i + 1;
    while (e - i < max_digits && d.number(e)) ++e;
    return e;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    const size_t j = i + (d.at(i) == ' ' ? 1 : 0);
    if (d.other(j)) {
      size_t e = j;
      while (d.other(e)) ++e;
      while (d.crlf(e)) ++e;
      return e;
    }
  }
  // Now d.space(i) holds: every other character matched above.
  // \s*[\r\n]+: \s* backtracks to the last \r or \n of the run; [\r\n]+ then
  // ends right after it.
  const size_t e = space_run(d, i);
  for (size_t k = e; k > i; --k)
    if (d.crlf(k - 1)) return k;
  return spaces(d, i);  // \s+(?!\S)|\s+
}

}  // namespace

void pretokenize(PreKind kind, const char* text, size_t n, std::vector<uint32_t>* ends) {
  if (n >= size_t(UINT32_MAX))  // byte offsets are 32-bit
    throw Error(QSP_ERR_INVALID_ARGUMENT, "the text is 4 GiB or more after invalid UTF-8 replacement and NFC");
  thread_local Decoded d;
  d.decode(text, n);
  ends->clear();
  size_t i = 0;
  while (i < d.n) {
    size_t e;
    switch (kind) {
      case PreKind::kGpt2: e = match_gpt2(d, i); break;
      case PreKind::kLlama3: e = match_llama3(d, i, 3); break;
      default: e = match_llama3(d, i, 1); break;
    }
    if (e <= i) e = i + 1;  // unreachable: every character matches some alternative
    ends->push_back(d.off[e]);
    i = e;
  }
  // The buffers are kept for the next call on this thread, unless a large
  // text made them large (9 bytes per code point).
  if (d.cp.capacity() > (size_t(1) << 20)) d = Decoded();
}

}  // namespace tok
}  // namespace qsp
