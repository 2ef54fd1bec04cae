// Batched prefill across contexts: several contexts of one model, each with
// its own piece of tokens, advanced by one call (qsp_prefill_batch).
//
// Everything is checked before anything runs, so a bad piece leaves every
// context as it was. The run itself goes context by context today (exactly
// what qsp_prefill computes, piece by piece); a backend that can run all the
// pieces in one pass will take them here, behind the same checks.
#pragma once

#include <cstdint>
#include <vector>

namespace qsp {

class Context;

struct BatchSeq {
  Context* ctx = nullptr;
  const int32_t* tokens = nullptr;    // n ids, or nullptr when embeddings is set
  const float* embeddings = nullptr;  // n x hidden floats, or nullptr
  uint32_t n = 0;
};

// Throws qsp::Error naming the offending sequence ("sequence 3: ...").
// On a failure while running (a device error) every context of the batch
// keeps the cache length it had before the call; the logits of the contexts
// that had already run are gone (as after a failed qsp_prefill).
void prefill_batch(const std::vector<BatchSeq>& seqs);

}  // namespace qsp
