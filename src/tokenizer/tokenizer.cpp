#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <queue>

#include "common/error.h"
#include "common/printable.h"
#include "qsp/qsp_gguf.h"
#include "tokenizer/unicode.h"

namespace qsp {
namespace tok {

using gguf::fail;
using ull = unsigned long long;

// ---- PairTable ----------------------------------------------------------------
void PairTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Entry());
  mask_ = cap - 1;
}

bool PairTable::insert(int32_t a, int32_t b, int32_t rank, int32_t id) {
  const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key) return false;
    if (e.key == ~0ull) {
      e.key = key;
      e.rank = rank;
      e.id = id;
      return true;
    }
  }
}

// ---- Loading ------------------------------------------------------------------
namespace {

constexpr const char* kTokens = "tokenizer.ggml.tokens";

// Untrusted text made printable and bounded, for messages (common/printable.h).
std::string printable(const std::string& s, size_t max = 64) { return qsp::printable(s, max); }

// A special token id key: absent -> -1; present -> must name a token.
int32_t read_id(const gguf::File& f, const char* key, size_t n_vocab) {
  uint64_t v = 0;
  if (!f.get_uint(key, &v)) return -1;
  if (v >= n_vocab)
    fail(QSP_ERR_BAD_FORMAT, "metadata key %s = %llu is out of range: the vocabulary has %llu tokens", key, ull(v),
         ull(n_vocab));
  return int32_t(v);
}

// SPM's space: U+2581 LOWER ONE EIGHTH BLOCK.
constexpr const char kSpmSpace[] = "\xE2\x96\x81";

std::string spm_unescape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, kSpmSpace) == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// <0xXX> -> XX; -1 otherwise.
int parse_byte_token(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = s[size_t(i)];
    const int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Byte-level text (each code point the image of a byte) back to its bytes; a
// code point that is no byte's image is kept as its UTF-8.
std::string byte_level_decode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  std::string checked;
  if (replace_invalid_utf8(s.data(), s.size(), &checked)) p = reinterpret_cast<const unsigned char*>(checked.data());
  const size_t n = checked.empty() ? s.size() : checked.size();
  while (i < n) {
    const uint32_t cp = next_cp(p, &i);
    const int b = byte_of_cp(cp);
    if (b >= 0) {
      out += char(b);
    } else {
      append_utf8(cp, &out);
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const gguf::File& f) {
  std::unique_ptr<Tokenizer> t(new Tokenizer);
  std::string model;
  if (!f.get_string("tokenizer.ggml.model", &model) || model.empty() || model == "none")
    fail(QSP_ERR_UNSUPPORTED, "the file has no tokenizer (tokenizer.ggml.model is %s)",
         f.find_kv("tokenizer.ggml.model") ? "\"none\"" : "absent");
  if (model == "gpt2") {
    t->kind_ = Kind::kBpe;
  } else if (model == "llama") {
    t->kind_ = Kind::kSpm;
  } else {
    fail(QSP_ERR_UNSUPPORTED,
         "tokenizer.ggml.model \"%s\" is not supported; qsp implements \"gpt2\" (byte-level BPE) and \"llama\" "
         "(SentencePiece)",
         printable(model).c_str());
  }
  t->model_ = model;
  f.get_string("tokenizer.ggml.pre", &t->pre_);
  f.get_string("tokenizer.chat_template", &t->chat_template_);

  if (!f.get_string_array(kTokens, &t->text_)) fail(QSP_ERR_BAD_FORMAT, "%s is missing", kTokens);
  const size_t n = t->text_.size();
  if (n == 0) fail(QSP_ERR_BAD_FORMAT, "%s is empty", kTokens);
  if (n > size_t(INT32_MAX)) fail(QSP_ERR_BAD_FORMAT, "%s has %llu tokens; at most 2^31-1", kTokens, ull(n));

  std::vector<int64_t> types;
  if (f.get_int_array("tokenizer.ggml.token_type", &types)) {
    if (types.size() != n)
      fail(QSP_ERR_BAD_FORMAT, "tokenizer.ggml.token_type has %llu entries but %s has %llu", ull(types.size()),
           kTokens, ull(n));
    t->type_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > kByte)
        fail(QSP_ERR_BAD_FORMAT, "tokenizer.ggml.token_type[%llu] = %lld is not a token type (0..6)", ull(i),
             (long long)types[i]);
      t->type_[i] = types[i] == kUndefined ? uint8_t(kNormal) : uint8_t(types[i]);
    }
  } else {
    t->type_.assign(n, kNormal);
  }
  if (f.get_float_array("tokenizer.ggml.scores", &t->score_)) {
    if (t->score_.size() != n)
      fail(QSP_ERR_BAD_FORMAT, "tokenizer.ggml.scores has %llu entries but %s has %llu", ull(t->score_.size()),
           kTokens, ull(n));
  } else {
    t->score_.assign(n, 0.0f);
  }
  t->text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) t->text_to_id_[t->text_[i]] = int32_t(i);  // a duplicate: the last wins

  t->bos_ = read_id(f, "tokenizer.ggml.bos_token_id", n);
  t->eos_ = read_id(f, "tokenizer.ggml.eos_token_id", n);
  t->eot_ = read_id(f, "tokenizer.ggml.eot_token_id", n);
  t->unk_ = read_id(f, "tokenizer.ggml.unknown_token_id", n);
  read_id(f, "tokenizer.ggml.padding_token_id", n);  // checked only: nothing here adds padding
  if (t->eot_ < 0) {
    // What llama.cpp recognizes as the end of a turn when the key is absent.
    for (const char* s : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"}) {
      auto it = t->text_to_id_.find(s);
      if (it != t->text_to_id_.end() && t->type_[size_t(it->second)] == kControl) {
        t->eot_ = it->second;
        break;
      }
    }
  }
  t->add_bos_ = t->kind_ == Kind::kSpm;
  f.get_bool("tokenizer.ggml.add_bos_token", &t->add_bos_);
  f.get_bool("tokenizer.ggml.add_eos_token", &t->add_eos_);
  f.get_bool("tokenizer.ggml.add_space_prefix", &t->add_space_prefix_);

  if (t->kind_ == Kind::kBpe) {
    t->load_bpe(f);
  } else {
    t->load_spm();
  }
  for (const std::string& p : t->piece_) t->max_piece_ = std::max(t->max_piece_, uint32_t(std::min<size_t>(p.size(), UINT32_MAX)));
  t->build_specials();
  return t;
}

void Tokenizer::load_bpe(const gguf::File& f) {
  if (pre_ == "qwen2") {
    pre_kind_ = PreKind::kQwen2;
    nfc_ = true;
  } else if (pre_ == "llama-bpe") {
    pre_kind_ = PreKind::kLlama3;
    ignore_merges_ = true;
  } else if (pre_.empty() || pre_ == "default" || pre_ == "gpt-2") {
    pre_kind_ = PreKind::kGpt2;
  } else {
    fail(QSP_ERR_UNSUPPORTED,
         "tokenizer.ggml.pre \"%s\" is not supported; qsp implements \"qwen2\", \"llama-bpe\", \"default\" and "
         "\"gpt-2\"",
         printable(pre_).c_str());
  }
  const size_t n = text_.size();
  piece_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t ty = type_[i];
    piece_[i] = (ty == kNormal || ty == kByte) ? byte_level_decode(text_[i]) : text_[i];
    if (ty == kNormal) raw_to_id_.emplace(piece_[i], int32_t(i));
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_cp(uint8_t(b)), &s);
    auto it = text_to_id_.find(s);
    byte_id_[b] = it == text_to_id_.end() ? -1 : it->second;
  }
  for (int& b : byte_token_) b = -1;

  std::vector<std::string> merges;
  if (!f.get_string_array("tokenizer.ggml.merges", &merges))
    fail(QSP_ERR_BAD_FORMAT, "tokenizer.ggml.merges is missing (a \"gpt2\" tokenizer needs its merges)");
  if (merges.size() > size_t(INT32_MAX))
    fail(QSP_ERR_BAD_FORMAT, "tokenizer.ggml.merges has %llu entries; at most 2^31-1", ull(merges.size()));
  merges_.reserve(merges.size());
  auto id_of = [&](const std::string& s, size_t i) {
    auto it = text_to_id_.find(s);
    if (it == text_to_id_.end())
      fail(QSP_ERR_BAD_FORMAT, "tokenizer.ggml.merges[%llu] \"%s\" names \"%s\", which is not a token", ull(i),
           printable(merges[i]).c_str(), printable(s).c_str());
    return it->second;
  };
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size())
      fail(QSP_ERR_BAD_FORMAT, "tokenizer.ggml.merges[%llu] \"%s\" is not two tokens separated by a space", ull(i),
           printable(m).c_str());
    const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    const int32_t ia = id_of(a, i), ib = id_of(b, i), ic = id_of(a + b, i);
    merges_.insert(ia, ib, int32_t(i), ic);  // a repeated pair keeps its first (lowest) rank
  }
}

void Tokenizer::load_spm() {
  const size_t n = text_.size();
  piece_.resize(n);
  for (int& b : byte_token_) b = -1;
  for (int& b : byte_id_) b = -1;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t ty = type_[i];
    const int byte = ty == kByte ? parse_byte_token(text_[i]) : -1;
    if (byte >= 0) {
      piece_[i] = std::string(1, char(byte));
      if (byte_token_[byte] < 0) byte_token_[byte] = int32_t(i);
    } else if (ty == kNormal || ty == kUserDefined) {
      piece_[i] = spm_unescape(text_[i]);
    } else {
      piece_[i] = text_[i];
    }
  }
}

void Tokenizer::build_specials() {
  for (size_t i = 0; i < text_.size(); ++i) {
    const uint8_t ty = type_[i];
    if ((ty != kControl && ty != kUnknown && ty != kUserDefined) || text_[i].empty()) continue;
    specials_[static_cast<unsigned char>(text_[i][0])].push_back(
        Special{text_[i], int32_t(i), ty != kUserDefined});
  }
  for (auto& b : specials_)
    std::stable_sort(b.begin(), b.end(),
                     [](const Special& x, const Special& y) { return x.text.size() > y.text.size(); });
}

// ---- Tokenizing ---------------------------------------------------------------
void Tokenizer::tokenize(const char* text, size_t n, uint32_t flags, std::vector<int32_t>* out) const {
  std::string fixed;
  if (n > 0 && replace_invalid_utf8(text, n, &fixed)) {
    text = fixed.data();
    n = fixed.size();
  }
  const bool add = (flags & QSP_TOKENIZE_ADD_SPECIAL) != 0;
  const bool parse = (flags & QSP_TOKENIZE_PARSE_SPECIAL) != 0;
  if (add && add_bos_ && bos_ >= 0) out->push_back(bos_);
  // Leftmost-longest matching of the special tokens (Hugging Face's added
  // vocabulary: an Aho-Corasick leftmost-longest search).
  size_t start = 0, i = 0;
  while (i < n) {
    const std::vector<Special>& bucket = specials_[static_cast<unsigned char>(text[i])];
    const Special* hit = nullptr;
    for (const Special& s : bucket) {
      if (s.needs_parse && !parse) continue;
      if (s.text.size() <= n - i && std::memcmp(text + i, s.text.data(), s.text.size()) == 0) {
        hit = &s;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start) tokenize_fragment(text + start, i - start, start > 0, out);
    out->push_back(hit->id);
    i += hit->text.size();
    start = i;
  }
  if (n > start) tokenize_fragment(text + start, n - start, start > 0, out);
  if (add && add_eos_ && eos_ >= 0) out->push_back(eos_);
}

void Tokenizer::tokenize_fragment(const char* s, size_t n, bool /*after_special*/, std::vector<int32_t>* out) const {
  if (kind_ == Kind::kSpm) {
    // llama.cpp: every text fragment (the first, and each after a special
    // token) gets the dummy prefix; spaces become U+2581.
    std::string text;
    text.reserve(n + n / 4 + 3);
    if (add_space_prefix_) text += kSpmSpace;
    for (size_t i = 0; i < n; ++i) {
      if (s[i] == ' ') {
        text += kSpmSpace;
      } else {
        text += s[i];
      }
    }
    spm_fragment(text, out);
    return;
  }
  std::string normalized;
  if (nfc_) {
    normalized = nfc(s, n);
    s = normalized.data();
    n = normalized.size();
  }
  thread_local std::vector<uint32_t> ends;
  pretokenize(pre_kind_, s, n, &ends);
  thread_local std::string word;
  size_t b = 0;
  for (uint32_t e : ends) {
    if (ignore_merges_) {
      word.assign(s + b, e - b);
      auto it = raw_to_id_.find(word);
      if (it != raw_to_id_.end()) {
        out->push_back(it->second);
        b = e;
        continue;
      }
    }
    bpe_word(s + b, e - b, out);
    b = e;
  }
  if (ends.capacity() > (size_t(1) << 20)) std::vector<uint32_t>().swap(ends);
}

void Tokenizer::bpe_word(const char* s, size_t n, std::vector<int32_t>* out, bool force_heap) const {
  thread_local std::vector<int32_t> sym;
  sym.resize(n);
  for (size_t i = 0; i < n; ++i) sym[i] = byte_id_[static_cast<unsigned char>(s[i])];
  auto emit = [&](int32_t id) {
    if (id >= 0) out->push_back(id);  // a byte without a token (a vocabulary lacking it) gives nothing
  };
  if (n <= 32 && !force_heap) {
    // Short words: repeatedly merge the lowest-ranked pair, leftmost first.
    int32_t rank[32], merged[32];
    size_t m = n;
    auto pair = [&](size_t k) {
      const PairTable::Entry* e = (sym[k] >= 0 && sym[k + 1] >= 0) ? merges_.find(sym[k], sym[k + 1]) : nullptr;
      rank[k] = e ? e->rank : INT32_MAX;
      merged[k] = e ? e->id : -1;
    };
    for (size_t k = 0; k + 1 < m; ++k) pair(k);
    while (m > 1) {
      size_t best = 0;
      for (size_t k = 1; k + 1 < m; ++k)
        if (rank[k] < rank[best]) best = k;
      if (rank[best] == INT32_MAX) break;
      sym[best] = merged[best];
      for (size_t k = best + 1; k + 1 < m; ++k) {
        sym[k] = sym[k + 1];
        rank[k] = rank[k + 1];
        merged[k] = merged[k + 1];
      }
      --m;
      if (best + 1 < m) pair(best);
      if (best > 0) pair(best - 1);
    }
    for (size_t k = 0; k < m; ++k) emit(sym[k]);
    return;
  }
  // Long words: a linked list of symbols and a heap of candidate merges by
  // (rank, position); entries made stale by an earlier merge are skipped.
  struct Cand {
    int32_t rank;
    int32_t pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t p) {
    const int32_t q = next[size_t(p)];
    if (q < 0 || sym[size_t(p)] < 0 || sym[size_t(q)] < 0) return;
    if (const PairTable::Entry* e = merges_.find(sym[size_t(p)], sym[size_t(q)]))
      heap.push(Cand{e->rank, p, sym[size_t(p)], sym[size_t(q)]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  std::vector<uint8_t> dead(n, 0);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const size_t p = size_t(c.pos);
    const int32_t q = next[p];
    if (dead[p] || q < 0 || sym[p] != c.left || sym[size_t(q)] != c.right) continue;
    sym[p] = merges_.find(c.left, c.right)->id;
    dead[size_t(q)] = 1;
    next[p] = next[size_t(q)];
    if (next[p] >= 0) prev[size_t(next[p])] = int32_t(p);
    if (prev[p] >= 0) push(prev[p]);
    push(int32_t(p));
  }
  for (size_t i = 0; i < n; ++i)
    if (!dead[i]) emit(sym[i]);
  if (sym.capacity() > (size_t(1) << 20)) std::vector<int32_t>().swap(sym);
}

void Tokenizer::spm_fragment(const std::string& text, std::vector<int32_t>* out) const {
  // llama.cpp's llm_tokenizer_spm: one symbol per UTF-8 character; merge the
  // adjacent pair whose concatenation is the highest-scored token (ties: the
  // leftmost), until none is a token.
  struct Sym {
    int32_t prev, next;
    uint32_t off, n;
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  if (text.size() >= size_t(UINT32_MAX))  // symbol offsets are 32-bit
    throw Error(QSP_ERR_INVALID_ARGUMENT, "the text is 4 GiB or more after invalid UTF-8 replacement and escaping");
  std::vector<Sym> sym;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    next_cp(p, &i);
    sym.push_back(Sym{int32_t(sym.size()) - 1, int32_t(sym.size()) + 1, uint32_t(at), uint32_t(i - at)});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  std::priority_queue<Bigram> queue;
  std::string buf;
  auto lookup = [&](uint32_t off, uint32_t len) -> int32_t {
    buf.assign(text, off, len);
    auto it = text_to_id_.find(buf);
    return it == text_to_id_.end() ? -1 : it->second;
  };
  auto add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[size_t(l)].n + sym[size_t(r)].n;
    const int32_t id = lookup(sym[size_t(l)].off, len);
    if (id < 0) return;
    queue.push(Bigram{score_[size_t(id)], l, r, len});
  };
  for (size_t i = 1; i < sym.size(); ++i) add(int32_t(i - 1), int32_t(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = sym[size_t(b.left)];
    Sym& r = sym[size_t(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    add(l.prev, b.left);
    add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) {
    const Sym& s = sym[size_t(i)];
    const int32_t id = lookup(s.off, s.n);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Byte fallback: <0xXX>, else the byte as a token, else the unknown token.
    for (uint32_t k = 0; k < s.n; ++k) {
      const unsigned char c = p[s.off + k];
      int32_t t = byte_token_[c];
      if (t < 0) t = lookup(s.off + k, 1);
      if (t < 0) t = unk_;
      if (t >= 0) out->push_back(t);
    }
  }
}

// ---- Detokenizing -------------------------------------------------------------
bool Tokenizer::skipped(int32_t id, uint32_t flags) const {
  const uint8_t ty = type_[size_t(id)];
  return (flags & QSP_DETOKENIZE_SKIP_SPECIAL) && (ty == kControl || ty == kUnknown);
}

void Detok::append(int32_t id, std::string* out) {
  if (t->skipped(id, flags)) return;
  const std::string& p = t->piece(id);
  if (id == t->bos()) {
    out->append(p);
    return;
  }
  if (!started && t->strips_first_space() && !p.empty() && p[0] == ' ') {
    out->append(p, 1, std::string::npos);
  } else {
    out->append(p);
  }
  started = true;
}

}  // namespace tok
}  // namespace qsp
