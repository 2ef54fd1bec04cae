// Synthetic models (part of the tool-side library qsp_gguf_write, not of
// libqsp: `qsp synth`, the CLI's built-in model, tests, fuzz corpus):
// deterministic random weights of realistic scale in the shapes and GGUF
// naming of real architectures, with no tokenizer
// (tokenizer.ggml.model = "none" and <arch>.vocab_size) unless a Hugging Face
// tokenizer.json's vocabulary is given (SynthExtras, hf_tokenizer.h).
//
// Scales: projections ~ N(0, 0.6 / sqrt(fan_in)), the LM head ~ N(0, 2 /
// sqrt(hidden)), embeddings ~ N(0, 0.05), norm weights ~ N(1, 0.2) in f32;
// quantized with GGML's reference quantizer of the format registry
// (fmt::find(type)->quantize), so every format qsp computes can be written. Every row comes
// from its own seed (file seed, tensor name, row), so the bytes do not depend
// on the number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf_write/gguf_writer.h"
#include "gguf_write/hf_tokenizer.h"

namespace qsp {
namespace gguf {

struct SynthPreset {
  std::string name;
  std::string arch;  // "qwen3" or "llama"
  uint32_t n_layers, hidden, ffn, n_heads, n_kv_heads, head_dim, vocab, context_length;
  float rope_theta, rms_eps;
  bool tied;          // no output.weight: the LM head is token_embd
  std::string about;  // one line for --help
};

const std::vector<SynthPreset>& synth_presets();
const SynthPreset* find_synth_preset(const std::string& name);

// What `qsp synth --type` writes: one format for every matrix (file_type <
// 0: `base` is any format of the registry), or a llama.cpp file type
// (LLAMA_FTYPE_MOSTLY_*: file_type >= 0, base its default format) whose
// per-tensor mix follows llama.cpp's quantizer (synth_mix_type). Converts
// from a format id, so the single-format calls read as before.
struct SynthType {
  int32_t base = 0;
  int32_t file_type = -1;
  SynthType(int32_t format) : base(format) {}  // NOLINT: implicit on purpose
  SynthType(int32_t base_format, int32_t llama_ftype) : base(base_format), file_type(llama_ftype) {}
  bool mix() const { return file_type >= 0; }
};

// The llama.cpp file types synth writes as a mix: q4_k_m, q4_k_s, q5_k_m,
// q5_k_s, q6_k, q3_k_m, q2_k, q4_1, q5_0, q5_1.
struct SynthFileType {
  const char* name;       // lower case, as llama-quantize spells it (q4_k_m)
  int32_t file_type;      // LLAMA_FTYPE_MOSTLY_*
  int32_t base;           // its default format (GGML type id)
};
const std::vector<SynthFileType>& synth_file_types();
// Case-insensitive; nullptr if none.
const SynthFileType* find_synth_file_type(const std::string& name);

// llama.cpp's llama_tensor_get_type (llama-quant.cpp) for the llama / qwen3
// architectures without MoE and without imatrix or overrides: the type of
// matrix `name` (GGUF name, e.g. "blk.5.ffn_down.weight") with `cols`
// columns in preset p under file type ft, including the fallback for
// columns that are not a multiple of the chosen type's block (K-quant ->
// q5_0 / q5_1 / q8_0 / iq4_nl, then f16). Rules: docs/GGUF.md.
int32_t synth_mix_type(const SynthPreset& p, const SynthFileType& ft, const std::string& name, uint64_t cols);

struct SynthTensor {
  std::string name;
  int32_t type = 0;
  uint64_t rows = 0, cols = 0;  // qsp terms: GGUF ne = [cols, rows] (vectors: [cols])
  bool vector = false;
  float mean = 0, stddev = 0;
  uint64_t seed = 0;
};

// The tensors of a preset in file order: token_embd, blk.N.*, output_norm,
// output (unless tied). A single format (any of the registry) applies to
// every matrix, a file type gives the llama.cpp mix; norms are f32.
std::vector<SynthTensor> synth_tensors(const SynthPreset& p, const SynthType& wtype, uint64_t seed);
// Rows [r0, r1) of t, encoded in t.type, into dst. Throws
// std::invalid_argument for a type the format registry does not know.
void synth_rows(const SynthTensor& t, uint64_t r0, uint64_t r1, uint8_t* dst);
// The whole tensor (rows * row bytes).
std::vector<uint8_t> synth_tensor_bytes(const SynthTensor& t);

// What else a synthesized file carries: a tokenizer (`qsp synth
// --tokenizer`: its keys replace tokenizer.ggml.model = "none"; the preset's
// vocab must equal its token count), and whether the file is vocabulary-only
// (the metadata without tensors, as llama.cpp's --vocab-only files).
struct SynthExtras {
  const TokenizerKeys* tokenizer = nullptr;
  bool vocab_only = false;
};

// The preset's shape as the architecture's GGUF keys (block_count ..
// vocab_size), as qsp synth writes them.
void add_model_keys(Writer& w, const SynthPreset& p);

// The writer with all metadata and tensor infos of the preset; `tensors`
// receives synth_tensors() (same order as the writer's; empty when vocab-only).
// Throws std::invalid_argument when the tokenizer's size is not p.vocab.
Writer synth_writer(const SynthPreset& p, const SynthType& wtype, uint64_t seed, std::vector<SynthTensor>* tensors,
                    const SynthExtras& extras = {});

// A whole synthetic GGUF file in memory (small presets).
std::vector<uint8_t> synth_memory(const SynthPreset& p, const SynthType& wtype, uint64_t seed, int n_threads = 1,
                                  const SynthExtras& extras = {});
// Streams a synthetic GGUF file to disk. Throws std::runtime_error on I/O errors.
void synth_file(const std::string& path, const SynthPreset& p, const SynthType& wtype, uint64_t seed, int n_threads,
                const Writer::Progress& progress = nullptr, const SynthExtras& extras = {});

}  // namespace gguf
}  // namespace qsp
