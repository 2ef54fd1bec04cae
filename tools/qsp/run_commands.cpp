// `qsp generate` (one prompt, or several advanced together by
// qsp_prefill_batch) and `qsp bench` (prompt lengths, decode steps, and
// batches of sequences against one context at a time).
#include <algorithm>
#include <cinttypes>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli.h"

namespace qsp_cli {

namespace {

void check_vocab(const std::vector<int32_t>& t, const Model& m, const std::string& what) {
  const uint32_t vocab = m.info().vocab_size;
  for (int32_t id : t)
    if (uint32_t(id) >= vocab)
      throw UsageError(what + ": token " + std::to_string(id) + " is outside the vocabulary [0, " +
                       std::to_string(vocab) + ") of " + m.label());
}

// The prompts of --tokens-file: one per line, ids separated by commas and/or
// blanks; blank lines and lines starting with '#' are skipped.
std::vector<std::vector<int32_t>> read_prompt_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) throw RuntimeError("cannot open " + path + ": " + std::strerror(errno));
  std::vector<std::vector<int32_t>> out;
  std::string line;
  unsigned line_no = 0;
  auto flush_line = [&]() {
    ++line_no;
    std::string ids;  // the line with blanks turned into commas, runs collapsed
    for (char c : line) {
      const bool sep = c == ',' || c == ' ' || c == '\t' || c == '\r';
      if (sep) {
        if (!ids.empty() && ids.back() != ',') ids += ',';
      } else {
        ids += c;
      }
    }
    while (!ids.empty() && ids.back() == ',') ids.pop_back();
    if (!ids.empty() && ids[0] != '#')
      out.push_back(parse_token_list("--tokens-file " + path + ":" + std::to_string(line_no), ids));
    line.clear();
  };
  for (int c; (c = std::fgetc(f)) != EOF;) {
    if (c == '\n') flush_line();
    else line += char(c);
  }
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err) throw RuntimeError("cannot read " + path);
  if (!line.empty()) flush_line();
  if (out.empty()) throw UsageError("--tokens-file " + path + ": no prompt in the file");
  return out;
}

// The prompts of `qsp generate`: --tokens (repeatable), --tokens-file,
// --prompt / --prompt-file (text, one prompt) or --random (with --parallel N:
// seeds S, S+1, ..., S+N-1). `parallel` 0: not given.
std::vector<std::vector<int32_t>> generate_prompts(const ParsedArgs& a, const Model& m, uint32_t parallel) {
  m.check_runnable();
  const int sources = int(a.has("--tokens")) + int(a.has("--random")) + int(a.has("--tokens-file")) +
                      int(has_text_prompt(a));
  if (sources > 1) throw UsageError("--tokens, --random, --tokens-file and --prompt / --prompt-file exclude each other");
  if (a.has("--chat") && !has_text_prompt(a))
    throw UsageError("--chat needs the prompt as text: --prompt or --prompt-file");
  if (sources == 0)
    throw UsageError("give the prompt with --prompt TEXT, --tokens 1,2,3, --random N or --tokens-file F");
  if (a.has("--seed") && !a.has("--random")) throw UsageError("--seed applies to --random only");
  std::vector<std::vector<int32_t>> prompts;
  if (a.has("--random")) {
    const uint32_t n = uint32_t(parse_uint("--random", a.get("--random"), 1, 1u << 24));
    const uint64_t seed = a.has("--seed") ? parse_uint("--seed", a.get("--seed"), 0, UINT64_MAX) : 1;
    if (m.info().vocab_size == 0) throw RuntimeError(m.label() + ": the vocabulary size is unknown");
    for (uint32_t i = 0; i < std::max(1u, parallel); ++i)
      prompts.push_back(random_tokens(n, m.info().vocab_size, seed + i));
    return prompts;
  }
  if (has_text_prompt(a)) {
    prompts.push_back(text_prompt_tokens(a, m));
  } else if (a.has("--tokens")) {
    for (const std::string& s : a.get_all("--tokens")) prompts.push_back(parse_token_list("--tokens", s));
  } else {
    prompts = read_prompt_file(a.get("--tokens-file"));
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    check_vocab(prompts[i], m, prompts.size() == 1 ? std::string("the prompt") : "prompt " + std::to_string(i));
  if (parallel && prompts.size() == 1) prompts.resize(parallel, prompts[0]);  // the same prompt N times
  if (parallel && prompts.size() != parallel)
    throw UsageError("--parallel " + std::to_string(parallel) + " needs 1 or " + std::to_string(parallel) +
                     " prompts, got " + std::to_string(prompts.size()));
  return prompts;
}

void print_ids(const char* label, const std::vector<int32_t>& ids) {
  std::printf("%s:", label);
  for (int32_t t : ids) std::printf(" %d", t);
  std::printf("\n");
}

// Several sequences at once: the prompts prefilled as one qsp_prefill_batch,
// then each step one qsp_prefill_batch with the greedy token of every live
// sequence; a sequence leaves when it has its n tokens or produced an EOS id.
void generate_parallel(const Model& m, const ExecOptions& e, const std::vector<std::vector<int32_t>>& prompts,
                       const std::vector<uint32_t>& n, const std::vector<int32_t>& eos, const Tokenizer* tok) {
  const size_t ns = prompts.size();
  std::vector<qsp_context*> ctxs;
  struct Guards {
    std::vector<qsp_context*>& v;
    ~Guards() {
      for (qsp_context* c : v) qsp_context_destroy(c);
    }
  } guards{ctxs};
  size_t prompt_tokens = 0;
  for (size_t i = 0; i < ns; ++i) {
    ctxs.push_back(m.create_context(e, uint32_t(prompts[i].size()) + n[i], nullptr));
    prompt_tokens += prompts[i].size();
  }
  print_backend(ctxs[0], e);
  std::vector<qsp_batch_seq> batch;
  for (size_t i = 0; i < ns; ++i)
    batch.push_back({ctxs[i], prompts[i].data(), nullptr, uint32_t(prompts[i].size()), 0});
  const double t0 = now_seconds();
  check(qsp_prefill_batch(batch.data(), uint32_t(batch.size()), sizeof(qsp_batch_seq)), nullptr,
        "qsp_prefill_batch (prompts)");
  const double tp = now_seconds() - t0;

  std::vector<std::vector<int32_t>> out(ns);
  std::vector<int32_t> next(ns);
  std::vector<size_t> live(ns);
  for (size_t i = 0; i < ns; ++i) live[i] = i;
  size_t steps = 0, stopped_eos = 0;
  const double t1 = now_seconds();
  while (!live.empty()) {
    batch.clear();
    std::vector<size_t> still;
    for (size_t i : live) {
      check(qsp_greedy_token(ctxs[i], &next[i]), ctxs[i], "qsp_greedy_token (sequence " + std::to_string(i) + ")");
      out[i].push_back(next[i]);
      const bool is_eos = std::find(eos.begin(), eos.end(), next[i]) != eos.end();
      stopped_eos += is_eos;
      if (is_eos || out[i].size() >= n[i]) continue;  // the sequence leaves the batch
      batch.push_back({ctxs[i], &next[i], nullptr, 1, 0});
      still.push_back(i);
    }
    live.swap(still);
    if (batch.empty()) break;
    check(qsp_prefill_batch(batch.data(), uint32_t(batch.size()), sizeof(qsp_batch_seq)), nullptr,
          "qsp_prefill_batch (decode step)");
    ++steps;
  }
  const double td = now_seconds() - t1;
  size_t generated = 0;
  for (size_t i = 0; i < ns; ++i) {
    print_ids(("generated[" + std::to_string(i) + "]").c_str(), out[i]);
    if (tok)
      std::printf("text[%zu]: %s\n", i, escape_piece(tok->detokenize(out[i], QSP_DETOKENIZE_SKIP_SPECIAL)).c_str());
    generated += out[i].size();
  }
  std::printf("prefill: %zu prompts, %zu tokens in one batch in %.2f ms = %s tokens/s\n", ns, prompt_tokens,
              tp * 1e3, rate(double(prompt_tokens), tp).c_str());
  std::printf("decode:  %zu tokens of %zu sequences in %zu batched steps in %.2f ms = %s tokens/s (%.2f ms/step)",
              generated, ns, steps, td * 1e3, rate(double(generated), td).c_str(), steps ? td * 1e3 / double(steps) : 0.0);
  if (stopped_eos) std::printf(", %zu stopped at an EOS id", stopped_eos);
  std::printf("\n");
}

}  // namespace

int cmd_generate(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("generate", argv,
                                  with_prompt_exec({{"--tokens-file", nullptr, true},
                                                    {"--n", "-n", true},
                                                    {"--eos", nullptr, true},
                                                    {"--parallel", "-P", true}}));
  if (a.has("--help")) {
    std::printf(
        "usage: qsp generate [MODEL] (--prompt TEXT [--chat] | --tokens 1,2,3 | --random N [--seed S]) [-n N] [options]\n"
        "       qsp generate [MODEL] --parallel N (--tokens ... | --random N | --tokens-file F) [-n N] [options]\n"
        "Greedy continuation: prefills the prompt, then repeats single-token steps\n"
        "(qsp_greedy_token, then qsp_prefill of that token). When the model carries a\n"
        "tokenizer, prints the generated text as it comes (control tokens such as\n"
        "<|im_end|> give no text; with -v the ids too) and stops at the model's EOS /\n"
        "end-of-turn token; without one it prints the generated ids. Then the\n"
        "tokens/s of the prefill and of the decode steps separately.\n"
        "With several prompts (--parallel N, --tokens given more than once, or a\n"
        "--tokens-file of several lines) every sequence gets its own context: the\n"
        "prompts are prefilled as one qsp_prefill_batch call, then each step is one\n"
        "qsp_prefill_batch with the greedy token of every live sequence; a sequence\n"
        "leaves when it has its N tokens or produced an --eos id. Prints one line\n"
        "'generated[i]: ...' per sequence (the ids 'qsp generate' prints for that\n"
        "prompt alone) and the aggregate tokens/s.\n"
        "%s"
        "  --tokens LIST      the prompt: comma-separated token ids; repeat for more prompts\n"
        "  -r, --random N     the prompt: N random token ids (with --parallel P: P prompts,\n"
        "                     seeds S, S+1, ..., S+P-1)\n"
        "  -s, --seed S       seed of --random (default 1)\n"
        "  --tokens-file F    prompts, one per line: ids separated by commas or blanks\n"
        "                     (blank lines and lines starting with '#' are skipped)\n"
        "  -P, --parallel N   run N sequences at once (default: the number of prompts);\n"
        "                     one prompt with --parallel N runs N times\n"
        "  -n, --n N          tokens to generate (default 16); a comma-separated list\n"
        "                     gives each sequence its own\n"
        "  --eos LIST         token ids that end a sequence (printed, then it stops), in\n"
        "                     addition to the tokenizer's EOS and end-of-turn ids\n"
        "%s",
        kTextPromptHelp, kExecHelp);
    return 0;
  }
  const ExecOptions e = exec_options(a);
  std::unique_ptr<Model> m = Model::open(model_arg(a, "generate"));
  const uint32_t parallel =
      a.has("--parallel") ? uint32_t(parse_uint("--parallel", a.get("--parallel"), 1, 4096)) : 0;
  const std::vector<std::vector<int32_t>> prompts = generate_prompts(a, *m, parallel);
  std::vector<uint32_t> n;
  for (uint64_t v : parse_uint_list("-n", a.get("--n", "16"), 1, 1u << 20)) n.push_back(uint32_t(v));
  if (n.size() == 1) n.resize(prompts.size(), n[0]);
  if (n.size() != prompts.size())
    throw UsageError("-n gives " + std::to_string(n.size()) + " lengths for " + std::to_string(prompts.size()) +
                     " sequences (give one, or one per sequence)");
  std::vector<int32_t> eos;
  if (a.has("--eos")) eos = parse_token_list("--eos", a.get("--eos"));
  const std::unique_ptr<Tokenizer> tok = Tokenizer::try_open(*m);
  if (tok) {
    if (tok->info().eos_id >= 0) eos.push_back(tok->info().eos_id);
    if (tok->info().eot_id >= 0) eos.push_back(tok->info().eot_id);
  }
  print_model(*m);
  if (parallel || prompts.size() > 1) {
    generate_parallel(*m, e, prompts, n, eos, tok.get());
    return 0;
  }
  const std::vector<int32_t>& prompt = prompts[0];
  qsp_context* ctx = m->create_context(e, uint32_t(prompt.size()) + n[0], nullptr);
  ContextGuard guard(ctx);
  print_backend(ctx, e);
  if (tok && e.verbose) print_ids("prompt", prompt);
  const double tp = run_prefill(ctx, prompt, 0);
  std::vector<int32_t> out;
  std::unique_ptr<TextPrinter> text;
  if (tok) text.reset(new TextPrinter(*tok));
  const double t0 = now_seconds();
  for (uint32_t i = 0; i < n[0]; ++i) {
    int32_t next = 0;
    check(qsp_greedy_token(ctx, &next), ctx, "qsp_greedy_token");
    out.push_back(next);
    if (text) text->push(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    check(qsp_prefill(ctx, &next, 1), ctx, "qsp_prefill (decode step)");
  }
  const double td = now_seconds() - t0;
  if (text) {
    text->finish();
    std::printf("\n");
  }
  if (!tok || e.verbose) print_ids("generated", out);
  std::printf("prefill: %zu tokens in %.2f ms = %s tokens/s\n", prompt.size(), tp * 1e3,
              rate(double(prompt.size()), tp).c_str());
  std::printf("decode:  %zu tokens in %.2f ms = %s tokens/s (%.2f ms/token)%s\n", out.size(), td * 1e3,
              rate(double(out.size()), td).c_str(), td * 1e3 / double(out.size()),
              out.size() < n[0] ? ", stopped at an EOS id" : "");
  return 0;
}

// ---- bench ---------------------------------------------------------------------
namespace {

// One group of a --batch spec: `n` sequences of `len` new tokens on `cached`
// tokens already in their caches.
struct BatchGroup {
  uint32_t n, len, cached;
};
struct BatchSpec {
  std::string label;  // "32x128", "4x512+60x1@512"
  std::vector<BatchGroup> groups;
  uint32_t seqs() const {
    uint32_t s = 0;
    for (const auto& g : groups) s += g.n;
    return s;
  }
  uint64_t tokens() const {
    uint64_t t = 0;
    for (const auto& g : groups) t += uint64_t(g.n) * g.len;
    return t;
  }
  uint32_t needed() const {
    uint32_t t = 0;
    for (const auto& g : groups) t = std::max(t, g.len + g.cached);
    return t;
  }
};

std::string group_label(const BatchGroup& g) {
  return std::to_string(g.n) + "x" + std::to_string(g.len) + (g.cached ? "@" + std::to_string(g.cached) : "");
}

// --batch N (with -p LIST: one spec per length) or --batch NxL[@P][+NxL[@P]...].
std::vector<BatchSpec> parse_batch(const std::string& s, const std::vector<uint64_t>& lens, bool p_given) {
  const std::string flag = "--batch";
  constexpr uint64_t kMaxSeqs = 4096, kMaxTokens = 1u << 24;
  std::vector<BatchSpec> specs;
  if (s.find_first_not_of("0123456789") == std::string::npos) {
    const uint32_t n = uint32_t(parse_uint(flag, s, 1, kMaxSeqs));
    for (uint64_t len : lens) {
      BatchSpec b;
      b.groups.push_back({n, uint32_t(len), 0});
      b.label = group_label(b.groups[0]);
      specs.push_back(b);
    }
    return specs;
  }
  if (p_given)
    throw UsageError("-p goes with --batch N only; the mixed form gives the lengths itself (--batch 4x512+60x1@512)");
  BatchSpec b;
  uint64_t seqs = 0;
  size_t start = 0;
  while (true) {
    const size_t plus = s.find('+', start);
    const std::string g = s.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    const size_t x = g.find('x'), at = g.find('@');
    if (x == std::string::npos || (at != std::string::npos && at < x))
      throw UsageError("--batch expects N or groups NxL[@P] joined by '+' (e.g. 4x512+60x1@512), got '" + s + "'");
    BatchGroup grp;
    grp.n = uint32_t(parse_uint(flag + " (sequences of '" + g + "')", g.substr(0, x), 1, kMaxSeqs));
    grp.len = uint32_t(parse_uint(flag + " (new tokens of '" + g + "')",
                                  g.substr(x + 1, at == std::string::npos ? std::string::npos : at - x - 1), 1,
                                  kMaxTokens));
    grp.cached = at == std::string::npos
                     ? 0
                     : uint32_t(parse_uint(flag + " (cached tokens of '" + g + "')", g.substr(at + 1), 0, kMaxTokens));
    seqs += grp.n;
    b.groups.push_back(grp);
    b.label += (b.label.empty() ? "" : "+") + group_label(grp);
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  if (seqs > kMaxSeqs) throw UsageError("--batch: more than " + std::to_string(kMaxSeqs) + " sequences");
  specs.push_back(b);
  return specs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// bench --batch: each spec's pieces as one qsp_prefill_batch call ("batch")
// against the same pieces through qsp_prefill one context at a time ("single"),
// every context truncated back to its cached prefix before each step.
void bench_batch(const Model& m, const ExecOptions& e, const std::vector<BatchSpec>& specs, uint32_t reps,
                 uint32_t warmup, uint64_t seed) {
  uint32_t n_ctx = 0, needed = 0;
  for (const auto& b : specs) {
    n_ctx = std::max(n_ctx, b.seqs());
    needed = std::max(needed, b.needed());
  }
  // The contexts share the model: the first uploads the weights, the others
  // register the same handles (derived from the file) and upload nothing.
  std::vector<qsp_context*> ctxs;
  struct Guards {
    std::vector<qsp_context*>& v;
    ~Guards() {
      for (qsp_context* c : v) qsp_context_destroy(c);
    }
  } guards{ctxs};
  double upload_s = 0;
  for (uint32_t i = 0; i < n_ctx; ++i) {
    double s = 0;
    ctxs.push_back(m.create_context(e, needed, &s));
    upload_s += s;
  }
  print_backend(ctxs[0], e);
  qsp_context_info ci;
  qsp_context_info_init(&ci);
  check(qsp_context_get_info(ctxs[0], &ci), ctxs[0], "qsp_context_get_info");
  qsp_cache_stats cs;
  qsp_cache_stats_init(&cs);
  std::printf("contexts: %u of %u tokens each, created in %.1f ms", n_ctx, needed, upload_s * 1e3);
  if (qsp_cache_stats_get(ci.backend, ci.device_index, &cs) == QSP_OK)
    std::printf(" (weights: %" PRIu64 " tensors uploaded, %" PRIu64 " registrations served from the weight cache)",
                cs.n_uploads, cs.n_hits);
  std::printf("\n");
  std::printf("batch: one qsp_prefill_batch call per step; single: the same pieces through qsp_prefill,\n"
              "one context at a time; tokens/s counts the new tokens of all sequences\n");
  std::printf("%-18s %5s %7s %5s %10s %10s %10s %10s %8s\n", "batch", "seqs", "tokens", "reps", "batch ms",
              "tokens/s", "single ms", "tokens/s", "speedup");
  std::fflush(stdout);
  const uint32_t vocab = m.info().vocab_size;
  for (const BatchSpec& b : specs) {
    // Pieces and cached prefixes: random tokens, one seed per sequence.
    std::vector<std::vector<int32_t>> piece, prefix;
    std::vector<uint32_t> cached;
    for (const auto& g : b.groups)
      for (uint32_t k = 0; k < g.n; ++k) {
        const uint64_t s = seed + 1000003ull * piece.size();
        piece.push_back(random_tokens(g.len, vocab, s));
        prefix.push_back(random_tokens(g.cached, vocab, s + 1));
        cached.push_back(g.cached);
      }
    const size_t ns = piece.size();
    std::vector<qsp_batch_seq> pre, step;
    for (size_t i = 0; i < ns; ++i) {
      check(qsp_kv_clear(ctxs[i]), ctxs[i], "qsp_kv_clear");
      if (cached[i]) pre.push_back({ctxs[i], prefix[i].data(), nullptr, cached[i], 0});
      step.push_back({ctxs[i], piece[i].data(), nullptr, uint32_t(piece[i].size()), 0});
    }
    if (!pre.empty())
      check(qsp_prefill_batch(pre.data(), uint32_t(pre.size()), sizeof(qsp_batch_seq)), nullptr,
            "qsp_prefill_batch (cached prefixes)");
    auto rewind = [&]() {
      for (size_t i = 0; i < ns; ++i) check(qsp_kv_truncate(ctxs[i], cached[i]), ctxs[i], "qsp_kv_truncate");
    };
    auto run_batch = [&]() {
      rewind();
      const double t0 = now_seconds();
      check(qsp_prefill_batch(step.data(), uint32_t(ns), sizeof(qsp_batch_seq)), nullptr, "qsp_prefill_batch");
      return now_seconds() - t0;
    };
    auto run_single = [&]() {
      rewind();
      const double t0 = now_seconds();
      for (size_t i = 0; i < ns; ++i)
        check(qsp_prefill(ctxs[i], piece[i].data(), uint32_t(piece[i].size())), ctxs[i], "qsp_prefill");
      return now_seconds() - t0;
    };
    for (uint32_t w = 0; w < warmup; ++w) {
      run_batch();
      run_single();
    }
    std::vector<double> tb, ts;
    for (uint32_t r = 0; r < reps; ++r) {
      tb.push_back(run_batch());
      ts.push_back(run_single());
    }
    const double mb = median(tb), msg = median(ts);
    const double tok = double(b.tokens());
    char speedup[32];
    std::snprintf(speedup, sizeof speedup, "%.2fx", mb > 0 ? msg / mb : 0.0);
    std::printf("%-18s %5u %7" PRIu64 " %5u %10.2f %10s %10.2f %10s %8s\n", b.label.c_str(), b.seqs(), b.tokens(),
                reps, mb * 1e3, rate(tok, mb).c_str(), msg * 1e3, rate(tok, msg).c_str(), speedup);
    std::fflush(stdout);
  }
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("bench", argv,
                                  with_exec({{"--prompt", "-p", true},
                                             {"--reps", "-r", true},
                                             {"--warmup", nullptr, true},
                                             {"--seed", "-s", true},
                                             {"--batch", "-b", true}}));
  if (a.has("--help")) {
    std::printf(
        "usage: qsp bench [MODEL] [-p 512,2048] [-r REPS] [options]\n"
        "       qsp bench [MODEL] --batch N [-p 128,512] [-r REPS] [options]\n"
        "       qsp bench [MODEL] --batch NxL[@P][+NxL[@P]...] [-r REPS] [options]\n"
        "Prefill throughput: for each prompt length, REPS timed prefills of random\n"
        "tokens (the KV cache cleared before each); prints median, min and max time.\n"
        "With --batch: N contexts of the model (one copy of the weights), and per\n"
        "step one qsp_prefill_batch call over all of them against the same pieces\n"
        "through qsp_prefill one context at a time; prints the median ms per step\n"
        "and aggregate tokens/s of both, and the speedup.\n"
        "  -p, --prompt LIST  prompt lengths, comma-separated (default 512)\n"
        "  -b, --batch SPEC   N: N sequences of each -p length (from empty caches);\n"
        "                     NxL[@P] groups joined by '+': N sequences of L new tokens\n"
        "                     on P cached tokens (e.g. 4x512+60x1@512: 4 prompts of 512\n"
        "                     and 60 decode steps on 512 cached tokens)\n"
        "  -r, --reps N       timed repetitions per length (default 3)\n"
        "  --warmup N         untimed prefills of each length before its timed ones\n"
        "                     (default 2: the first run, then the one that captures\n"
        "                     its CUDA graph; with --batch: untimed steps of each\n"
        "                     kind per row)\n"
        "  -s, --seed S       seed of the random prompts (default 1)\n"
        "%s",
        kExecHelp);
    return 0;
  }
  const ExecOptions e = exec_options(a);
  const std::vector<uint64_t> lens =
      parse_uint_list("--prompt", a.get("--prompt", "512"), 1, 1u << 24);
  const uint32_t reps = a.has("--reps") ? uint32_t(parse_uint("--reps", a.get("--reps"), 1, 100000)) : 3;
  // Two untimed runs per shape: the first, and the second, which captures
  // the CUDA graph every later run replays (src/cuda/chunk_graphs.h).
  const uint32_t warmup = a.has("--warmup") ? uint32_t(parse_uint("--warmup", a.get("--warmup"), 0, 1000)) : 2;
  const uint64_t seed = a.has("--seed") ? parse_uint("--seed", a.get("--seed"), 0, UINT64_MAX) : 1;
  std::vector<BatchSpec> specs;
  if (a.has("--batch")) specs = parse_batch(a.get("--batch"), lens, a.has("--prompt"));
  std::unique_ptr<Model> m = Model::open(model_arg(a, "bench"));
  m->check_runnable();
  if (!specs.empty()) {
    print_model(*m);
    bench_batch(*m, e, specs, reps, warmup, seed);
    return 0;
  }
  const uint32_t longest = uint32_t(*std::max_element(lens.begin(), lens.end()));
  print_model(*m);
  qsp_context* ctx = m->create_context(e, longest, nullptr);
  ContextGuard guard(ctx);
  print_backend(ctx, e);
  const uint32_t vocab = m->info().vocab_size;
  std::printf("%8s %6s %12s %12s %10s %10s\n", "prompt", "reps", "median ms", "tokens/s", "min ms", "max ms");
  std::fflush(stdout);
  for (uint64_t len : lens) {
    for (uint32_t w = 0; w < warmup; ++w) {
      const std::vector<int32_t> t = random_tokens(uint32_t(len), vocab, seed + 1000 + w);
      check(qsp_kv_clear(ctx), ctx, "qsp_kv_clear");
      run_prefill(ctx, t, 0);
    }
    const std::vector<int32_t> t = random_tokens(uint32_t(len), vocab, seed);
    std::vector<double> times;
    for (uint32_t r = 0; r < reps; ++r) {
      check(qsp_kv_clear(ctx), ctx, "qsp_kv_clear");
      times.push_back(run_prefill(ctx, t, 0));
    }
    std::sort(times.begin(), times.end());
    const double med = median(times);
    std::printf("%8" PRIu64 " %6u %12.2f %12s %10.2f %10.2f\n", len, reps, med * 1e3, rate(double(len), med).c_str(),
                times.front() * 1e3, times.back() * 1e3);
    std::fflush(stdout);
  }
  return 0;
}

// ---- synth ---------------------------------------------------------------------

}  // namespace qsp_cli
