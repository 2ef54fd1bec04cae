// Untrusted bytes (a file's key, a token's text) made printable and bounded
// for error messages: printable ASCII kept, every other byte as \xNN, at most
// `max` bytes then "...". Used by the GGUF reader and the tokenizer.
#pragma once

#include <cstdio>
#include <string>

namespace qsp {

inline std::string printable(const std::string& s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace qsp
