// Unicode helpers of the tokenizer (internal): UTF-8 decoding with the
// WHATWG replacement of invalid input, the character classes the
// pre-tokenizers use (from utf8proc), NFC, and GPT-2's byte <-> code point map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qsp {
namespace tok {

// Character classes of the pre-tokenizer regexes.
enum : uint8_t {
  kLetter = 1,  // \p{L}: Lu Ll Lt Lm Lo
  kNumber = 2,  // \p{N}: Nd Nl No
  kSpace = 4,   // \s: the Unicode White_Space property (what the Rust regex crate and
                // Oniguruma match); not JavaScript's \s, which adds U+FEFF and drops U+0085
};
uint8_t char_class(uint32_t cp);

// Appends `s` (n bytes) to `out` with every maximal invalid subpart of a
// UTF-8 sequence replaced by U+FFFD (the Unicode "best practice" of U+FFFD
// substitution that the WHATWG decoder and JavaScript's TextDecoder follow).
// Returns false, appending nothing, when `s` is already valid UTF-8.
bool replace_invalid_utf8(const char* s, size_t n, std::string* out);

// Decodes one code point of valid UTF-8 at s[*i] (advancing *i).
inline uint32_t next_cp(const unsigned char* s, size_t* i) {
  const uint32_t c = s[*i];
  if (c < 0x80) {
    *i += 1;
    return c;
  }
  if (c < 0xE0) {
    const uint32_t r = ((c & 0x1F) << 6) | (s[*i + 1] & 0x3F);
    *i += 2;
    return r;
  }
  if (c < 0xF0) {
    const uint32_t r = ((c & 0x0F) << 12) | ((s[*i + 1] & 0x3F) << 6) | (s[*i + 2] & 0x3F);
    *i += 3;
    return r;
  }
  const uint32_t r = ((c & 0x07) << 18) | ((s[*i + 1] & 0x3F) << 12) | ((s[*i + 2] & 0x3F) << 6) | (s[*i + 3] & 0x3F);
  *i += 4;
  return r;
}
void append_utf8(uint32_t cp, std::string* out);

// Length of the trailing bytes of `s` that begin a UTF-8 sequence but do not
// complete it (0..3): what a stream holds back. Bytes that can never be part
// of a valid sequence are not held back.
size_t incomplete_utf8_tail(const char* s, size_t n);

// NFC of valid UTF-8 (utf8proc); ASCII text is returned as it is.
std::string nfc(const char* s, size_t n);

// GPT-2's byte-level map: every byte to a printable code point and back.
uint32_t byte_to_cp(uint8_t b);
int byte_of_cp(uint32_t cp);  // -1 when cp is not the image of a byte

// The Unicode version of the character data (utf8proc's), e.g. "15.0.0".
const char* unicode_version();

}  // namespace tok
}  // namespace qsp
