#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <new>

#include "common/error.h"

namespace qsp {
namespace tok {

namespace {

struct AsciiClasses {
  uint8_t c[128] = {};
  AsciiClasses() {
    for (int i = 0; i < 128; ++i) {
      if ((i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z')) c[i] = kLetter;
      if (i >= '0' && i <= '9') c[i] = kNumber;
      if ((i >= 0x09 && i <= 0x0D) || i == 0x20) c[i] = kSpace;
    }
  }
};
const AsciiClasses kAscii;

// The White_Space property (PropList.txt; unchanged since Unicode 6.3).
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

uint8_t char_class(uint32_t cp) {
  if (cp < 128) return kAscii.c[cp];
  if (is_white_space(cp)) return kSpace;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return kLetter;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return kNumber;
    default:
      return 0;
  }
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid sequence at s[i] (1..4), or -k: the first k bytes are a
// maximal invalid subpart (k >= 1). Table 3-7 of the Unicode standard.
int sequence_at(const unsigned char* s, size_t n, size_t i) {
  const unsigned c = s[i];
  if (c < 0x80) return 1;
  int len;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if (i + size_t(k) >= n) return -k;
    const unsigned b = s[i + size_t(k)];
    const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return -k;
  }
  return len;
}

}  // namespace

bool replace_invalid_utf8(const char* str, size_t n, std::string* out) {
  const auto* s = reinterpret_cast<const unsigned char*>(str);
  size_t i = 0;
  // Fast scan: most text is valid.
  while (i < n) {
    const int k = sequence_at(s, n, i);
    if (k < 0) break;
    i += size_t(k);
  }
  if (i == n) return false;
  out->reserve(out->size() + n + 8);
  out->append(str, i);
  while (i < n) {
    const int k = sequence_at(s, n, i);
    if (k > 0) {
      out->append(str + i, size_t(k));
      i += size_t(k);
    } else {
      out->append("\xEF\xBF\xBD");
      i += size_t(-k);
    }
  }
  return true;
}

size_t incomplete_utf8_tail(const char* str, size_t n) {
  const auto* s = reinterpret_cast<const unsigned char*>(str);
  // A sequence is at most 4 bytes: its lead is among the last 3 bytes.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    if ((s[i] & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    if (s[i] < 0xC2 || s[i] > 0xF4) return 0;  // ASCII or a byte no sequence starts with
    const int k = sequence_at(s, n, i);
    // Incomplete: the bytes up to the end are a valid prefix cut by the end.
    return (k < 0 && i + size_t(-k) == n) ? back : 0;
  }
  return 0;
}

std::string nfc(const char* s, size_t n) {
  size_t i = 0;
  while (i < n && static_cast<unsigned char>(s[i]) < 0x80) ++i;
  if (i == n) return std::string(s, n);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s), utf8proc_ssize_t(n), &out,
                                            utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (len < 0) {
    if (len == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    throw Error(QSP_ERR_INTERNAL, std::string("utf8proc_map: ") + utf8proc_errmsg(len));
  }
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> hold(out, std::free);
  return std::string(reinterpret_cast<const char*>(out), size_t(len));
}

namespace {

// GPT-2's bytes_to_unicode(): the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ map
// to themselves; the other 68 bytes, in order, to U+0100, U+0101, ...
struct ByteMap {
  uint32_t to_cp[256];
  int16_t from_cp[512];  // every image is below U+0144
  ByteMap() {
    for (auto& f : from_cp) f = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = keep ? uint32_t(b) : next++;
      from_cp[to_cp[b]] = int16_t(b);
    }
  }
};
const ByteMap kByteMap;

}  // namespace

uint32_t byte_to_cp(uint8_t b) { return kByteMap.to_cp[b]; }
int byte_of_cp(uint32_t cp) { return cp < 512 ? kByteMap.from_cp[cp] : -1; }

const char* unicode_version() { return utf8proc_unicode_version(); }

}  // namespace tok
}  // namespace qsp
