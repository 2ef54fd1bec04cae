// Tokenizer throughput on one CPU thread: MB/s and tokens/s of qsp_tokenize
// over a few MB of English text (the repository's Markdown documentation,
// repeated), with a Qwen3-sized vocabulary.
//
//   bench_tokenize [--json tokenizer.json] [--pre qwen2] [--text FILE]... [--mb 4] [--dump]
//
// --json: a Hugging Face tokenizer.json of a byte-level BPE model (e.g.
//   Qwen3's), read at run time and written as a GGUF vocabulary in memory
//   (tokens, merges, added tokens as control / user-defined), as llama.cpp's
//   converter would. Without it: a synthetic vocabulary of 151,643 tokens,
//   the 256 bytes plus merges that build the text's most frequent words
//   letter by letter (so most words take several merges, as in a real BPE).
// --dump: instead of timing, tokenize each NUL-terminated text of stdin
//   (PARSE_SPECIAL) and print its ids, space-separated, a line each (for
//   comparisons with a reference tokenizer).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_format.h"
#include "gguf_write/gguf_writer.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

#ifndef QSP_SOURCE_DIR
#define QSP_SOURCE_DIR "."
#endif

namespace {

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "bench_tokenize: %s\n", m.c_str());
  std::exit(1);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- A minimal JSON reader (what tokenizer.json needs) ----------------------
struct Json {
  enum Type { kNull, kBool, kNum, kStr, kArr, kObj } type = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;
  const Json* get(const std::string& k) const {
    for (const auto& kv : obj)
      if (kv.first == k) return &kv.second;
    return nullptr;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  Json parse() {
    Json j = value();
    ws();
    if (i_ != s_.size()) die("json: trailing data");
    return j;
  }

 private:
  void ws() {
    while (i_ < s_.size() && std::strchr(" \t\r\n", s_[i_])) ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) die("json: unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) die(std::string("json: expected ") + c);
    ++i_;
  }
  unsigned hex4() {
    if (i_ + 4 > s_.size()) die("json: bad \\u");
    const unsigned v = unsigned(std::stoul(s_.substr(i_, 4), nullptr, 16));
    i_ += 4;
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      c = s_[i_++];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(i_, 2, "\\u") == 0) {
            i_ += 2;
            const unsigned lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          qsp::tok::append_utf8(cp, &out);
          break;
        }
        default: out += c;
      }
    }
    ++i_;
    return out;
  }
  Json value() {
    Json j;
    const char c = peek();
    if (c == '{') {
      ++i_;
      j.type = Json::kObj;
      if (peek() == '}') {
        ++i_;
        return j;
      }
      for (;;) {
        std::string k = string();
        expect(':');
        j.obj.emplace_back(std::move(k), value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return j;
      }
    }
    if (c == '[') {
      ++i_;
      j.type = Json::kArr;
      if (peek() == ']') {
        ++i_;
        return j;
      }
      for (;;) {
        j.arr.push_back(value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return j;
      }
    }
    if (c == '"') {
      j.type = Json::kStr;
      j.str = string();
      return j;
    }
    if (s_.compare(i_, 4, "true") == 0 || s_.compare(i_, 5, "false") == 0) {
      j.type = Json::kBool;
      j.b = s_[i_] == 't';
      i_ += j.b ? 4 : 5;
      return j;
    }
    if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
      return j;
    }
    size_t end = 0;
    j.type = Json::kNum;
    j.num = std::stod(s_.substr(i_, 32), &end);
    i_ += end;
    return j;
  }
  const std::string& s_;
  size_t i_ = 0;
};

std::vector<uint8_t> i32_array(const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(12 + 4 * v.size());
  const uint32_t t = qsp::gguf::kInt32;
  const uint64_t n = v.size();
  std::memcpy(b.data(), &t, 4);
  std::memcpy(b.data() + 4, &n, 8);
  if (!v.empty()) std::memcpy(b.data() + 12, v.data(), 4 * v.size());
  return b;
}

std::vector<uint8_t> gguf_of(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
                             const std::vector<std::string>& merges, const std::string& pre) {
  qsp::gguf::Writer w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_raw("tokenizer.ggml.token_type", qsp::gguf::kArray, i32_array(types));
  w.add_string_array("tokenizer.ggml.merges", merges);
  return w.write_memory([](size_t, uint64_t, uint64_t, uint8_t*) {});
}

std::vector<uint8_t> from_json(const std::string& path, const std::string& pre) {
  const Json j = Parser(read_file(path)).parse();
  const Json* model = j.get("model");
  if (!model || !model->get("vocab") || !model->get("merges")) die(path + ": no model.vocab / model.merges");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto put = [&](size_t id, const std::string& s, int32_t type) {
    if (id >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, 5);
    }
    tokens[id] = s;
    types[id] = type;
  };
  for (const auto& kv : model->get("vocab")->obj) put(size_t(kv.second.num), kv.first, 1);
  if (const Json* added = j.get("added_tokens"))
    for (const Json& a : added->arr) put(size_t(a.get("id")->num), a.get("content")->str, a.get("special")->b ? 3 : 4);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].empty()) tokens[i] = "[PAD" + std::to_string(i) + "]";
  std::vector<std::string> merges;
  for (const Json& m : model->get("merges")->arr)
    merges.push_back(m.type == Json::kStr ? m.str : m.arr.at(0).str + " " + m.arr.at(1).str);
  return gguf_of(tokens, types, merges, pre);
}

std::string byte_level(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) qsp::tok::append_utf8(qsp::tok::byte_to_cp(c), &out);
  return out;
}

// The synthetic vocabulary: bytes, then every prefix of the most frequent
// pre-tokens (merge: prefix + next byte), up to 151,643 tokens.
std::vector<uint8_t> synthetic(const std::string& text, const std::string& pre) {
  const size_t kVocab = 151643;
  std::vector<uint32_t> ends;
  qsp::tok::pretokenize(qsp::tok::PreKind::kQwen2, text.data(), text.size(), &ends);
  std::unordered_map<std::string, size_t> freq;
  size_t b = 0;
  for (uint32_t e : ends) {
    ++freq[text.substr(b, e - b)];
    b = e;
  }
  std::vector<std::pair<size_t, std::string>> words;
  for (auto& kv : freq) words.push_back({kv.second, kv.first});
  std::sort(words.begin(), words.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  std::vector<std::string> tokens;
  std::unordered_map<std::string, size_t> have;
  for (int c = 0; c < 256; ++c) {
    have[std::string(1, char(c))] = tokens.size();
    tokens.push_back(byte_level(std::string(1, char(c))));
  }
  std::vector<std::string> merges;
  for (const auto& w : words) {
    for (size_t k = 2; k <= w.second.size() && tokens.size() < kVocab; ++k) {
      const std::string p = w.second.substr(0, k);
      if (have.count(p)) continue;
      have[p] = tokens.size();
      tokens.push_back(byte_level(p));
      merges.push_back(byte_level(p.substr(0, k - 1)) + " " + byte_level(p.substr(k - 1)));
    }
  }
  while (tokens.size() < kVocab) tokens.push_back("[UNUSED" + std::to_string(tokens.size()) + "]");
  std::vector<int32_t> types(tokens.size(), 1);
  return gguf_of(tokens, types, merges, pre);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string json, pre = "qwen2";
  std::vector<std::string> texts;
  double mb = 4;
  bool dump = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto arg = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--json") json = arg();
    else if (a == "--pre") pre = arg();
    else if (a == "--text") texts.push_back(arg());
    else if (a == "--mb") mb = std::atof(arg().c_str());
    else if (a == "--dump") dump = true;
    else die("unknown argument " + a + " (see the comment at the top of bench/bench_tokenize.cpp)");
  }
  if (texts.empty())
    for (const char* f : {"README.md", "docs/ARCHITECTURE.md", "docs/API.md", "docs/GGUF.md", "docs/RELIABILITY.md",
                          "docs/PACKAGING.md", "docs/CLI.md", "docs/ABI.md"})
      texts.push_back(std::string(QSP_SOURCE_DIR) + "/" + f);
  std::string corpus;
  for (const auto& t : texts) corpus += read_file(t) + "\n";
  std::string text;
  while (text.size() < size_t(mb * 1e6)) text += corpus;

  const std::vector<uint8_t> file = json.empty() ? synthetic(corpus, pre) : from_json(json, pre);
  qsp_gguf* g = nullptr;
  qsp_tokenizer* t = nullptr;
  if (qsp_gguf_open_memory(file.data(), file.size(), &g) != QSP_OK || qsp_tokenizer_create(g, &t) != QSP_OK)
    die(std::string("tokenizer: ") + qsp_gguf_last_error());
  qsp_tokenizer_info info;
  qsp_tokenizer_info_init(&info);
  qsp_tokenizer_get_info(t, &info);

  if (dump) {
    std::string line;
    std::vector<int32_t> ids;
    while (std::getline(std::cin, line, '\0')) {
      uint64_t n = 0;
      qsp_tokenize(t, line.data(), line.size(), QSP_TOKENIZE_PARSE_SPECIAL, nullptr, 0, &n);
      ids.resize(size_t(n));
      qsp_tokenize(t, line.data(), line.size(), QSP_TOKENIZE_PARSE_SPECIAL, ids.data(), ids.size(), &n);
      for (size_t k = 0; k < ids.size(); ++k) std::printf(k ? " %d" : "%d", ids[k]);
      std::printf("\n");
    }
    return 0;
  }

  std::vector<int32_t> ids(text.size() + 16);
  double best = 1e30;
  uint64_t n = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now_s();
    if (qsp_tokenize(t, text.data(), text.size(), 0, ids.data(), ids.size(), &n) != QSP_OK)
      die(std::string("qsp_tokenize: ") + qsp_gguf_last_error());
    best = std::min(best, now_s() - t0);
  }
  std::printf("vocabulary: %s, %u tokens, pre %s\n", json.empty() ? "synthetic" : json.c_str(), info.n_vocab,
              info.pre);
  std::printf("text: %.2f MB (%zu files, repeated), %llu tokens (%.2f bytes/token)\n", text.size() / 1e6,
              texts.size(), (unsigned long long)n, double(text.size()) / double(n));
  std::printf("qsp_tokenize, one thread, best of 3: %.3f s, %.1f MB/s, %.0f tokens/s\n", best,
              text.size() / 1e6 / best, double(n) / best);
  qsp_tokenizer_destroy(t);
  qsp_gguf_close(g);
  return 0;
}
