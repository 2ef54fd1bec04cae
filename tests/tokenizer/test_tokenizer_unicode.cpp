// The Unicode helpers: GPT-2's byte map, the replacement of invalid UTF-8,
// the incomplete tail a stream holds back, character classes and NFC.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "tokenizer/unicode.h"

using namespace qsp::tok;

TEST_CASE("byte map: a bijection onto printable code points, GPT-2's", "[tokenizer][unicode]") {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_to_cp(uint8_t(b));
    CHECK(seen.insert(cp).second);
    CHECK(byte_of_cp(cp) == b);
    // Printable: neither a control character nor a space (classes of the pre-tokenizers).
    CHECK((char_class(cp) & kSpace) == 0);
    CHECK(cp > 0x20);
  }
  // From GPT-2's bytes_to_unicode(): printable bytes map to themselves; the
  // others count up from U+0100 in byte order (0x00..0x20 are 33 bytes, then
  // 0x7F..0xA0 34, then 0xAD).
  CHECK(byte_to_cp('A') == 'A');
  CHECK(byte_to_cp(0xE9) == 0xE9);
  CHECK(byte_to_cp(0x00) == 0x100);
  CHECK(byte_to_cp(' ') == 0x120);   // 'Ġ' of GPT-2's vocabularies
  CHECK(byte_to_cp('\n') == 0x10A);  // 'Ċ'
  CHECK(byte_to_cp(0x7F) == 0x121);
  CHECK(byte_to_cp(0xA0) == 0x142);
  CHECK(byte_to_cp(0xAD) == 0x143);
  CHECK(byte_of_cp(0x144) == -1);
  CHECK(byte_of_cp(0x20) == -1);
  CHECK(byte_of_cp(0x4E00) == -1);
}

TEST_CASE("invalid UTF-8: each maximal invalid subpart becomes U+FFFD", "[tokenizer][unicode]") {
  auto fix = [](const std::string& s) {
    std::string out;
    return replace_invalid_utf8(s.data(), s.size(), &out) ? out : std::string("<valid>");
  };
  const std::string R = "\xEF\xBF\xBD";
  CHECK(fix("plain \xC3\xA9 \xF0\x9F\x98\x80") == "<valid>");
  CHECK(fix("") == "<valid>");
  // The example of the Unicode standard (chapter 3, "U+FFFD Substitution of
  // Maximal Subparts", table 3-8): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  CHECK(fix("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64") ==
        "a" + R + R + R + "b" + R + "c" + R + R + "d");
  CHECK(fix("a\xFF" "b") == "a" + R + "b");
  CHECK(fix("\xC0\xAF") == R + R);                // overlong: C0 is never valid
  CHECK(fix("\xE0\x80\x80") == R + R + R);        // E0 needs A0..BF next
  CHECK(fix("\xED\xA0\x80") == R + R + R);        // a surrogate
  CHECK(fix("\xF4\x90\x80\x80") == R + R + R + R);  // above U+10FFFF
  CHECK(fix("\xF0\x9F\x98") == R);                // truncated at the end: one subpart
  CHECK(fix("\xF0\x9F\x98x") == R + "x");
  CHECK(fix("\xE2\x82") == R);
  CHECK(fix("\x80") == R);
}

TEST_CASE("incomplete tail: only a valid prefix cut by the end is held", "[tokenizer][unicode]") {
  auto tail = [](const std::string& s) { return incomplete_utf8_tail(s.data(), s.size()); };
  CHECK(tail("") == 0);
  CHECK(tail("abc") == 0);
  CHECK(tail("a\xC3") == 1);
  CHECK(tail("a\xC3\xA9") == 0);
  CHECK(tail("\xE2\x82") == 2);
  CHECK(tail("\xF0\x9F\x98") == 3);
  CHECK(tail("\xF0\x9F\x98\x80") == 0);
  CHECK(tail("\xE0\x80") == 0);  // E0 80 can never become valid
  CHECK(tail("\xFF") == 0);
  CHECK(tail("\x80\x80") == 0);
  CHECK(tail("\xC3\xC3") == 1);
}

TEST_CASE("character classes follow the Unicode categories", "[tokenizer][unicode]") {
  CHECK(char_class('a') == kLetter);
  CHECK(char_class('7') == kNumber);
  CHECK(char_class(' ') == kSpace);
  CHECK(char_class('\t') == kSpace);
  CHECK(char_class('!') == 0);
  CHECK(char_class(0x4E16) == kLetter);   // 世 Lo
  CHECK(char_class(0x2167) == kNumber);   // Ⅷ Nl
  CHECK(char_class(0x00BD) == kNumber);   // ½ No
  CHECK(char_class(0x0663) == kNumber);   // ٣ Nd
  CHECK(char_class(0x0301) == 0);         // combining acute: Mn
  CHECK(char_class(0x1F600) == 0);        // 😀 So
  CHECK(char_class(0x0085) == kSpace);    // NEL: White_Space
  CHECK(char_class(0x3000) == kSpace);
  CHECK(char_class(0xFEFF) == 0);         // not White_Space (JavaScript's \s differs)
  CHECK(char_class(0x200B) == 0);
  CHECK(std::string(unicode_version()).find('.') != std::string::npos);
}

TEST_CASE("nfc composes and leaves ASCII alone", "[tokenizer][unicode]") {
  CHECK(nfc("e\xCC\x81", 3) == "\xC3\xA9");
  CHECK(nfc("\xE2\x84\xAB", 3) == "\xC3\x85");  // U+212B ANGSTROM SIGN -> U+00C5
  CHECK(nfc("abc", 3) == "abc");
  const std::string nul("a\0b", 3);
  CHECK(nfc(nul.data(), nul.size()) == nul);
}
