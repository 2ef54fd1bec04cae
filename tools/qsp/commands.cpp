// The subcommands of `qsp`: info, prefill (also the demo) and synth, and the
// helpers every subcommand shares; generate and bench are in run_commands.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "cli.h"
#include "gguf_write/gguf_synth.h"

namespace qsp_cli {

// ---- Shared by the subcommands (declared in cli.h) -------------------------------

std::vector<OptionSpec> with_exec(std::vector<OptionSpec> v) {
  v.insert(v.end(), kExecOptions.begin(), kExecOptions.end());
  v.push_back({"--help", "-h", false});
  return v;
}

// --devices / --shards, in the help of the commands that run a model and of info.
#define QSP_DEVICE_HELP                                                                     \
  "  --devices LIST   CUDA device ordinals, comma-separated (0 to 31): several split the\n" \
  "                   model over them, one shard per device (tensor parallelism, e.g.\n"  \
  "                   0,1); one is that device, unsplit (as --device)\n"                 \
  "  --shards N       split the model into N shards (1 to 32) that run in turn on one\n"  \
  "                   device (--device, or --devices of one entry), their partial sums\n" \
  "                   added locally; on the CPU backend the shard mode (1, 2, 4 or 8),\n"  \
  "                   bit for bit the unsplit model. The model must divide: n_kv_heads\n" \
  "                   and the ffn size by N, wo and w_down into whole quantization\n"   \
  "                   blocks per shard (else an error naming what does not)\n"

extern const char* const kDeviceHelp = QSP_DEVICE_HELP;

extern const char* const kExecHelp =
    "  --backend B      auto (default: CUDA when usable, else CPU), cpu or cuda\n"
    "  --device N       CUDA device ordinal (default 0)\n"
    QSP_DEVICE_HELP
    "                   (CUDA runs no split yet: n_devices > 1 is an error there)\n"
    "  -t, --threads N  CPU threads (default 0 = one per core)\n"
    "  -c, --ctx N      KV-cache capacity in tokens (default: what the command needs)\n"
    "  -v, --verbose    print the library's log messages on stderr\n"
    "  -h, --help       show this help\n"
    "MODEL is a GGUF file (qwen3 or llama; any weight format qsp computes: 'qsp info'\n"
    "says); without it the built-in tiny model runs (synthesized in memory, no file needed).\n";

std::string model_arg(const ParsedArgs& a, const std::string& command) {
  if (a.positional.size() > 1)
    throw UsageError("'qsp " + command + "' takes one MODEL, got " + std::to_string(a.positional.size()) +
                     " arguments (see 'qsp " + command + " --help')");
  return a.positional.empty() ? "" : a.positional[0];
}

// The prompt of --tokens / --random [--seed].
std::vector<int32_t> prompt_tokens(const ParsedArgs& a, const Model& m, uint32_t default_random) {
  m.check_runnable();
  if (int(a.has("--tokens")) + int(a.has("--random")) + int(has_text_prompt(a)) > 1)
    throw UsageError("--tokens, --random and --prompt / --prompt-file exclude each other");
  const uint32_t vocab = m.info().vocab_size;
  std::vector<int32_t> t;
  if (has_text_prompt(a) || a.has("--chat")) {
    if (a.has("--seed")) throw UsageError("--seed applies to --random only");
    t = text_prompt_tokens(a, m);
  } else if (a.has("--tokens")) {
    t = parse_token_list("--tokens", a.get("--tokens"));
    for (int32_t id : t)
      if (uint32_t(id) >= vocab)
        throw UsageError("--tokens: token " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(vocab) + ") of " + m.label());
    if (a.has("--seed")) throw UsageError("--seed applies to --random only");
  } else {
    uint32_t n = default_random;
    if (a.has("--random")) n = uint32_t(parse_uint("--random", a.get("--random"), 1, 1u << 24));
    if (n == 0) throw UsageError("give the prompt with --prompt TEXT, --tokens 1,2,3 or --random N");
    const uint64_t seed = a.has("--seed") ? parse_uint("--seed", a.get("--seed"), 0, UINT64_MAX) : 1;
    if (vocab == 0) throw RuntimeError(m.label() + ": the vocabulary size is unknown");
    t = random_tokens(n, vocab, seed);
  }
  return t;
}

void print_model(const Model& m) { std::printf("model: %s (%s)\n", m.label().c_str(), m.summary().c_str()); }

void print_backend(qsp_context* ctx, const ExecOptions& e) {
  const std::string b = backend_line(ctx);
  const bool cuda = b.compare(0, 4, "CUDA") == 0;
  const bool fell_back = e.backend == QSP_BACKEND_AUTO && !cuda;
  std::string why;
  if (fell_back && qsp_backend_available(QSP_BACKEND_CUDA)) {
    // CUDA is there, but not every device asked for (the library falls back to the CPU).
    std::string list;  // the devices asked for (the shard mode: one)
    for (size_t k = 0; k < (e.split.one_device ? 1 : e.split.devices.size()); ++k)
      list += (k ? "," : "") + std::to_string(e.split.devices[k]);
    why = ", CUDA device(s) " + list + " not all present: running on the CPU reference backend";
  } else if (fell_back) {
    why = ", no usable CUDA device: running on the CPU reference backend";
  }
  std::printf("backend: %s%s\n", b.c_str(), why.c_str());
  if (e.split.shards() > 1)
    std::printf("split: %s\n", cuda ? e.split.describe().c_str()
                                      : (std::to_string(e.split.shards()) +
                                         " shards, one after another on the CPU (local sums: the unsplit model's "
                                         "result, bit for bit)").c_str());
}

// Runs the prompt through qsp_prefill, `chunk` tokens per call (0: all at once).
double run_prefill(qsp_context* ctx, const std::vector<int32_t>& t, uint32_t chunk) {
  const double t0 = now_seconds();
  const uint32_t n = uint32_t(t.size());
  const uint32_t step = chunk ? chunk : n;
  for (uint32_t done = 0; done < n; done += step)
    check(qsp_prefill(ctx, t.data() + done, std::min(step, n - done)), ctx, "qsp_prefill");
  return now_seconds() - t0;
}

namespace {

void write_logits(const std::string& path, const float* logits, uint32_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw RuntimeError("cannot create " + path + ": " + std::strerror(errno));
  const size_t w = std::fwrite(logits, sizeof(float), n, f);  // little-endian hosts: raw = LE float32
  const int e = errno;
  if (std::fclose(f) != 0 || w != n) throw RuntimeError("cannot write " + path + ": " + std::strerror(e));
}

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

// "q4_0, q8_0, ...": the matrix types `qsp synth` writes (every format the
// library computes).
std::string wtype_names() {
  std::string r;
  for (int32_t t : computable_types()) r += (r.empty() ? "" : ", ") + std::string(qsp_dtype_name(t));
  return r;
}

// "q4_k_m, q4_k_s, ...": the llama.cpp file types `qsp synth` writes as a mix.
std::string file_type_names() {
  std::string r;
  for (const auto& f : qsp::gguf::synth_file_types()) r += (r.empty() ? "" : ", ") + std::string(f.name);
  return r;
}

// A format name spelled exactly as qsp prints it (q4_K, q6_K, q4_1) is that
// format for every matrix; any other spelling that names a llama.cpp file
// type, case-insensitively (q4_k_m, Q6_K, Q4_1), is that file type's mix.
qsp::gguf::SynthType wtype_of(const std::string& s) {
  for (int32_t t : computable_types())
    if (s == qsp_dtype_name(t)) return t;
  if (const qsp::gguf::SynthFileType* f = qsp::gguf::find_synth_file_type(s)) return {f->base, f->file_type};
  throw UsageError("--type expects a format (" + wtype_names() + ") or a llama.cpp file type (" +
                   file_type_names() + "), got '" + s + "'");
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

// ---- prefill (and the demo) --------------------------------------------------
int cmd_prefill(const std::vector<std::string>& argv, bool demo) {
  const ParsedArgs a = parse_args("prefill", argv,
                                  with_exec({{"--tokens", nullptr, true},
                                             {"--prompt", nullptr, true},
                                             {"--prompt-file", nullptr, true},
                                             {"--chat", nullptr, false},
                                             {"--random", "-r", true},
                                             {"--seed", "-s", true},
                                             {"--chunk", nullptr, true},
                                             {"--top", "-k", true},
                                             {"--warmup", nullptr, true},
                                             {"--logits-out", "-o", true}}));
  if (a.has("--help")) {
    std::printf(
        "usage: qsp prefill [MODEL] (--prompt TEXT [--chat] | --tokens 1,2,3 | --random N [--seed S]) [options]\n"
        "Runs a prompt through the model (qsp_prefill) and prints the time, tokens/s\n"
        "and the top-K next tokens with their logits.\n"
        "%s"
        "  --tokens LIST      the prompt: comma-separated token ids\n"
        "  -r, --random N     the prompt: N random token ids (uniform over the vocabulary)\n"
        "  -s, --seed S       seed of --random (default 1)\n"
        "  --chunk N          feed the prompt N tokens per qsp_prefill call (default: all at once)\n"
        "  -k, --top K        print the K most likely next tokens (default 5; 0: none)\n"
        "  --warmup N         run the prompt N times before the timed run (default 1 on CUDA, 0 on the CPU)\n"
        "  -o, --logits-out F write the last token's logits to F: vocab_size little-endian float32\n"
        "%s",
        kTextPromptHelp, kExecHelp);
    return 0;
  }
  const ExecOptions e = exec_options(a);
  std::unique_ptr<Model> m = Model::open(model_arg(a, "prefill"));
  const std::vector<int32_t> tokens = prompt_tokens(a, *m, demo ? 128 : 0);
  const uint32_t chunk = a.has("--chunk") ? uint32_t(parse_uint("--chunk", a.get("--chunk"), 1, 1u << 24)) : 0;
  const uint32_t top = a.has("--top") ? uint32_t(parse_uint("--top", a.get("--top"), 0, 1u << 30)) : 5;
  int64_t warmup = a.has("--warmup") ? int64_t(parse_uint("--warmup", a.get("--warmup"), 0, 1000)) : -1;

  if (demo) std::printf("qsp %s: prompt prefill on the built-in tiny model (no file needed)\n", qsp_version_string());
  print_model(*m);
  double upload_s = 0;
  qsp_context* ctx = m->create_context(e, uint32_t(tokens.size()), &upload_s);
  ContextGuard guard(ctx);
  const std::string backend = backend_line(ctx);
  print_backend(ctx, e);
  std::printf("upload: %s in %.1f ms\n", human_bytes(m->info().weight_bytes).c_str(), upload_s * 1e3);
  if (warmup < 0) warmup = backend.compare(0, 4, "CUDA") == 0 ? 1 : 0;
  for (int64_t w = 0; w < warmup; ++w) {
    run_prefill(ctx, tokens, chunk);
    check(qsp_kv_clear(ctx), ctx, "qsp_kv_clear");
  }
  const double dt = run_prefill(ctx, tokens, chunk);
  std::printf("prefill: %zu tokens in %.2f ms = %s tokens/s", tokens.size(), dt * 1e3,
              rate(double(tokens.size()), dt).c_str());
  if (chunk) std::printf(" (chunks of %u)", chunk);
  std::printf("\n");
  const float* logits = nullptr;
  uint32_t vocab = 0;
  check(qsp_get_logits(ctx, &logits, &vocab), ctx, "qsp_get_logits");
  print_top_k(logits, vocab, top, Tokenizer::try_open(*m).get());
  if (a.has("--logits-out")) {
    write_logits(a.get("--logits-out"), logits, vocab);
    std::printf("logits: %u float32 values written to %s\n", vocab, a.get("--logits-out").c_str());
  }
  return 0;
}

// ---- generate ----------------------------------------------------------------

int cmd_synth(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("synth", argv,
                                  {{"--preset", "-p", true},
                                   {"--type", nullptr, true},
                                   {"--seed", "-s", true},
                                   {"--threads", "-t", true},
                                   {"--tokenizer", nullptr, true},
                                   {"--vocab-size", nullptr, true},
                                   {"--vocab-only", nullptr, false},
                                   {"--force", "-f", false},
                                   {"--help", "-h", false}});
  if (a.has("--help")) {
    std::printf(
        "usage: qsp synth --preset NAME [--type TYPE] [--seed S] OUT.gguf\n"
        "       qsp synth --tokenizer tokenizer.json [--preset NAME] [--vocab-only] OUT.gguf\n"
        "Writes a GGUF v3 file with deterministic random weights of realistic scale in\n"
        "the shapes and tensor names of a real architecture (no tokenizer:\n"
        "tokenizer.ggml.model = \"none\" and <arch>.vocab_size, unless --tokenizer gives\n"
        "one). Large presets stream to disk. The same preset, type, seed and tokenizer\n"
        "give the same bytes.\n"
        "  -p, --preset NAME  one of:\n");
    for (const auto& p : qsp::gguf::synth_presets())
      std::printf("                       %-12s %s\n", p.name.c_str(), p.about.c_str());
    std::printf("  --type T           q4_0 by default (norms are f32); either a format for every\n"
                "                     matrix, spelled as here:\n"
                "                       %s\n"
                "                     or a llama.cpp file type (any case) for its per-tensor mix\n"
                "                     (output and attn_v / ffn_down of some layers get more bits;\n"
                "                     docs/GGUF.md has the rules):\n"
                "                       %s\n"
                "                     q6_K is every matrix in q6_K, q6_k / Q6_K the file type\n"
                "                     (the same but the fallback where a row is not a multiple\n"
                "                     of 256); q4_1 the format, Q4_1 the file type (LM head q6_K)\n",
                wtype_names().c_str(), file_type_names().c_str());
    std::printf(
        "  -s, --seed S       seed (default 1)\n"
        "  -t, --threads N    generator threads (default: one per core)\n"
        "  --tokenizer FILE   a Hugging Face tokenizer.json (byte-level BPE: Qwen2/Qwen3,\n"
        "                     Llama 3, GPT-2): its vocabulary, merges and special tokens\n"
        "                     become the tokenizer.ggml.* keys as llama.cpp's converter\n"
        "                     writes them (tokenizer_config.json next to it is read too;\n"
        "                     docs/GGUF.md says what is written). The vocabulary size\n"
        "                     follows the tokenizer. Without --preset: tiny-llama for a\n"
        "                     Llama 3 tokenizer, tiny otherwise\n"
        "  --vocab-size N     pad the vocabulary with [PAD<id>] tokens up to N (as a\n"
        "                     model's config.json vocab_size does; Qwen3: 151936)\n"
        "  --vocab-only       write the metadata and the tokenizer, no tensors (as\n"
        "                     llama.cpp's --vocab-only files); needs --tokenizer\n"
        "  -f, --force        overwrite OUT if it exists\n"
        "  -h, --help         show this help\n");
    return 0;
  }
  if (a.has("--vocab-only") && !a.has("--tokenizer"))
    throw UsageError("--vocab-only needs --tokenizer (see 'qsp synth --help')");
  if (a.has("--vocab-size") && !a.has("--tokenizer"))
    throw UsageError("--vocab-size needs --tokenizer (see 'qsp synth --help')");
  if (!a.has("--preset") && !a.has("--tokenizer"))
    throw UsageError("synth needs --preset (see 'qsp synth --help')");
  if (a.has("--preset") && !qsp::gguf::find_synth_preset(a.get("--preset"))) {
    std::string names;
    for (const auto& q : qsp::gguf::synth_presets()) names += (names.empty() ? "" : ", ") + q.name;
    throw UsageError("unknown preset '" + a.get("--preset") + "' (presets: " + names + ")");
  }
  const std::string type_arg = a.get("--type", "q4_0");
  const qsp::gguf::SynthType wtype = wtype_of(type_arg);
  const uint64_t seed = a.has("--seed") ? parse_uint("--seed", a.get("--seed"), 0, UINT64_MAX) : 1;
  int threads = a.has("--threads") ? int(parse_uint("--threads", a.get("--threads"), 0, 4096)) : 0;
  if (threads == 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const uint32_t vocab_size =
      a.has("--vocab-size") ? uint32_t(parse_uint("--vocab-size", a.get("--vocab-size"), 1, INT32_MAX)) : 0;
  if (a.positional.size() != 1)
    throw UsageError("synth needs exactly one output file (see 'qsp synth --help')");
  const std::string out = a.positional[0];
  struct stat sb;
  if (!a.has("--force") && stat(out.c_str(), &sb) == 0)
    throw RuntimeError(out + " exists (use --force to overwrite)");
  qsp::gguf::TokenizerKeys tok;
  qsp::gguf::SynthExtras extras;
  if (a.has("--tokenizer")) {
    try {
      tok = qsp::gguf::load_hf_tokenizer(a.get("--tokenizer"), vocab_size);
    } catch (const std::exception& err) {  // unreadable, not JSON, a tokenizer qsp cannot write
      throw RuntimeError(err.what());
    }
    extras.tokenizer = &tok;
    extras.vocab_only = a.has("--vocab-only");
  }
  std::string preset_name = a.get("--preset", tok.pre == "llama-bpe" ? "tiny-llama" : "tiny");
  qsp::gguf::SynthPreset preset = *qsp::gguf::find_synth_preset(preset_name);
  if (extras.tokenizer) preset.vocab = uint32_t(tok.tokens.size());
  ProgressBar bar("writing " + out, 32ull << 20);
  const double t0 = now_seconds();
  try {
    qsp::gguf::synth_file(out, preset, wtype, seed, threads, [&](uint64_t d, uint64_t t) { bar.update(d, t); },
                          extras);
  } catch (const std::exception& err) {  // I/O, or a type whose block does not divide the preset's shapes
    bar.finish();
    throw RuntimeError(err.what());
  }
  bar.finish();
  if (stat(out.c_str(), &sb) != 0) throw RuntimeError("cannot stat " + out + " after writing it");
  if (extras.tokenizer)
    std::printf("tokenizer: %s, pre %s: %zu tokens (%u added), %zu merges%s\n", a.get("--tokenizer").c_str(),
                tok.pre.c_str(), tok.tokens.size(), tok.n_added, tok.merges.size(),
                tok.had_config ? ", with tokenizer_config.json" : "");
  if (extras.vocab_only) {
    std::printf("wrote %s: vocabulary only (%s), %s in %.1f s\n", out.c_str(), preset.arch.c_str(),
                human_bytes(uint64_t(sb.st_size)).c_str(), now_seconds() - t0);
    return 0;
  }
  std::printf("wrote %s: preset %s (%s), %s, seed %" PRIu64 ", %s in %.1f s\n", out.c_str(), preset.name.c_str(),
              preset.arch.c_str(),
              wtype.mix() ? (qsp::gguf::find_synth_file_type(type_arg)->name + std::string(" mix")).c_str()
                          : qsp_dtype_name(wtype.base),
              seed, human_bytes(uint64_t(sb.st_size)).c_str(),
              now_seconds() - t0);
  return 0;
}

}  // namespace qsp_cli
