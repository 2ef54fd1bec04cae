// A Hugging Face tokenizer.json (and the tokenizer_config.json next to it) as
// the tokenizer keys of a GGUF file (part of the tool-side library
// qsp_gguf_write, not of libqsp; `qsp synth --tokenizer`). What is written and
// why follows llama.cpp's convert_hf_to_gguf.py (_set_vocab_gpt2,
// get_vocab_base) and gguf-py's SpecialVocab for byte-level BPE models;
// docs/GGUF.md ("Tokenizer keys") lists every rule and the few places qsp
// goes further. This header does not depend on the JSON library (only
// hf_tokenizer.cpp does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf_write/gguf_writer.h"

namespace qsp {
namespace gguf {

// GGUF token types (llama.cpp's llama_token_type / gguf-py TokenType).
enum TokenType : int32_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

// The tokenizer.* keys of one file. Ids of -1 and flags of -1 are not written.
struct TokenizerKeys {
  std::string model = "gpt2";           // tokenizer.ggml.model
  std::string pre;                      // tokenizer.ggml.pre: "qwen2", "llama-bpe", "gpt-2"
  std::vector<std::string> tokens;      // tokenizer.ggml.tokens: ids 0 .. n-1
  std::vector<int32_t> token_type;      // tokenizer.ggml.token_type (TokenType)
  std::vector<std::string> merges;      // tokenizer.ggml.merges: "a b", by rank
  int64_t bos_id = -1, eos_id = -1, unk_id = -1, sep_id = -1, pad_id = -1, cls_id = -1, mask_id = -1,
          eot_id = -1;
  int add_bos = -1, add_eos = -1;       // tokenizer.ggml.add_bos_token / add_eos_token
  bool has_chat_template = false;
  std::string chat_template;            // tokenizer.chat_template
  std::string source;                   // the tokenizer.json path (for messages)
  bool had_config = false;              // a tokenizer_config.json was read
  uint32_t n_added = 0;                 // added tokens (control + user-defined)
};

// Reads `tokenizer_json` (a Hugging Face tokenizer.json) and, when present,
// tokenizer_config.json and chat_template.jinja in the same directory.
// vocab_size: 0 gives max id + 1 tokens; a larger value pads with [PAD{id}]
// (what config.json's vocab_size does in the converter). Throws
// std::runtime_error with a message naming the file and the problem: cannot
// read, not JSON, not a byte-level BPE model, a pre-tokenizer qsp does not
// know (the message names what it found and what it knows), ids out of range.
TokenizerKeys load_hf_tokenizer(const std::string& tokenizer_json, uint32_t vocab_size = 0);

// The name tokenizer.ggml.pre gets for a tokenizer.json's pre_tokenizer
// (given as its JSON text, e.g. from a test): "qwen2", "llama-bpe" or
// "gpt-2"; throws std::runtime_error for anything else.
std::string hf_pre_tokenizer_name(const std::string& pre_tokenizer_json);

// Appends the keys to w, in the converter's order: model, pre, tokens,
// token_type, merges, the special ids, add_bos / add_eos, chat_template.
void add_tokenizer_keys(Writer& w, const TokenizerKeys& k);

}  // namespace gguf
}  // namespace qsp
