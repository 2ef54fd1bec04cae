#include "engine/batch.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/context.h"

namespace qsp {
namespace {

// Runs f(); an Error it throws comes back prefixed with the sequence index.
template <class F>
void for_sequence(uint32_t i, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw Error(e.status(), strprintf("sequence %u: %s", i, e.what()));
  }
}

void check_batch(const std::vector<BatchSeq>& seqs) {
  QSP_FAIL_IF(seqs.empty(), QSP_ERR_INVALID_ARGUMENT, "n_seqs must be > 0");
  // The same context twice would append two pieces to one cache in an
  // order the caller did not state: refuse it, naming both.
  std::vector<std::pair<const Context*, uint32_t>> order(seqs.size());
  for (uint32_t i = 0; i < seqs.size(); ++i) order[i] = {seqs[i].ctx, i};
  std::sort(order.begin(), order.end());
  for (size_t k = 1; k < order.size(); ++k)
    QSP_FAIL_IF(order[k].first == order[k - 1].first, QSP_ERR_INVALID_ARGUMENT,
                "sequence %u: its context is also sequence %u's (one piece per context per batch)",
                order[k].second, order[k - 1].second);

  const Context& first = *seqs[0].ctx;
  for (uint32_t i = 0; i < seqs.size(); ++i) {
    const BatchSeq& s = seqs[i];
    if (i > 0) {
      const std::string why = first.batch_mismatch(*s.ctx);
      QSP_FAIL_IF(!why.empty(), QSP_ERR_INVALID_ARGUMENT,
                  "sequence %u: its context does not share sequence 0's model: %s", i, why.c_str());
    }
    QSP_FAIL_IF(s.tokens && s.embeddings, QSP_ERR_INVALID_ARGUMENT,
                "sequence %u: set tokens or embeddings, not both", i);
    for_sequence(i, [&] { s.ctx->check_prefill(s.tokens, s.embeddings, s.n); });
  }
}

}  // namespace

namespace {

// Splits the pieces into passes of at most `cap` tokens, in order; a piece
// longer than what is left of a pass continues in the next one, and only its
// last part asks for logits. Returns false when the backend has no one-pass
// batch (nothing has run then).
bool run_passes(const std::vector<BatchSeq>& seqs, Backend& leader, const ModelTensors& w) {
  const uint32_t cap = std::max<uint32_t>(1, leader.max_batch_tokens());
  const uint32_t hidden = seqs[0].ctx->config().hidden;
  std::vector<uint32_t> done(seqs.size(), 0);
  size_t next = 0;  // first sequence with tokens left
  bool first = true;
  while (next < seqs.size()) {
    std::vector<BatchPiece> pass;
    uint32_t room = cap;
    for (size_t i = next; i < seqs.size() && room > 0; ++i) {
      const BatchSeq& s = seqs[i];
      const uint32_t take = std::min(room, s.n - done[i]);
      BatchPiece p;
      p.owner = &s.ctx->backend();
      p.chunk.n = take;
      p.chunk.tokens = s.tokens ? s.tokens + done[i] : nullptr;
      p.chunk.embeddings = s.embeddings ? s.embeddings + uint64_t(done[i]) * hidden : nullptr;
      p.chunk.past = s.ctx->kv_length() + done[i];
      p.chunk.want_logits = done[i] + take == s.n;
      pass.push_back(p);
      room -= take;
    }
    if (!leader.prefill_batch(w, pass)) {
      if (first) return false;
      throw Error(QSP_ERR_INTERNAL, "the backend stopped running batched passes midway");
    }
    first = false;
    for (size_t k = 0; k < pass.size(); ++k) done[next + k] += pass[k].chunk.n;
    while (next < seqs.size() && done[next] == seqs[next].n) ++next;
  }
  return true;
}

}  // namespace

void prefill_batch(const std::vector<BatchSeq>& seqs) {
  check_batch(seqs);
  Context& lead = *seqs[0].ctx;
  bool one_pass = false;
  try {
    one_pass = run_passes(seqs, lead.backend(), lead.weights());
  } catch (...) {
    // Nothing advanced yet: every cache keeps its length; logits are gone.
    for (const BatchSeq& s : seqs) s.ctx->batch_failed();
    throw;
  }
  if (one_pass) {
    for (const BatchSeq& s : seqs) s.ctx->batch_advanced(s.n, true);
    return;
  }
  // Context by context: exactly what qsp_prefill computes.
  std::vector<uint32_t> before(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) before[i] = seqs[i].ctx->kv_length();
  size_t ran = 0;
  try {
    for (; ran < seqs.size(); ++ran) {
      const BatchSeq& s = seqs[ran];
      for_sequence(uint32_t(ran), [&] { s.ctx->run_prefill(s.tokens, s.embeddings, s.n); });
    }
  } catch (...) {
    // The failing context already kept its length; roll back the ones before it.
    for (size_t i = 0; i < ran; ++i) seqs[i].ctx->kv_truncate(before[i]);
    throw;
  }
}

}  // namespace qsp
