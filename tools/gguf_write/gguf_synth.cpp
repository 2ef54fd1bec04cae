#include "gguf_write/gguf_synth.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "formats/format.h"
#include "gguf/gguf_format.h"
#include "qsp/qsp.h"

namespace qsp {
namespace gguf {

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> presets = {
      {"tiny", "qwen3", 2, 256, 768, 4, 2, 64, 2048, 4096, 1e6f, 1e-6f, false,
       "qwen3, 2 layers, hidden 256, vocab 2048 (the built-in model; runs instantly anywhere)"},
      {"tiny-llama", "llama", 2, 256, 768, 4, 2, 64, 2048, 4096, 5e5f, 1e-5f, false,
       "llama, 2 layers, hidden 256, vocab 2048"},
      {"micro", "qwen3", 1, 32, 32, 2, 1, 16, 64, 256, 1e6f, 1e-6f, true,
       "qwen3, 1 layer, hidden 32, vocab 64, tied embeddings (a few KB: tests, fuzz corpus)"},
      {"micro-llama", "llama", 1, 32, 32, 2, 1, 16, 64, 256, 1e4f, 1e-5f, true,
       "llama, 1 layer, hidden 32, vocab 64, tied embeddings"},
      {"qwen3-0.6b", "qwen3", 28, 1024, 3072, 16, 8, 128, 151936, 40960, 1e6f, 1e-6f, true,
       "Qwen3-0.6B shapes: 28 layers, hidden 1024, 16/8 heads, tied embeddings"},
      {"qwen3-8b", "qwen3", 36, 4096, 12288, 32, 8, 128, 151936, 40960, 1e6f, 1e-6f, false,
       "Qwen3-8B shapes: 36 layers, hidden 4096, 32/8 heads"},
      {"llama3-8b", "llama", 32, 4096, 14336, 32, 8, 128, 128256, 8192, 5e5f, 1e-5f, false,
       "Llama-3-8B shapes: 32 layers, hidden 4096, 32/8 heads, vocab 128256"},
  };
  return presets;
}

const SynthPreset* find_synth_preset(const std::string& name) {
  for (const auto& p : synth_presets())
    if (p.name == name) return &p;
  return nullptr;
}

namespace {

// GGML type ids used by the mix rules.
enum : int32_t {
  kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kIQ4_NL = 20,
};

uint64_t block_of(int32_t t) { return (t >= kQ2_K && t <= kQ6_K) ? 256 : t == kF16 ? 1 : 32; }

// llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third layer in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

}  // namespace

const std::vector<SynthFileType>& synth_file_types() {
  static const std::vector<SynthFileType> fts = {
      {"q4_1", 3, kQ4_1},    {"q5_0", 8, kQ5_0},    {"q5_1", 9, kQ5_1},    {"q2_k", 10, kQ2_K},
      {"q3_k_m", 12, kQ3_K}, {"q4_k_s", 14, kQ4_K}, {"q4_k_m", 15, kQ4_K}, {"q5_k_s", 16, kQ5_K},
      {"q5_k_m", 17, kQ5_K}, {"q6_k", 18, kQ6_K},
  };
  return fts;
}

const SynthFileType* find_synth_file_type(const std::string& name) {
  std::string low = name;
  for (char& c : low) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& f : synth_file_types())
    if (low == f.name) return &f;
  return nullptr;
}

int32_t synth_mix_type(const SynthPreset& p, const SynthFileType& ft, const std::string& name, uint64_t cols) {
  const int32_t f = ft.file_type;
  int32_t t = ft.base;
  const int n = int(p.n_layers);
  int layer = -1;
  if (name.compare(0, 4, "blk.") == 0) layer = std::atoi(name.c_str() + 4);
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  const uint32_t n_gqa = p.n_kv_heads ? p.n_heads / p.n_kv_heads : 1;
  if (name == "output.weight" || (p.tied && name == "token_embd.weight")) {
    // The LM head (a tied token_embd is one): q6_K, or q8_0 where the
    // columns do not fit the default format's block.
    if (cols % block_of(t) != 0)
      t = kQ8_0;
    else if (t != kQ8_0)
      t = kQ6_K;
  } else if (name == "token_embd.weight") {
    // the default format for these file types
  } else if (has("attn_v.weight")) {
    if (f == 10)
      t = n_gqa >= 4 ? kQ4_K : kQ3_K;
    else if (f == 12)
      t = layer < 2 ? kQ5_K : kQ4_K;
    else if ((f == 15 || f == 17) && use_more_bits(layer, n))
      t = kQ6_K;
    else if (f == 14 && layer < 4)
      t = kQ5_K;
  } else if (has("ffn_down")) {
    if (f == 10)
      t = kQ3_K;
    else if (f == 12)
      t = layer < n / 16 ? kQ5_K : kQ4_K;  // llama.cpp's q3_K branch is Falcon only
    else if ((f == 15 || f == 17) && use_more_bits(layer, n))
      t = kQ6_K;
    else if (f == 14 && layer < n / 8)
      t = kQ5_K;
  } else if (has("attn_output.weight")) {
    if (f == 10)
      t = kQ3_K;
    else if (f == 12)
      t = kQ4_K;
  }
  // Columns that are not a multiple of the block: llama.cpp's fallback.
  if (cols % block_of(t) != 0) {
    switch (t) {
      case kQ2_K:
      case kQ3_K: t = kIQ4_NL; break;
      case kQ4_K: t = kQ5_0; break;
      case kQ5_K: t = kQ5_1; break;
      case kQ6_K: t = kQ8_0; break;
      default: throw std::invalid_argument("synth: tensor " + name + ": " + std::to_string(cols) +
                                           " columns fit no fallback of type id " + std::to_string(t));
    }
    if (cols % block_of(t) != 0) t = kF16;
  }
  return t;
}

std::vector<SynthTensor> synth_tensors(const SynthPreset& p, const SynthType& st, uint64_t seed) {
  const int32_t wtype = st.base;
  const SynthFileType* ft = nullptr;
  if (st.mix()) {
    for (const auto& f : synth_file_types())
      if (f.file_type == st.file_type) ft = &f;
    if (!ft) throw std::invalid_argument("synth: no mix for llama.cpp file type " + std::to_string(st.file_type));
  }
  std::vector<SynthTensor> ts;
  const uint64_t H = p.hidden, F = p.ffn, D = p.head_dim, Q = uint64_t(p.n_heads) * D,
                 KV = uint64_t(p.n_kv_heads) * D;
  auto add = [&](const std::string& name, bool vector, int32_t type, uint64_t rows, uint64_t cols, float mean,
                 float sd) {
    SynthTensor t;
    t.name = name;
    t.vector = vector;
    t.type = type;
    t.rows = rows;
    t.cols = cols;
    t.mean = mean;
    t.stddev = sd;
    t.seed = mix64(seed * 0x9E3779B97F4A7C15ull ^ fnv1a64(name.data(), name.size()));
    ts.push_back(t);
  };
  auto mtype = [&](const std::string& name, uint64_t cols) {
    if (!ft) return wtype;
    const int32_t t = synth_mix_type(p, *ft, name, cols);
    if (!fmt::find(t))
      throw std::invalid_argument("synth: " + std::string(ft->name) + " on preset " + p.name + ": tensor " + name +
                                  " (" + std::to_string(cols) + " columns) falls back to " +
                                  (t == kIQ4_NL ? std::string("iq4_nl") : std::string(qsp_dtype_name(t))) +
                                  ", which qsp has no quantizer for");
    return t;
  };
  auto proj = [&](const std::string& name, uint64_t rows, uint64_t cols) {
    add(name, false, mtype(name, cols), rows, cols, 0.0f, 0.6f / std::sqrt(float(cols)));
  };
  auto norm = [&](const std::string& name, uint64_t n) { add(name, true, QSP_DTYPE_F32, 1, n, 1.0f, 0.2f); };
  const bool qk_norm = p.arch == "qwen3";
  add("token_embd.weight", false, mtype("token_embd.weight", H), p.vocab, H, 0.0f, 0.05f);
  for (uint32_t l = 0; l < p.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", H);
    proj(b + "attn_q.weight", Q, H);
    proj(b + "attn_k.weight", KV, H);
    proj(b + "attn_v.weight", KV, H);
    if (qk_norm) {
      norm(b + "attn_q_norm.weight", D);
      norm(b + "attn_k_norm.weight", D);
    }
    proj(b + "attn_output.weight", H, Q);
    norm(b + "ffn_norm.weight", H);
    proj(b + "ffn_gate.weight", F, H);
    proj(b + "ffn_up.weight", F, H);
    proj(b + "ffn_down.weight", H, F);
  }
  norm("output_norm.weight", H);
  if (!p.tied) add("output.weight", false, mtype("output.weight", H), p.vocab, H, 0.0f, 2.0f / std::sqrt(float(H)));
  return ts;
}

namespace {

// xoshiro256** seeded through splitmix64: fast, and the same everywhere.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& x : s) {
      seed += 0x9E3779B97F4A7C15ull;
      x = mix64(seed);
    }
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  // Uniform in (0, 1].
  float uniform() { return float((next() >> 40) + 1) * (1.0f / 16777216.0f); }
};

void normal_row(uint64_t seed, float mean, float sd, float* out, uint64_t n) {
  Rng rng(seed);
  for (uint64_t i = 0; i < n; i += 2) {  // Box-Muller, two values per pair
    const float r = std::sqrt(-2.0f * std::log(rng.uniform()));
    const float a = 6.2831853f * rng.uniform();
    out[i] = mean + sd * r * std::cos(a);
    if (i + 1 < n) out[i + 1] = mean + sd * r * std::sin(a);
  }
}

}  // namespace

void synth_rows(const SynthTensor& t, uint64_t r0, uint64_t r1, uint8_t* dst) {
  // Every format qsp computes comes with GGML's reference quantizer.
  const fmt::Format* f = fmt::find(t.type);
  if (!f) throw std::invalid_argument("synth: tensor " + t.name + ": qsp has no quantizer for type id " +
                                      std::to_string(t.type));
  const uint64_t rb = f->row_bytes(t.cols);
  std::vector<float> x(t.cols);
  for (uint64_t r = r0; r < r1; ++r, dst += rb) {
    normal_row(mix64(t.seed ^ mix64(r + 1)), t.mean, t.stddev, x.data(), t.cols);
    f->quantize(x.data(), dst, t.cols);
  }
}

std::vector<uint8_t> synth_tensor_bytes(const SynthTensor& t) {
  std::vector<uint8_t> b(size_t(row_bytes(t.type, t.cols) * t.rows));
  synth_rows(t, 0, t.rows, b.data());
  return b;
}

void add_model_keys(Writer& w, const SynthPreset& p) {
  const std::string& a = p.arch;
  w.add_u32(a + ".block_count", p.n_layers);
  w.add_u32(a + ".context_length", p.context_length);
  w.add_u32(a + ".embedding_length", p.hidden);
  w.add_u32(a + ".feed_forward_length", p.ffn);
  w.add_u32(a + ".attention.head_count", p.n_heads);
  w.add_u32(a + ".attention.head_count_kv", p.n_kv_heads);
  w.add_u32(a + ".attention.key_length", p.head_dim);
  w.add_u32(a + ".attention.value_length", p.head_dim);
  w.add_u32(a + ".rope.dimension_count", p.head_dim);
  w.add_f32(a + ".rope.freq_base", p.rope_theta);
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", p.rms_eps);
  w.add_u32(a + ".vocab_size", p.vocab);
}

Writer synth_writer(const SynthPreset& p, const SynthType& st, uint64_t seed, std::vector<SynthTensor>* tensors,
                    const SynthExtras& extras) {
  const int32_t wtype = st.base;
  const TokenizerKeys* tok = extras.tokenizer;
  if (tok && tok->tokens.size() != p.vocab)
    throw std::invalid_argument("synth: the tokenizer has " + std::to_string(tok->tokens.size()) +
                                " tokens, the preset's vocabulary " + std::to_string(p.vocab));
  Writer w(kDefaultAlignment, 3);
  const std::string& a = p.arch;
  // llama.cpp's LLAMA_FTYPE_* of a file whose matrices are all of one type
  // (the K-quants: their _M variant); -1: none fits, the key is left out.
  int64_t file_type = -1;
  switch (wtype) {
    case 0: file_type = 0; break;    // f32
    case 1: file_type = 1; break;    // f16
    case 2: file_type = 2; break;    // q4_0
    case 3: file_type = 3; break;    // q4_1
    case 6: file_type = 8; break;    // q5_0
    case 7: file_type = 9; break;    // q5_1
    case 8: file_type = 7; break;    // q8_0
    case 10: file_type = 10; break;  // q2_K
    case 11: file_type = 12; break;  // q3_K -> Q3_K_M
    case 12: file_type = 15; break;  // q4_K -> Q4_K_M
    case 13: file_type = 17; break;  // q5_K -> Q5_K_M
    case 14: file_type = 18; break;  // q6_K
    case 30: file_type = 32; break;  // bf16
    default: break;
  }
  std::string what = qsp_dtype_name(wtype);
  if (st.mix()) {
    file_type = st.file_type;
    for (const auto& f : synth_file_types())
      if (f.file_type == st.file_type) what = std::string(f.name) + " mix";
  }
  w.add_string("general.architecture", a);
  if (extras.vocab_only)
    w.add_string("general.name", "qsp synth " + p.name + " (vocabulary only" + (tok ? ", " + tok->pre : "") + ")");
  else
    w.add_string("general.name", "qsp synth " + p.name + " (" + what + ", seed " + std::to_string(seed) + ")");
  w.add_u32("general.alignment", kDefaultAlignment);
  if (file_type >= 0 && !extras.vocab_only) w.add_u32("general.file_type", uint32_t(file_type));
  w.add_u32("general.quantization_version", 2);
  add_model_keys(w, p);
  if (tok)
    add_tokenizer_keys(w, *tok);
  else
    w.add_string("tokenizer.ggml.model", "none");
  std::vector<SynthTensor> ts;
  if (!extras.vocab_only) ts = synth_tensors(p, st, seed);
  for (const SynthTensor& t : ts) {
    if (t.vector)
      w.add_tensor(t.name, t.type, {t.cols});
    else
      w.add_tensor(t.name, t.type, {t.cols, t.rows});
  }
  if (tensors) *tensors = std::move(ts);
  return w;
}

std::vector<uint8_t> synth_memory(const SynthPreset& p, const SynthType& wtype, uint64_t seed, int n_threads,
                                  const SynthExtras& extras) {
  std::vector<SynthTensor> ts;
  Writer w = synth_writer(p, wtype, seed, &ts, extras);
  return w.write_memory([&](size_t i, uint64_t r0, uint64_t r1, uint8_t* dst) { synth_rows(ts[i], r0, r1, dst); },
                        n_threads);
}

void synth_file(const std::string& path, const SynthPreset& p, const SynthType& wtype, uint64_t seed, int n_threads,
                const Writer::Progress& progress, const SynthExtras& extras) {
  std::vector<SynthTensor> ts;
  Writer w = synth_writer(p, wtype, seed, &ts, extras);
  w.write_file(
      path, [&](size_t i, uint64_t r0, uint64_t r1, uint8_t* dst) { synth_rows(ts[i], r0, r1, dst); }, n_threads,
      progress);
}

}  // namespace gguf
}  // namespace qsp
