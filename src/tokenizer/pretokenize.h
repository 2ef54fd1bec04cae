// The pre-tokenizers of byte-level BPE (internal): hand-written matchers
// equivalent to the split regexes of the reference tokenizers (Hugging Face
// tokenizers' Split pre-tokenizer, behavior Isolated, then ByteLevel without
// its own regex). At each position the alternatives are tried left to right
// and the first that matches wins (leftmost-first, as a backtracking regex
// engine does); each matcher below names the alternative it implements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qsp {
namespace tok {

enum class PreKind {
  kGpt2,      // "default", "gpt-2":
              //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,    // "llama-bpe":
              //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
              //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,     // "qwen2": as kLlama3 with \p{N} (one digit per piece); NFC first
};

// Splits valid UTF-8 text into pre-tokens: `ends` receives the byte offset
// where each piece ends (the first starts at 0, each next where the last ended).
void pretokenize(PreKind kind, const char* text, size_t n, std::vector<uint32_t>* ends);

}  // namespace tok
}  // namespace qsp
