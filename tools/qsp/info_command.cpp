// `qsp info`: what a GGUF model is, what it needs in memory (whole, or per
// shard of a split over devices), and whether qsp can run it.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>

#include "cli.h"

namespace qsp_cli {
namespace {

// general.file_type (llama.cpp's llama_ftype) as llama.cpp names it, e.g.
// 15 -> "Q4_K - Medium"; nullptr for an id this table does not know.
const char* file_type_name(int32_t ft) {
  static const struct {
    int32_t id;
    const char* name;
  } kNames[] = {
      {0, "all F32"},          {1, "F16"},            {2, "Q4_0"},           {3, "Q4_1"},
      {7, "Q8_0"},             {8, "Q5_0"},           {9, "Q5_1"},           {10, "Q2_K - Medium"},
      {11, "Q3_K - Small"},    {12, "Q3_K - Medium"}, {13, "Q3_K - Large"},  {14, "Q4_K - Small"},
      {15, "Q4_K - Medium"},   {16, "Q5_K - Small"},  {17, "Q5_K - Medium"}, {18, "Q6_K"},
      {19, "IQ2_XXS - 2.0625 bpw"}, {20, "IQ2_XS - 2.3125 bpw"}, {21, "Q2_K - Small"},
      {23, "IQ3_XXS - 3.0625 bpw"}, {24, "IQ1_S - 1.5625 bpw"}, {25, "IQ4_NL - 4.5 bpw"},
      {28, "IQ2_S - 2.5 bpw"}, {29, "IQ2_M - 2.7 bpw"}, {30, "IQ4_XS - 4.25 bpw"},
      {31, "IQ1_M - 1.75 bpw"}, {32, "BF16"},
  };
  for (const auto& n : kNames)
    if (n.id == ft) return n.name;
  return nullptr;
}

// ---- the memory of a split (`qsp info --devices` / `--shards`) ----------------
struct SplitMemory {
  std::vector<uint64_t> weights;    // per shard: its part of the split tensors + the replicated ones
  std::vector<uint64_t> kv_per_1k;  // per shard: KV-cache bytes per 1024 tokens, fp16 (the CUDA backend's)
  uint64_t split = 0;               // file bytes of the tensors that are split, all shards together
  uint64_t replicated = 0;          // file bytes of the tensors every shard holds whole
  std::string problem;              // a split tensor that does not cut into whole blocks; "" if none
};

// What each of n shards holds. This mirrors the rules of src/engine/partition.h
// (and the Split column of src/engine/slots.cpp), which the tool, a client of
// the public API, cannot include: shard s holds [s*X/N, (s+1)*X/N) of each
// count X: query heads (the rows of attn_q = wq, the columns of attn_output =
// wo), KV heads (the rows of attn_k / attn_v = wk / wv, and its part of the KV
// cache), FFN features (the rows of ffn_gate / ffn_up = w_gate / w_up, the
// columns of ffn_down = w_down) and vocabulary rows (output = the LM head).
// Everything else is replicated: token_embd, the norms (and a tied LM head,
// which is token_embd itself). The library requires the heads and features to
// divide, so the shards of a split tensor are equal (the LM head's may differ
// by a row when the vocabulary does not divide). Bytes come from
// qsp_dtype_size, so a column split that is not whole quantization blocks
// (a K-quant's 256) is found: the library refuses it at upload.
SplitMemory split_memory(const qsp_gguf* g, const qsp_gguf_info& i, uint32_t n) {
  struct Cut {
    const char* name;  // after "blk.N." for the layers' tensors
    bool layer, cols;  // a layer's tensor; its columns (else its rows) are cut
    uint32_t count;    // the count X whose shares the shards hold
  };
  const Cut cuts[] = {
      {"attn_q.weight", true, false, i.n_heads},       {"attn_k.weight", true, false, i.n_kv_heads},
      {"attn_v.weight", true, false, i.n_kv_heads},    {"attn_output.weight", true, true, i.n_heads},
      {"ffn_gate.weight", true, false, i.intermediate_size}, {"ffn_up.weight", true, false, i.intermediate_size},
      {"ffn_down.weight", true, true, i.intermediate_size},  {"output.weight", false, false, i.vocab_size},
  };
  auto share = [n](uint64_t count, uint32_t s) { return count * (s + 1) / n - count * s / n; };
  SplitMemory r;
  r.weights.assign(n, 0);
  for (uint64_t t = 0; t < i.tensor_count; ++t) {
    qsp_gguf_tensor_desc d;
    qsp_gguf_tensor_desc_init(&d);
    if (qsp_gguf_tensor_info(g, t, &d) != QSP_OK) continue;
    const std::string name = d.name;
    const bool in_layer = name.compare(0, 4, "blk.") == 0;
    const size_t dot = in_layer ? name.find('.', 4) : std::string::npos;
    const std::string base = in_layer ? (dot == std::string::npos ? "" : name.substr(dot + 1)) : name;
    const Cut* cut = nullptr;
    for (const Cut& c : cuts)
      if (c.layer == in_layer && base == c.name) cut = &c;
    if (!cut) {  // replicated
      r.replicated += d.n_bytes;
      continue;
    }
    r.split += d.n_bytes;
    const uint64_t side = cut->cols ? d.n_cols : d.n_rows;  // the dimension that is cut
    if (cut->count == 0 || side % cut->count != 0) {
      if (r.problem.empty())
        r.problem = name + ": " + std::to_string(side) + (cut->cols ? " columns" : " rows") +
                    " are not whole units of a count of " + std::to_string(cut->count);
      for (uint32_t s = 0; s < n; ++s) r.weights[s] += d.n_bytes * share(side, s) / std::max<uint64_t>(1, side);
      continue;
    }
    const uint64_t unit = side / cut->count;  // head_dim for heads, 1 for features and vocabulary rows
    const bool known = qsp_dtype_size(d.type, d.n_rows, d.n_cols) != 0;
    for (uint32_t s = 0; s < n; ++s) {
      const uint64_t part = share(cut->count, s) * unit;
      uint64_t b = cut->cols ? qsp_dtype_size(d.type, d.n_rows, part) : qsp_dtype_size(d.type, part, d.n_cols);
      if (!known || (b == 0 && part != 0)) {  // a type qsp does not compute, or a column cut inside a block
        if (known && r.problem.empty())
          r.problem = name + " (" + d.type_name + "): " + std::to_string(side) + " columns over " +
                      std::to_string(n) + " shards give " + std::to_string(part) + " per shard, not whole " +
                      d.type_name + " blocks";
        b = d.n_bytes * part / side;
      }
      r.weights[s] += b;
    }
  }
  for (uint32_t s = 0; s < n; ++s) {
    r.weights[s] += r.replicated;
    // Keys and values of its KV heads, 1024 positions, fp16 (the CUDA backend's per-rank k_cache / v_cache).
    r.kv_per_1k.push_back(2ull * i.n_layers * share(i.n_kv_heads, s) * i.head_dim * 1024 * 2);
  }
  return r;
}

// The library's own verdict on n shards of the model (engine/partition.cpp):
// a CPU context of one token with n_devices = n. "" when the split divides
// (or the model cannot be described to the library: info says so elsewhere),
// else the message of QSP_ERR_SHAPE naming what does not divide.
std::string split_refused(const qsp_gguf* g, uint32_t n) {
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.backend = QSP_BACKEND_CPU;
  p.n_threads = 1;
  p.max_seq_len = 1;
  p.n_devices = n;
  if (qsp_gguf_fill_params(g, &p) != QSP_OK) return "";
  qsp_context* ctx = nullptr;
  const qsp_status st = qsp_context_create(&p, &ctx);
  qsp_context_destroy(ctx);
  // UNSUPPORTED: a count the CPU does not run (not 1, 2, 4 or 8), checked after the split divided.
  return st == QSP_ERR_SHAPE ? qsp_last_error() : "";
}

}  // namespace

// ---- info --------------------------------------------------------------------
int cmd_info(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = {{"--tensors", nullptr, false}, {"--device", nullptr, true}, {"--help", "-h", false}};
  specs.insert(specs.end(), kDeviceOptions.begin(), kDeviceOptions.end());
  const ParsedArgs a = parse_args("info", argv, specs);
  if (a.has("--help")) {
    std::printf(
        "usage: qsp info [MODEL] [--tensors] [--devices LIST | [--device N] --shards N]\n"
        "Describes a GGUF model: architecture, shapes, tensor types and sizes, and the\n"
        "memory it needs (weights + KV cache at the context length), and per device the\n"
        "weights of its shard and its KV cache per 1024 tokens (fp16, as the CUDA\n"
        "backend keeps it): one device unless --devices / --shards split the model\n"
        "(wq, wk, wv, wo, w_gate, w_up, w_down and the LM head are split, token_embd\n"
        "and the norms replicated). Says whether qsp can run it and, if not, why.\n"
        "  --tensors        list every tensor (name, type, shape, bytes, offset)\n"
        "  --device N       the device of --shards (default 0)\n"
        "%s"
        "                   A split the model does not divide is an error (exit 1).\n"
        "  -h, --help       show this help\n"
        "Without MODEL it describes the built-in tiny model.\n",
        kDeviceHelp);
    return 0;
  }
  const DeviceSplit split = device_split(a);
  std::unique_ptr<Model> m = Model::open(model_arg(a, "info"));
  const qsp_gguf_info& i = m->info();
  const qsp_gguf* g = m->gguf();
  // The split first: one the model does not divide is an error, before anything is printed.
  const SplitMemory mem = split_memory(g, i, split.shards());
  if (split.shards() > 1) {
    std::string why = split_refused(g, split.shards());
    if (why.empty()) why = mem.problem;
    if (!why.empty()) throw RuntimeError(m->label() + ": " + split.describe() + ": " + why);
  }
  std::printf("model:        %s\n", m->label().c_str());
  if (i.name[0]) std::printf("name:         %s\n", i.name);
  std::printf("file:         %s, GGUF v%u, %" PRIu64 " tensors, %" PRIu64 " metadata keys, alignment %u\n",
              human_bytes(i.file_size).c_str(), i.version, i.tensor_count, i.kv_count, i.alignment);
  if (i.file_type >= 0) {
    const char* ftn = file_type_name(i.file_type);
    std::printf("file type:    %s (general.file_type %d)\n", ftn ? ftn : "unknown to qsp", i.file_type);
  }
  std::printf("architecture: %s%s\n", i.architecture[0] ? i.architecture : "(none)",
              i.known_architecture ? "" : " (not one qsp runs: qwen3, llama)");
  std::printf("layers:       %u\n", i.n_layers);
  std::printf("hidden:       %u (ffn %u)\n", i.hidden_size, i.intermediate_size);
  std::printf("attention:    %u query heads, %u kv heads, head_dim %u%s\n", i.n_heads, i.n_kv_heads, i.head_dim,
              i.qk_norm == 1 ? ", QK-norm" : "");
  std::printf("rope:         %s, theta %g\n",
              i.rope_style == QSP_ROPE_NEOX ? "NEOX" : i.rope_style == QSP_ROPE_INTERLEAVED ? "interleaved" : "?",
              double(i.rope_theta));
  std::printf("rms_eps:      %g\n", double(i.rms_eps));
  std::printf("vocab:        %u%s\n", i.vocab_size, i.tied_embeddings ? " (LM head tied to token_embd)" : "");
  std::printf("context:      %u tokens\n", i.context_length);
  if (std::unique_ptr<Tokenizer> t = Tokenizer::try_open(*m)) {
    const qsp_tokenizer_info& ti = t->info();
    std::string chat = "none";
    if (ti.chat_template[0]) {
      try {
        chat = chat_format_name(chat_format(*t, m->label()));
      } catch (const RuntimeError&) {
        chat = "not one qsp recognises";
      }
    }
    std::printf("tokenizer:    %s%s%s%s, %u tokens, BOS %d%s, EOS %d, EOT %d, chat template: %s\n", ti.model,
                ti.pre[0] ? " (" : "", ti.pre, ti.pre[0] ? ")" : "", ti.n_vocab, ti.bos_id,
                ti.add_bos ? " (added)" : "", ti.eos_id, ti.eot_id, chat.c_str());
  } else {
    std::printf("tokenizer:    none qsp can use (%s)\n", qsp_gguf_last_error());
  }

  std::map<int32_t, std::pair<uint64_t, uint64_t>> by_type;  // type -> (count, bytes)
  for (uint64_t t = 0; t < i.tensor_count; ++t) {
    qsp_gguf_tensor_desc d;
    qsp_gguf_tensor_desc_init(&d);
    if (qsp_gguf_tensor_info(g, t, &d) != QSP_OK) continue;
    by_type[d.type].first++;
    by_type[d.type].second += d.n_bytes;
  }
  std::printf("tensor types:");
  const char* sep = " ";
  std::string cannot;  // the types qsp does not compute, with their tensor counts
  for (const auto& kv : by_type) {
    std::printf("%s%s x%" PRIu64 " (%s)", sep, qsp_gguf_type_name(kv.first), kv.second.first,
                human_bytes(kv.second.second).c_str());
    sep = ", ";
    if (!computable(kv.first))
      cannot += (cannot.empty() ? "" : ", ") + std::string(qsp_gguf_type_name(kv.first)) + " (" +
                std::to_string(kv.second.first) + (kv.second.first == 1 ? " tensor)" : " tensors)");
  }
  std::printf("\n");
  if (cannot.empty())
    std::printf("computable:   yes, qsp computes every tensor type of the file\n");
  else
    std::printf("computable:   no, qsp does not compute %s\n", cannot.c_str());
  std::printf("weights:      %s\n", human_bytes(i.weight_bytes).c_str());
  const uint64_t kv_elems = 2ull * i.n_layers * i.n_kv_heads * i.head_dim * uint64_t(i.context_length);
  std::printf("KV cache:     %s at %u tokens on CUDA (fp16), %s on the CPU (fp32); %s per 1k tokens (CUDA)\n",
              human_bytes(kv_elems * 2).c_str(), i.context_length, human_bytes(kv_elems * 4).c_str(),
              human_bytes(2ull * i.n_layers * i.n_kv_heads * i.head_dim * 1024 * 2).c_str());
  std::printf("memory:       %s on CUDA, %s on the CPU (weights + KV cache; plus activation scratch)\n",
              human_bytes(i.weight_bytes + kv_elems * 2).c_str(), human_bytes(i.weight_bytes + kv_elems * 4).c_str());
  // Per device: its shard's weights and KV cache (split_memory).
  if (split.shards() <= 1)
    std::printf("split:        %s (--devices LIST / --shards N: the memory per device of a split)\n",
                split.describe().c_str());
  else
    std::printf("split:        %s%s\n"
                "              split:      %s (%" PRIu64 " B) over the shards: wq, wk, wv, wo, w_gate, w_up, w_down%s\n"
                "              replicated: %s (%" PRIu64 " B) on each: token_embd%s, the norms\n",
                split.describe().c_str(), split.one_device ? "; per shard, what a device of its own holds" : "",
                human_bytes(mem.split).c_str(), mem.split, i.tied_embeddings ? "" : ", the LM head",
                human_bytes(mem.replicated).c_str(), mem.replicated,
                i.tied_embeddings ? " (also the LM head: tied)" : "");
  for (uint32_t s = 0; s < split.shards(); ++s) {
    const std::string label = (split.one_device ? "shard " : "device ") +
                              std::to_string(split.one_device ? int32_t(s) : split.devices[s]) + ":";
    std::printf("%-13s weights %s (%" PRIu64 " B), KV cache %s (%" PRIu64 " B) per 1024 tokens\n", label.c_str(),
                human_bytes(mem.weights[s]).c_str(), mem.weights[s], human_bytes(mem.kv_per_1k[s]).c_str(),
                mem.kv_per_1k[s]);
  }
  std::printf("              (KV cache in fp16, as the CUDA backend keeps it; the CPU backend's fp32 is twice that)\n");
  uint64_t idx = 0;
  if (qsp_gguf_find_tensor(g, "rope_freqs.weight", &idx) == QSP_OK)
    std::printf("note:         rope_freqs.weight (Llama 3.1 RoPE scaling) is not applied by qsp\n");
  qsp_context_params p;
  qsp_context_params_init(&p);
  if (qsp_gguf_fill_params(g, &p) == QSP_OK)
    std::printf("runnable:     yes\n");
  else if (!cannot.empty())
    std::printf("runnable:     no: qsp does not compute %s (first problem found: %s)\n", cannot.c_str(),
                qsp_gguf_last_error());
  else
    std::printf("runnable:     no: %s\n", qsp_gguf_last_error());

  if (a.has("--tensors")) {
    std::printf("\n%5s  %-32s %-8s %-26s %12s %12s\n", "#", "name", "type", "shape (ne)", "bytes", "offset");
    for (uint64_t t = 0; t < i.tensor_count; ++t) {
      qsp_gguf_tensor_desc d;
      qsp_gguf_tensor_desc_init(&d);
      if (qsp_gguf_tensor_info(g, t, &d) != QSP_OK) continue;
      std::string shape = "[";
      for (uint32_t k = 0; k < std::max(1u, d.n_dims); ++k)
        shape += (k ? ", " : "") + std::to_string(d.ne[k]);
      shape += "]";
      std::printf("%5" PRIu64 "  %-32s %-8s %-26s %12" PRIu64 " %12" PRIu64 "\n", t, d.name, d.type_name,
                  shape.c_str(), d.n_bytes, d.offset);
    }
  }
  return 0;
}

}  // namespace qsp_cli
