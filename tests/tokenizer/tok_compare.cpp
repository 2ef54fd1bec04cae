// qsp's tokenizer against a reference tokenizer (tests/tokenizer/README.md):
//   tok_compare NAME MODEL.gguf CORPUS REF [--show N]
// MODEL.gguf carries the vocabulary (`qsp synth --tokenizer ... --vocab-only`),
// CORPUS holds one string per line as base64 of its bytes
// (corpus/corpus.b64), REF the reference's answers for them, one line each
// (ref/reference.mjs): ids, ids with the specials a plain encode adds,
// base64 of decode(ids) and base64 of the text the reference saw.
// For every string it checks, through the public C API only:
//   ids        qsp_tokenize(text, PARSE_SPECIAL) == the reference's ids
//              (Hugging Face splits special tokens out of text by default);
//   +specials  qsp_tokenize(text, PARSE_SPECIAL | ADD_SPECIAL) == the
//              reference's encode with add_special_tokens;
//   decode     qsp_detokenize(reference ids) == the reference's decode;
//   stream     the reference ids pushed one by one through a qsp_text_stream,
//              plus the flush, == qsp_detokenize of them;
//   roundtrip  for valid UTF-8 the reference leaves unchanged (its decode is
//              the text: no normalization happened), qsp_detokenize(qsp's
//              ids) == the original bytes.
// Prints the first N (default 8) failures of each check in full and one
// summary line; exits 1 on any failure, 2 on a usage or setup error.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

namespace {

using Ids = std::vector<int32_t>;

std::string b64decode(const std::string& s) {
  static int8_t table[256];
  static bool init = false;
  if (!init) {
    std::memset(table, -1, sizeof table);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) table[uint8_t(a[i])] = int8_t(i);
    init = true;
  }
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=' || c == '\r') break;
    const int v = table[uint8_t(c)];
    if (v < 0) {
      std::fprintf(stderr, "tok_compare: bad base64 character 0x%02x\n", uint8_t(c));
      std::exit(2);
    }
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  return out;
}

Ids parse_ids(const std::string& s) {
  Ids ids;
  std::istringstream in(s);
  long long v;
  while (in >> v) ids.push_back(int32_t(v));
  return ids;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  size_t p = 0;
  for (;;) {
    const size_t q = line.find('\t', p);
    f.push_back(line.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return f;
}

std::vector<std::string> read_lines(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tok_compare: cannot open %s\n", path);
    std::exit(2);
  }
  std::vector<std::string> lines;
  std::string l;
  while (std::getline(in, l)) lines.push_back(l);
  return lines;
}

// Whether s is valid UTF-8 (shortest forms, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    const unsigned c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

// The text as a C string literal: printable ASCII and (when all of s is valid
// UTF-8) other characters as they are, control bytes and the bytes of invalid
// UTF-8 as \xNN.
bool valid_utf8(const std::string& s);
std::string escaped(const std::string& s, size_t max = 400) {
  const bool utf8 = valid_utf8(s);
  std::string o = "\"";
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = uint8_t(s[i]);
    char buf[8];
    if (c == '\\' || c == '"') {
      o += '\\';
      o += char(c);
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\r') {
      o += "\\r";
    } else if (c == '\t') {
      o += "\\t";
    } else if (c >= 0x20 && c < 0x7F) {
      o += char(c);
    } else if (c >= 0x80 && utf8) {
      o += char(c);  // UTF-8 as is (the hex line shows the bytes)
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      o += buf;
    }
  }
  if (s.size() > max) o += "...";
  return o + "\"";
}

std::string hex(const std::string& s, size_t max = 200) {
  std::string o;
  char buf[4];
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", uint8_t(s[i]));
    if (i) o += ' ';
    o += buf;
  }
  if (s.size() > max) o += " ...";
  return o;
}

struct Checker {
  const qsp_tokenizer* tok;
  uint32_t n_vocab;

  std::string piece(int32_t id) const {
    if (id < 0 || uint32_t(id) >= n_vocab) return "<out of range>";
    char buf[512];
    uint64_t len = 0;
    if (qsp_token_piece(tok, id, 0, buf, sizeof buf, &len) != QSP_OK) return "<" + std::string(qsp_gguf_last_error()) + ">";
    return std::string(buf, size_t(len));
  }
  // "[n] id:"piece" id:"piece" ..." for ids[from, from + max)
  std::string ids_str(const Ids& ids, size_t from = 0, size_t max = 48) const {
    std::string o = "[" + std::to_string(ids.size()) + "]";
    if (from) o += " ... (from " + std::to_string(from) + ")";
    for (size_t i = from; i < ids.size() && i < from + max; ++i)
      o += " " + std::to_string(ids[i]) + ":" + escaped(piece(ids[i]), 40);
    if (ids.size() > from + max) o += " ...";
    return o;
  }
  // Both lists in full (ids only), then both with pieces from a little
  // before the first difference.
  std::string diff_str(const Ids& ref, const Ids& got) const {
    size_t k = 0;
    while (k < ref.size() && k < got.size() && ref[k] == got[k]) ++k;
    auto all = [](const Ids& ids) {
      std::string o;
      for (int32_t id : ids) o += " " + std::to_string(id);
      return o;
    };
    const size_t from = k > 6 ? k - 6 : 0;
    return "  ref ids:" + all(ref) + "\n  qsp ids:" + all(got) + "\n  first difference at index " + std::to_string(k) +
           "\n  ref: " + ids_str(ref, from) + "\n  qsp: " + ids_str(got, from) + "\n";
  }
  bool tokenize(const std::string& text, uint32_t flags, Ids* ids, std::string* err) const {
    uint64_t n = 0;
    ids->assign(text.size() + 8, 0);
    qsp_status st = qsp_tokenize(tok, text.data(), text.size(), flags, ids->data(), ids->size(), &n);
    if (st == QSP_ERR_BUFFER_TOO_SMALL) {
      ids->assign(size_t(n), 0);
      st = qsp_tokenize(tok, text.data(), text.size(), flags, ids->data(), ids->size(), &n);
    }
    if (st != QSP_OK) {
      *err = std::string("qsp_tokenize: ") + qsp_status_string(st) + ": " + qsp_gguf_last_error();
      return false;
    }
    ids->resize(size_t(n));
    return true;
  }
  bool detokenize(const Ids& ids, std::string* out, std::string* err) const {
    uint64_t n = 0;
    qsp_status st = qsp_detokenize(tok, ids.data(), ids.size(), 0, nullptr, 0, &n);
    if (st != QSP_OK && st != QSP_ERR_BUFFER_TOO_SMALL) {
      *err = std::string("qsp_detokenize: ") + qsp_status_string(st) + ": " + qsp_gguf_last_error();
      return false;
    }
    out->assign(size_t(n), '\0');
    st = qsp_detokenize(tok, ids.data(), ids.size(), 0, out->empty() ? nullptr : &(*out)[0], out->size(), &n);
    if (st != QSP_OK) {
      *err = std::string("qsp_detokenize: ") + qsp_status_string(st) + ": " + qsp_gguf_last_error();
      return false;
    }
    out->resize(size_t(n));
    return true;
  }
  bool stream(const Ids& ids, uint32_t max_piece, std::string* out, std::string* err) const {
    qsp_text_stream* s = nullptr;
    if (qsp_text_stream_create(tok, 0, &s) != QSP_OK) {
      *err = std::string("qsp_text_stream_create: ") + qsp_gguf_last_error();
      return false;
    }
    std::vector<char> buf(max_piece + 4);
    out->clear();
    bool ok = true;
    for (int32_t id : ids) {
      uint64_t len = 0;
      const qsp_status st = qsp_text_stream_push(s, id, buf.data(), buf.size(), &len);
      if (st != QSP_OK) {
        *err = std::string("qsp_text_stream_push(") + std::to_string(id) + "): " + qsp_status_string(st) + ": " +
               qsp_gguf_last_error();
        ok = false;
        break;
      }
      out->append(buf.data(), size_t(len));
    }
    if (ok) {
      uint64_t len = 0;
      const qsp_status st = qsp_text_stream_flush(s, buf.data(), buf.size(), &len);
      if (st != QSP_OK) {
        *err = std::string("qsp_text_stream_flush: ") + qsp_status_string(st) + ": " + qsp_gguf_last_error();
        ok = false;
      } else {
        out->append(buf.data(), size_t(len));
      }
    }
    qsp_text_stream_destroy(s);
    return ok;
  }
};

struct Tally {
  const char* name;
  size_t checked = 0, failed = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: tok_compare NAME MODEL.gguf CORPUS REF [--show N]\n");
    return 2;
  }
  const char* name = argv[1];
  size_t show = 8;
  for (int i = 5; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--show") == 0) show = size_t(std::strtoul(argv[i + 1], nullptr, 10));

  qsp_gguf* g = nullptr;
  if (qsp_gguf_open(argv[2], &g) != QSP_OK) {
    std::fprintf(stderr, "tok_compare: %s: %s\n", argv[2], qsp_gguf_last_error());
    return 2;
  }
  qsp_tokenizer* tok = nullptr;
  if (qsp_tokenizer_create(g, &tok) != QSP_OK) {
    std::fprintf(stderr, "tok_compare: qsp_tokenizer_create(%s): %s\n", argv[2], qsp_gguf_last_error());
    qsp_gguf_close(g);
    return 1;
  }
  qsp_gguf_close(g);  // the tokenizer copies what it needs
  qsp_tokenizer_info info;
  qsp_tokenizer_info_init(&info);
  if (qsp_tokenizer_get_info(tok, &info) != QSP_OK) {
    std::fprintf(stderr, "tok_compare: qsp_tokenizer_get_info: %s\n", qsp_gguf_last_error());
    return 1;
  }
  std::printf("%s: qsp tokenizer %s / %s, %u tokens, bos %d eos %d eot %d add_bos %d, Unicode %s\n", name, info.model,
              info.pre, info.n_vocab, info.bos_id, info.eos_id, info.eot_id, info.add_bos,
              info.unicode_version ? info.unicode_version : "?");

  const std::vector<std::string> corpus = read_lines(argv[3]);
  const std::vector<std::string> ref = read_lines(argv[4]);
  if (corpus.size() != ref.size()) {
    std::fprintf(stderr, "tok_compare: %s has %zu lines, %s %zu\n", argv[3], corpus.size(), argv[4], ref.size());
    return 2;
  }
  const Checker c{tok, info.n_vocab};
  Tally t_ids{"ids"}, t_special{"+specials"}, t_decode{"decode"}, t_stream{"stream"}, t_round{"roundtrip"};
  Tally* tallies[] = {&t_ids, &t_special, &t_decode, &t_stream, &t_round};
  size_t n_invalid = 0, n_bytes = 0;
  double tokenize_seconds = 0, slowest = 0;
  size_t slowest_i = 0;

  auto report = [&](Tally& t, size_t i, const std::string& text, const std::string& what) {
    ++t.failed;
    if (t.failed > show) return;
    std::printf("\n--- %s: %s mismatch, string %zu (%zu bytes%s)\n", name, t.name, i, text.size(),
                valid_utf8(text) ? "" : ", invalid UTF-8");
    std::printf("  text: %s\n  hex:  %s\n%s", escaped(text).c_str(), hex(text).c_str(), what.c_str());
  };

  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = b64decode(corpus[i]);
    const std::vector<std::string> f = split_tabs(ref[i]);
    if (f.size() != 4) {
      std::fprintf(stderr, "tok_compare: %s line %zu: %zu fields, want 4\n", argv[4], i + 1, f.size());
      return 2;
    }
    const Ids ref_ids = parse_ids(f[0]), ref_special = parse_ids(f[1]);
    const std::string ref_decoded = b64decode(f[2]), ref_text = b64decode(f[3]);
    const bool valid = valid_utf8(text);
    n_invalid += !valid;
    std::string err;

    Ids ids;
    ++t_ids.checked;
    n_bytes += text.size();
    const auto t0 = std::chrono::steady_clock::now();
    const bool tokenized = c.tokenize(text, QSP_TOKENIZE_PARSE_SPECIAL, &ids, &err);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tokenize_seconds += dt;
    if (dt > slowest) {
      slowest = dt;
      slowest_i = i;
    }
    if (!tokenized)
      report(t_ids, i, text, "  " + err + "\n");
    else if (ids != ref_ids)
      report(t_ids, i, text, c.diff_str(ref_ids, ids));

    Ids ids_special;
    ++t_special.checked;
    if (!c.tokenize(text, QSP_TOKENIZE_PARSE_SPECIAL | QSP_TOKENIZE_ADD_SPECIAL, &ids_special, &err))
      report(t_special, i, text, "  " + err + "\n");
    else if (ids_special != ref_special)
      report(t_special, i, text, c.diff_str(ref_special, ids_special));

    std::string decoded;
    ++t_decode.checked;
    const bool decoded_ok = c.detokenize(ref_ids, &decoded, &err);
    if (!decoded_ok)
      report(t_decode, i, text, "  " + err + "\n");
    else if (decoded != ref_decoded)
      report(t_decode, i, text,
             "  ids: " + c.ids_str(ref_ids) + "\n  ref decode: " + escaped(ref_decoded) + "\n             " +
                 hex(ref_decoded) + "\n  qsp decode: " + escaped(decoded) + "\n             " + hex(decoded) + "\n");

    std::string streamed;
    ++t_stream.checked;
    if (!c.stream(ref_ids, info.max_piece_bytes, &streamed, &err))
      report(t_stream, i, text, "  " + err + "\n");
    else if (decoded_ok && streamed != decoded)
      report(t_stream, i, text,
             "  ids: " + c.ids_str(ref_ids) + "\n  detokenize: " + hex(decoded) + "\n  stream:     " + hex(streamed) +
                 "\n");

    if (valid && ref_decoded == text && ref_text == text) {
      std::string back;
      ++t_round.checked;
      if (!c.detokenize(ids, &back, &err))
        report(t_round, i, text, "  " + err + "\n");
      else if (back != text)
        report(t_round, i, text, "  qsp ids: " + c.ids_str(ids) + "\n  back: " + escaped(back) + "\n  hex:  " + hex(back) + "\n");
    }
  }
  qsp_tokenizer_destroy(tok);

  size_t failed = 0;
  std::printf("\n%s: %zu strings (%zu invalid UTF-8):", name, corpus.size(), n_invalid);
  for (const Tally* t : tallies) {
    std::printf(" %s %zu/%zu%s", t->name, t->checked - t->failed, t->checked, t == tallies[4] ? "" : ",");
    failed += t->failed;
  }
  std::printf(" match\n");
  std::printf("%s: qsp_tokenize: %zu kB in %.0f ms (%.2f MB/s, one thread, first pass); slowest: string %zu, %.1f ms\n",
              name, n_bytes / 1000, tokenize_seconds * 1e3, tokenize_seconds > 0 ? n_bytes / tokenize_seconds / 1e6 : 0.0,
              slowest_i, slowest * 1e3);
  if (failed) std::printf("%s: FAILED (%zu mismatches)\n", name, failed);
  return failed ? 1 : 0;
}
