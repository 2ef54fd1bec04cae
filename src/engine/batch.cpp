#include "engine/batch.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
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

void prefill_batch(const std::vector<BatchSeq>& seqs) {
  check_batch(seqs);
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
