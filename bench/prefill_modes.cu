// bench_prefill's two other modes: --batch (qsp_prefill_batch against the
// same pieces through qsp_prefill, one context at a time) and --tp (the
// model split over GPUs, or its shards in turn on one).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "prefill_common.h"
#include "support/check.h"
#include "qsp/qsp.h"

namespace bench {
namespace {

// ---- Batched prefill across contexts (qsp_prefill_batch) -------------------------
// A spec: groups joined by '+', each "NxL" or "NxL@P": N sequences of L new
// tokens on P cached ones ("32x128", "64x1@512" = a decode step of 64
// sequences, "4x512+60x1@512" = prompts joining decoding sequences).
struct Group {
  uint32_t n = 0, len = 0, past = 0;
};

std::vector<Group> parse_batch(const std::string& spec) {
  std::vector<Group> g;
  size_t at = 0;
  while (at < spec.size()) {
    size_t end = spec.find('+', at);
    if (end == std::string::npos) end = spec.size();
    Group x;
    if (std::sscanf(spec.substr(at, end - at).c_str(), "%ux%u@%u", &x.n, &x.len, &x.past) < 2 || !x.n || !x.len) {
      std::fprintf(stderr, "bad batch spec '%s' (want NxL[@P][+NxL[@P]...])\n", spec.c_str());
      std::exit(2);
    }
    g.push_back(x);
    at = end + 1;
  }
  return g;
}

}  // namespace

// One batch step against the same pieces through qsp_prefill, one context at
// a time (each call waits for its result, as a caller of qsp_prefill does),
// both from the same cache state; medians of `reps` after a warm-up.
void bench_batch(const Shape& s, const BenchType& bt, const std::string& spec, int reps,
                 std::vector<std::string>& table) {
  const std::vector<Group> groups = parse_batch(spec);
  uint32_t max_seq = 16, n_tok = 0;
  std::vector<uint32_t> len, past;
  for (const Group& g : groups)
    for (uint32_t i = 0; i < g.n; ++i) {
      len.push_back(g.len);
      past.push_back(g.past);
      max_seq = std::max(max_seq, g.len + g.past + 16);
      n_tok += g.len;
    }
  const uint32_t S = uint32_t(len.size());
  std::vector<qsp_context*> ctx(S);
  for (uint32_t i = 0; i < S; ++i) ctx[i] = make_qsp(s, bt, max_seq, /*generate=*/i == 0);
  std::vector<std::vector<int32_t>> tok(S);
  for (uint32_t i = 0; i < S; ++i) {
    tok[i].resize(past[i] + len[i]);
    for (uint32_t t = 0; t < tok[i].size(); ++t) tok[i][t] = int32_t(((i + 1) * 7919u + t * 2654435761u) % s.vocab);
  }
  // Every cache back to its `past` tokens (built with one batch).
  const auto reset = [&] {
    std::vector<qsp_batch_seq> pre;
    for (uint32_t i = 0; i < S; ++i) {
      QSP_QK(qsp_kv_clear(ctx[i]));
      if (!past[i]) continue;
      qsp_batch_seq b{};
      b.ctx = ctx[i];
      b.tokens = tok[i].data();
      b.n_tokens = past[i];
      pre.push_back(b);
    }
    if (!pre.empty()) QSP_QK(qsp_prefill_batch(pre.data(), uint32_t(pre.size()), sizeof(qsp_batch_seq)));
  };
  std::vector<qsp_batch_seq> seqs(S);
  for (uint32_t i = 0; i < S; ++i) {
    seqs[i] = qsp_batch_seq{};
    seqs[i].ctx = ctx[i];
    seqs[i].tokens = tok[i].data() + past[i];
    seqs[i].n_tokens = len[i];
  }
  std::vector<double> tb, ts;
  for (int r = 0; r < reps + 1; ++r) {
    reset();
    if (r == 1) profile_range(true);
    double t0 = now_ms();
    QSP_QK(qsp_prefill_batch(seqs.data(), S, sizeof(qsp_batch_seq)));
    const double b = now_ms() - t0;
    if (r == 1) profile_range(false);
    reset();
    t0 = now_ms();
    for (uint32_t i = 0; i < S; ++i) QSP_QK(qsp_prefill(ctx[i], seqs[i].tokens, len[i]));
    const double one = now_ms() - t0;
    if (r) tb.push_back(b), ts.push_back(one);
  }
  const double mb = median(tb), ms = median(ts);
  if (g_profile) {
    reset();
    char what[96];
    std::snprintf(what, sizeof what, "batch %s (median %.3f ms)", spec.c_str(), mb);
    profile_pass(what, [&] { QSP_QK(qsp_prefill_batch(seqs.data(), S, sizeof(qsp_batch_seq))); });
  }
  char line[512];
  std::snprintf(line, sizeof line, "| %-10s | %-4s | batch %-16s | %4u | %6u | %9.3f | %10.0f | %9.3f | %10.0f | %5.2fx |",
                s.name, bt.name().c_str(), spec.c_str(), S, n_tok, mb, n_tok / mb * 1e3, ms, n_tok / ms * 1e3,
                ms / mb);
  std::puts(line);
  table.push_back(line);
  for (qsp_context* c : ctx) qsp_context_destroy(c);
}

// ---- Tensor parallelism (--tp) ----------------------------------------------------
// Entries "N" (a shard per GPU 0..N-1) and "Ns" (N shards in turn on GPU 0),
// each timed like the plain rows, with its speedup over the first entry.
void bench_tp(const Shape& s, const BenchType& bt, const std::vector<std::string>& tp,
              const std::vector<uint32_t>& lengths, uint32_t max_seq, int reps, const std::vector<int32_t>& tokens,
              std::vector<std::string>& table) {
  int gpus = 0;
  QSP_CK(cudaGetDeviceCount(&gpus));
  std::vector<double> first;  // ms of the first entry per length, then the decode step
  char line[512];
  for (const std::string& e : tp) {
    const bool in_turn = !e.empty() && e.back() == 's';
    const uint32_t n = uint32_t(std::atoi(e.c_str()));
    if (n < 1 || n > 32) {
      std::fprintf(stderr, "bad --tp entry '%s' (want N or Ns, N in 1..32)\n", e.c_str());
      std::exit(2);
    }
    if (!in_turn && int(n) > gpus) {
      std::printf("  [tp %s] skipped: %d GPU(s)\n", e.c_str(), gpus);
      continue;
    }
    const uint32_t mask = in_turn ? 0x1u : (n == 32 ? 0xffffffffu : (1u << n) - 1);
    qsp_context* ctx = make_qsp(s, bt, max_seq, true, n, n > 1 ? mask : 0);
    std::vector<double> ms;
    for (uint32_t len : lengths) ms.push_back(time_qsp(ctx, len, 0, reps_for(len, reps), tokens));
    ms.push_back(time_qsp(ctx, 1, 2048, reps, tokens));  // the decode step at 2048
    if (first.empty()) first = ms;
    const std::string label = in_turn ? "tp " + e + " (1 GPU)" : "tp " + e;
    for (size_t i = 0; i < ms.size(); ++i) {
      const bool decode = i == lengths.size();
      const uint32_t len = decode ? 1 : lengths[i];
      std::snprintf(line, sizeof line, "| %-10s | %-4s | %-14s | %6s | %9.3f | %10.0f | %7.1f | %5.2fx |", s.name,
                    bt.name().c_str(), label.c_str(), decode ? "1@2048" : std::to_string(len).c_str(), ms[i],
                    len / ms[i] * 1e3, total_flops(s, len, decode ? 2048 : 0) / ms[i] / 1e9, first[i] / ms[i]);
      std::puts(line);
      table.push_back(line);
    }
    qsp_context_destroy(ctx);
  }
}

}  // namespace bench
