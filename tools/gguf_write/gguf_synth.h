// Synthetic models (part of the tool-side library qsp_gguf_write, not of
// libqsp: `qsp synth`, the CLI's built-in model, tests, fuzz corpus):
// deterministic random weights of realistic scale in the shapes and GGUF
// naming of real architectures, with no tokenizer
// (tokenizer.ggml.model = "none" and <arch>.vocab_size).
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

struct SynthTensor {
  std::string name;
  int32_t type = 0;
  uint64_t rows = 0, cols = 0;  // qsp terms: GGUF ne = [cols, rows] (vectors: [cols])
  bool vector = false;
  float mean = 0, stddev = 0;
  uint64_t seed = 0;
};

// The tensors of a preset in file order: token_embd, blk.N.*, output_norm,
// output (unless tied). wtype (any format of the registry) applies to every
// matrix, norms are f32.
std::vector<SynthTensor> synth_tensors(const SynthPreset& p, int32_t wtype, uint64_t seed);
// Rows [r0, r1) of t, encoded in t.type, into dst. Throws
// std::invalid_argument for a type the format registry does not know.
void synth_rows(const SynthTensor& t, uint64_t r0, uint64_t r1, uint8_t* dst);
// The whole tensor (rows * row bytes).
std::vector<uint8_t> synth_tensor_bytes(const SynthTensor& t);

// The writer with all metadata and tensor infos of the preset; `tensors`
// receives synth_tensors() (same order as the writer's).
Writer synth_writer(const SynthPreset& p, int32_t wtype, uint64_t seed, std::vector<SynthTensor>* tensors);

// A whole synthetic GGUF file in memory (small presets).
std::vector<uint8_t> synth_memory(const SynthPreset& p, int32_t wtype, uint64_t seed, int n_threads = 1);
// Streams a synthetic GGUF file to disk. Throws std::runtime_error on I/O errors.
void synth_file(const std::string& path, const SynthPreset& p, int32_t wtype, uint64_t seed, int n_threads,
                const Writer::Progress& progress = nullptr);

}  // namespace gguf
}  // namespace qsp
