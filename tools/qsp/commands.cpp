// The subcommands of `qsp`: info, prefill (also the demo), generate, bench, synth.
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

namespace {

std::vector<OptionSpec> with_exec(std::vector<OptionSpec> v) {
  v.insert(v.end(), kExecOptions.begin(), kExecOptions.end());
  v.push_back({"--help", "-h", false});
  return v;
}

const char* const kExecHelp =
    "  --backend B      auto (default: CUDA when usable, else CPU), cpu or cuda\n"
    "  --device N       CUDA device ordinal (default 0)\n"
    "  -t, --threads N  CPU threads (default 0 = one per core)\n"
    "  -c, --ctx N      KV-cache capacity in tokens (default: what the command needs)\n"
    "  -v, --verbose    print the library's log messages on stderr\n"
    "  -h, --help       show this help\n"
    "MODEL is a GGUF file (qwen3 or llama; f32/f16/bf16/q4_0/q8_0 weights); without\n"
    "it the built-in tiny model runs (synthesized in memory, no file needed).\n";

std::string model_arg(const ParsedArgs& a, const std::string& command) {
  if (a.positional.size() > 1)
    throw UsageError("'qsp " + command + "' takes one MODEL, got " + std::to_string(a.positional.size()) +
                     " arguments (see 'qsp " + command + " --help')");
  return a.positional.empty() ? "" : a.positional[0];
}

// The prompt of --tokens / --random [--seed].
std::vector<int32_t> prompt_tokens(const ParsedArgs& a, const Model& m, uint32_t default_random) {
  m.check_runnable();
  if (a.has("--tokens") && a.has("--random")) throw UsageError("--tokens and --random exclude each other");
  const uint32_t vocab = m.info().vocab_size;
  std::vector<int32_t> t;
  if (a.has("--tokens")) {
    t = parse_token_list("--tokens", a.get("--tokens"));
    for (int32_t id : t)
      if (uint32_t(id) >= vocab)
        throw UsageError("--tokens: token " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(vocab) + ") of " + m.label());
    if (a.has("--seed")) throw UsageError("--seed applies to --random only");
  } else {
    uint32_t n = default_random;
    if (a.has("--random")) n = uint32_t(parse_uint("--random", a.get("--random"), 1, 1u << 24));
    if (n == 0) throw UsageError("give the prompt with --tokens 1,2,3 or --random N");
    const uint64_t seed = a.has("--seed") ? parse_uint("--seed", a.get("--seed"), 0, UINT64_MAX) : 1;
    if (vocab == 0) throw RuntimeError(m.label() + ": the vocabulary size is unknown");
    t = random_tokens(n, vocab, seed);
  }
  return t;
}

void print_model(const Model& m) { std::printf("model: %s (%s)\n", m.label().c_str(), m.summary().c_str()); }

void print_backend(qsp_context* ctx, const ExecOptions& e) {
  const std::string b = backend_line(ctx);
  const bool fell_back = e.backend == QSP_BACKEND_AUTO && b.compare(0, 4, "CUDA") != 0;
  std::printf("backend: %s%s\n", b.c_str(), fell_back ? ", no usable CUDA device: running on the CPU reference backend" : "");
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

int32_t wtype_of(const std::string& s) {
  for (int32_t t : computable_types())
    if (s == qsp_dtype_name(t)) return t;
  throw UsageError("--type expects one of " + wtype_names() + ", got '" + s + "'");
}

}  // namespace

// ---- info --------------------------------------------------------------------
int cmd_info(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("info", argv, {{"--tensors", nullptr, false}, {"--help", "-h", false}});
  if (a.has("--help")) {
    std::printf(
        "usage: qsp info [MODEL] [--tensors]\n"
        "Describes a GGUF model: architecture, shapes, tensor types and sizes, and the\n"
        "memory it needs (weights + KV cache at the context length). Says whether qsp\n"
        "can run it and, if not, why.\n"
        "  --tensors   list every tensor (name, type, shape, bytes, offset)\n"
        "  -h, --help  show this help\n"
        "Without MODEL it describes the built-in tiny model.\n");
    return 0;
  }
  std::unique_ptr<Model> m = Model::open(model_arg(a, "info"));
  const qsp_gguf_info& i = m->info();
  const qsp_gguf* g = m->gguf();
  std::printf("model:        %s\n", m->label().c_str());
  if (i.name[0]) std::printf("name:         %s\n", i.name);
  std::printf("file:         %s, GGUF v%u, %" PRIu64 " tensors, %" PRIu64 " metadata keys, alignment %u\n",
              human_bytes(i.file_size).c_str(), i.version, i.tensor_count, i.kv_count, i.alignment);
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
                                             {"--random", "-r", true},
                                             {"--seed", "-s", true},
                                             {"--chunk", nullptr, true},
                                             {"--top", "-k", true},
                                             {"--warmup", nullptr, true},
                                             {"--logits-out", "-o", true}}));
  if (a.has("--help")) {
    std::printf(
        "usage: qsp prefill [MODEL] (--tokens 1,2,3 | --random N [--seed S]) [options]\n"
        "Runs a prompt through the model (qsp_prefill) and prints the time, tokens/s\n"
        "and the top-K next tokens with their logits.\n"
        "  --tokens LIST      the prompt: comma-separated token ids\n"
        "  -r, --random N     the prompt: N random token ids (uniform over the vocabulary)\n"
        "  -s, --seed S       seed of --random (default 1)\n"
        "  --chunk N          feed the prompt N tokens per qsp_prefill call (default: all at once)\n"
        "  -k, --top K        print the K most likely next tokens (default 5; 0: none)\n"
        "  --warmup N         run the prompt N times before the timed run (default 1 on CUDA, 0 on the CPU)\n"
        "  -o, --logits-out F write the last token's logits to F: vocab_size little-endian float32\n"
        "%s",
        kExecHelp);
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
  print_top_k(logits, vocab, top);
  if (a.has("--logits-out")) {
    write_logits(a.get("--logits-out"), logits, vocab);
    std::printf("logits: %u float32 values written to %s\n", vocab, a.get("--logits-out").c_str());
  }
  return 0;
}

// ---- generate ----------------------------------------------------------------
int cmd_generate(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("generate", argv,
                                  with_exec({{"--tokens", nullptr, true},
                                             {"--random", "-r", true},
                                             {"--seed", "-s", true},
                                             {"--n", "-n", true}}));
  if (a.has("--help")) {
    std::printf(
        "usage: qsp generate [MODEL] (--tokens 1,2,3 | --random N [--seed S]) [-n N] [options]\n"
        "Greedy continuation: prefills the prompt, then repeats single-token steps\n"
        "(qsp_greedy_token, then qsp_prefill of that token). Prints the generated ids\n"
        "and tokens/s of the prefill and of the decode steps separately.\n"
        "  --tokens LIST      the prompt: comma-separated token ids\n"
        "  -r, --random N     the prompt: N random token ids\n"
        "  -s, --seed S       seed of --random (default 1)\n"
        "  -n, --n N          tokens to generate (default 16)\n"
        "%s",
        kExecHelp);
    return 0;
  }
  const ExecOptions e = exec_options(a);
  std::unique_ptr<Model> m = Model::open(model_arg(a, "generate"));
  const std::vector<int32_t> prompt = prompt_tokens(a, *m, 0);
  const uint32_t n = a.has("--n") ? uint32_t(parse_uint("-n", a.get("--n"), 1, 1u << 20)) : 16;
  print_model(*m);
  qsp_context* ctx = m->create_context(e, uint32_t(prompt.size()) + n, nullptr);
  ContextGuard guard(ctx);
  print_backend(ctx, e);
  const double tp = run_prefill(ctx, prompt, 0);
  std::vector<int32_t> out;
  const double t0 = now_seconds();
  for (uint32_t i = 0; i < n; ++i) {
    int32_t next = 0;
    check(qsp_greedy_token(ctx, &next), ctx, "qsp_greedy_token");
    out.push_back(next);
    check(qsp_prefill(ctx, &next, 1), ctx, "qsp_prefill (decode step)");
  }
  const double td = now_seconds() - t0;
  std::printf("generated:");
  for (int32_t t : out) std::printf(" %d", t);
  std::printf("\n");
  std::printf("prefill: %zu tokens in %.2f ms = %s tokens/s\n", prompt.size(), tp * 1e3,
              rate(double(prompt.size()), tp).c_str());
  std::printf("decode:  %u tokens in %.2f ms = %s tokens/s (%.2f ms/token)\n", n, td * 1e3,
              rate(double(n), td).c_str(), td * 1e3 / n);
  return 0;
}

// ---- bench ---------------------------------------------------------------------
int cmd_bench(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("bench", argv,
                                  with_exec({{"--prompt", "-p", true},
                                             {"--reps", "-r", true},
                                             {"--warmup", nullptr, true},
                                             {"--seed", "-s", true}}));
  if (a.has("--help")) {
    std::printf(
        "usage: qsp bench [MODEL] [-p 512,2048] [-r REPS] [options]\n"
        "Prefill throughput: for each prompt length, REPS timed prefills of random\n"
        "tokens (the KV cache cleared before each); prints median, min and max time.\n"
        "  -p, --prompt LIST  prompt lengths, comma-separated (default 512)\n"
        "  -r, --reps N       timed repetitions per length (default 3)\n"
        "  --warmup N         untimed prefills before the first length (default 1)\n"
        "  -s, --seed S       seed of the random prompts (default 1)\n"
        "%s",
        kExecHelp);
    return 0;
  }
  const ExecOptions e = exec_options(a);
  const std::vector<uint64_t> lens =
      parse_uint_list("--prompt", a.get("--prompt", "512"), 1, 1u << 24);
  const uint32_t reps = a.has("--reps") ? uint32_t(parse_uint("--reps", a.get("--reps"), 1, 100000)) : 3;
  const uint32_t warmup = a.has("--warmup") ? uint32_t(parse_uint("--warmup", a.get("--warmup"), 0, 1000)) : 1;
  const uint64_t seed = a.has("--seed") ? parse_uint("--seed", a.get("--seed"), 0, UINT64_MAX) : 1;
  std::unique_ptr<Model> m = Model::open(model_arg(a, "bench"));
  m->check_runnable();
  const uint32_t longest = uint32_t(*std::max_element(lens.begin(), lens.end()));
  print_model(*m);
  qsp_context* ctx = m->create_context(e, longest, nullptr);
  ContextGuard guard(ctx);
  print_backend(ctx, e);
  const uint32_t vocab = m->info().vocab_size;
  for (uint32_t w = 0; w < warmup; ++w) {
    const std::vector<int32_t> t = random_tokens(uint32_t(lens[0]), vocab, seed + 1000);
    run_prefill(ctx, t, 0);
    check(qsp_kv_clear(ctx), ctx, "qsp_kv_clear");
  }
  std::printf("%8s %6s %12s %12s %10s %10s\n", "prompt", "reps", "median ms", "tokens/s", "min ms", "max ms");
  std::fflush(stdout);
  for (uint64_t len : lens) {
    const std::vector<int32_t> t = random_tokens(uint32_t(len), vocab, seed);
    std::vector<double> times;
    for (uint32_t r = 0; r < reps; ++r) {
      check(qsp_kv_clear(ctx), ctx, "qsp_kv_clear");
      times.push_back(run_prefill(ctx, t, 0));
    }
    std::sort(times.begin(), times.end());
    const double med = times.size() % 2 ? times[times.size() / 2]
                                        : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
    std::printf("%8" PRIu64 " %6u %12.2f %12s %10.2f %10.2f\n", len, reps, med * 1e3, rate(double(len), med).c_str(),
                times.front() * 1e3, times.back() * 1e3);
    std::fflush(stdout);
  }
  return 0;
}

// ---- synth ---------------------------------------------------------------------
int cmd_synth(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("synth", argv,
                                  {{"--preset", "-p", true},
                                   {"--type", nullptr, true},
                                   {"--seed", "-s", true},
                                   {"--threads", "-t", true},
                                   {"--force", "-f", false},
                                   {"--help", "-h", false}});
  if (a.has("--help")) {
    std::printf(
        "usage: qsp synth --preset NAME [--type TYPE] [--seed S] OUT.gguf\n"
        "Writes a GGUF v3 file with deterministic random weights of realistic scale in\n"
        "the shapes and tensor names of a real architecture (no tokenizer:\n"
        "tokenizer.ggml.model = \"none\" and <arch>.vocab_size). Large presets stream to\n"
        "disk. The same preset, type and seed give the same bytes.\n"
        "  -p, --preset NAME  one of:\n");
    for (const auto& p : qsp::gguf::synth_presets())
      std::printf("                       %-12s %s\n", p.name.c_str(), p.about.c_str());
    std::printf("  --type T           matrix type, q4_0 by default (norms are f32); one of\n"
                "                       %s\n",
                wtype_names().c_str());
    std::printf(
        "  -s, --seed S       seed (default 1)\n"
        "  -t, --threads N    generator threads (default: one per core)\n"
        "  -f, --force        overwrite OUT if it exists\n"
        "  -h, --help         show this help\n");
    return 0;
  }
  if (!a.has("--preset")) throw UsageError("synth needs --preset (see 'qsp synth --help')");
  const qsp::gguf::SynthPreset* p = qsp::gguf::find_synth_preset(a.get("--preset"));
  if (!p) {
    std::string names;
    for (const auto& q : qsp::gguf::synth_presets()) names += (names.empty() ? "" : ", ") + q.name;
    throw UsageError("unknown preset '" + a.get("--preset") + "' (presets: " + names + ")");
  }
  const int32_t wtype = wtype_of(a.get("--type", "q4_0"));
  const uint64_t seed = a.has("--seed") ? parse_uint("--seed", a.get("--seed"), 0, UINT64_MAX) : 1;
  int threads = a.has("--threads") ? int(parse_uint("--threads", a.get("--threads"), 0, 4096)) : 0;
  if (threads == 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  if (a.positional.size() != 1)
    throw UsageError("synth needs exactly one output file (see 'qsp synth --help')");
  const std::string out = a.positional[0];
  struct stat sb;
  if (!a.has("--force") && stat(out.c_str(), &sb) == 0)
    throw RuntimeError(out + " exists (use --force to overwrite)");
  ProgressBar bar("writing " + out, 32ull << 20);
  const double t0 = now_seconds();
  try {
    qsp::gguf::synth_file(out, *p, wtype, seed, threads, [&](uint64_t d, uint64_t t) { bar.update(d, t); });
  } catch (const std::exception& err) {  // I/O, or a type whose block does not divide the preset's shapes
    bar.finish();
    throw RuntimeError(err.what());
  }
  bar.finish();
  if (stat(out.c_str(), &sb) != 0) throw RuntimeError("cannot stat " + out + " after writing it");
  std::printf("wrote %s: preset %s (%s), %s, seed %" PRIu64 ", %s in %.1f s\n", out.c_str(), p->name.c_str(),
              p->arch.c_str(), qsp_dtype_name(wtype), seed, human_bytes(uint64_t(sb.st_size)).c_str(),
              now_seconds() - t0);
  return 0;
}

}  // namespace qsp_cli
