// The tokenizer of a GGUF file (internal): the vocabulary of tokenizer.ggml.*,
// byte-level BPE (model "gpt2") and SentencePiece-style merges (model
// "llama"), special-token partitioning and detokenization. Immutable once
// loaded: any number of threads may use one Tokenizer. docs/TOKENIZER.md
// describes the keys and the algorithms; include/qsp/qsp_gguf.h the contract.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_reader.h"
#include "tokenizer/pretokenize.h"

namespace qsp {
namespace tok {

// tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class Kind { kBpe = 1, kSpm = 2 };

// (left id, right id) -> (rank, merged id): open addressing, linear probing.
class PairTable {
 public:
  struct Entry {
    uint64_t key = ~0ull;  // (left << 32) | right; ~0: empty
    int32_t rank = 0;
    int32_t id = 0;
  };
  void reserve(size_t n);
  bool insert(int32_t a, int32_t b, int32_t rank, int32_t id);  // false: the pair is there already
  const Entry* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == ~0ull) return nullptr;
    }
  }

 private:
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return size_t(k);
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* of a parsed file; throws Error (BAD_FORMAT,
  // UNSUPPORTED) naming the key at fault.
  static std::unique_ptr<Tokenizer> load(const gguf::File& f);

  // Flags as qsp_tokenize's (QSP_TOKENIZE_*). Appends to *out.
  void tokenize(const char* text, size_t n, uint32_t flags, std::vector<int32_t>* out) const;
  // The bytes of token `id` (a valid id) on its own.
  const std::string& piece(int32_t id) const { return piece_[size_t(id)]; }
  // Whether `id` gives no text under QSP_DETOKENIZE_SKIP_SPECIAL.
  bool skipped(int32_t id, uint32_t flags) const;
  // Whether detokenization drops the leading space of this token's piece when
  // it is the first piece (SPM's dummy prefix; see Detok).
  bool strips_first_space() const { return kind_ == Kind::kSpm && add_space_prefix_; }
  int32_t bos() const { return bos_; }

  Kind kind() const { return kind_; }
  uint32_t n_vocab() const { return uint32_t(text_.size()); }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  uint32_t max_piece_bytes() const { return max_piece_; }
  const std::string& model() const { return model_; }
  const std::string& pre() const { return pre_; }
  const std::string& chat_template() const { return chat_template_; }

  // Byte-level BPE of one pre-token (raw bytes), appending ids. Exposed for
  // tests: `force_heap` takes the priority-queue path even for short words.
  void bpe_word(const char* s, size_t n, std::vector<int32_t>* out, bool force_heap = false) const;

 private:
  Tokenizer() = default;
  void load_bpe(const gguf::File& f);
  void load_spm();
  void build_specials();
  void tokenize_fragment(const char* s, size_t n, bool first_fragment_after_special,
                         std::vector<int32_t>* out) const;
  void spm_fragment(const std::string& text, std::vector<int32_t>* out) const;

  Kind kind_ = Kind::kBpe;
  std::string model_, pre_, chat_template_;
  std::vector<std::string> text_;   // as stored (BPE: byte-mapped)
  std::vector<std::string> piece_;  // the bytes detokenization writes
  std::vector<uint8_t> type_;
  std::vector<float> score_;
  std::unordered_map<std::string, int32_t> text_to_id_;  // text as stored
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = true;
  uint32_t max_piece_ = 0;

  // BPE
  PreKind pre_kind_ = PreKind::kGpt2;
  bool nfc_ = false, ignore_merges_ = false;
  int32_t byte_id_[256];  // the token of each single byte; -1: none
  PairTable merges_;
  std::unordered_map<std::string, int32_t> raw_to_id_;  // normal tokens by their bytes (ignore_merges)

  // SPM
  int32_t byte_token_[256];  // <0xXX>; -1: none

  // Specials: by first byte, longest first.
  struct Special {
    std::string text;
    int32_t id;
    bool needs_parse;  // control / unknown: only with QSP_TOKENIZE_PARSE_SPECIAL
  };
  std::vector<Special> specials_[256];
};

// Detokenization state shared by qsp_detokenize and qsp_text_stream: the
// pieces of ids one after another, with SPM's first-piece space dropped.
struct Detok {
  const Tokenizer* t = nullptr;
  uint32_t flags = 0;
  bool started = false;  // a token other than BOS has been seen
  // Appends the text of `id` (a valid id) to *out.
  void append(int32_t id, std::string* out);
};

}  // namespace tok
}  // namespace qsp
