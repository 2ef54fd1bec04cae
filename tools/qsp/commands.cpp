// The subcommands of `qsp`: prefill (also the demo) and synth, and the
// helpers every subcommand shares; info is in info_command.cpp, generate and
// bench in run_commands.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "cli.h"
#include "gguf_write/gguf_synth.h"

namespace qsp_cli {

// ---- Shared by the subcommands (declared in cli.h) -------------------------------

std::vector<OptionSpec> with_exec(std::vector<OptionSpec> v) {
  v.insert(v.end(), kExecOptions.begin(), kExecOptions.end());
  v.push_back({"--help", "-h", false});
  return v;
}

std::vector<OptionSpec> with_prompt_exec(std::vector<OptionSpec> v) {
  v.insert(v.end(), {{"--tokens", nullptr, true}, {"--random", "-r", true}, {"--seed", "-s", true}});
  v.insert(v.end(), kTextPromptOptions.begin(), kTextPromptOptions.end());
  return with_exec(std::move(v));
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

}  // namespace

// ---- prefill (and the demo) --------------------------------------------------
int cmd_prefill(const std::vector<std::string>& argv, bool demo) {
  const ParsedArgs a = parse_args("prefill", argv,
                                  with_prompt_exec({{"--chunk", nullptr, true},
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
