// The fixture of the C API contract tests (tests/api/test_api_*.cpp): a
// model, a prompt and the logits a fresh context gives for it, so that "a
// failing call leaves the context exactly as it was" is checked after each
// error by a full prefill that must match bit for bit (the CPU backend is
// deterministic for a fixed thread count).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "qsp/qsp.h"
#include "support/api.h"
#include "support/model.h"

namespace qsp_test {

// A model, a prompt and the logits a fresh context gives for it.
struct Fixture {
  TestModel m;
  std::vector<int32_t> toks;
  std::vector<float> ref;

  explicit Fixture(uint64_t id, bool qwen3 = true, uint32_t max_seq = 64) {
    ModelSpec s;
    s.seed = 5000 + id;
    s.handle_base = 0xA91000000000000ull + (id << 28);
    s.qwen3 = qwen3;
    s.max_seq = max_seq;
    m = make_model(s);
    m.params.n_threads = 2;
    toks = random_tokens(17, s.vocab, 900 + id);
    qsp_context* ctx = create();
    REQUIRE(qsp_prefill(ctx, toks.data(), uint32_t(toks.size())) == QSP_OK);
    ref = logits(ctx);
    qsp_context_destroy(ctx);
  }
  uint32_t vocab() const { return m.spec.vocab; }
  qsp_context* create(uint32_t max_seq = 0) const {
    qsp_context* ctx = m.create(QSP_BACKEND_CPU, max_seq);
    REQUIRE(ctx != nullptr);
    return ctx;
  }
  // An empty context of this model (nothing uploaded).
  qsp_context* bare() const {
    qsp_context* ctx = nullptr;
    REQUIRE(qsp_context_create(&m.params, &ctx) == QSP_OK);
    REQUIRE(ctx != nullptr);
    return ctx;
  }
  std::vector<float> logits(qsp_context* ctx) const {
    std::vector<float> out(vocab());
    REQUIRE(qsp_copy_logits(ctx, out.data(), out.size()) == QSP_OK);
    return out;
  }
  // A full valid prefill gives exactly the fresh context's logits.
  void works(qsp_context* ctx) const {
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    INFO("prefill after the error: " << qsp_context_last_error(ctx));
    REQUIRE(qsp_prefill(ctx, toks.data(), uint32_t(toks.size())) == QSP_OK);
    uint32_t len = 0;
    REQUIRE(qsp_kv_length(ctx, &len) == QSP_OK);
    REQUIRE(len == toks.size());
    REQUIRE(bit_equal(logits(ctx), ref));
  }
};

inline qsp_context* const kSentinel = reinterpret_cast<qsp_context*>(uintptr_t(0x1));

// qsp_context_create must fail with `want`, name the field, and set *out to NULL.
inline void expect_create_fails(const qsp_context_params& p, qsp_status want, const std::string& needles) {
  qsp_context* out = kSentinel;
  EXPECT_FAIL(nullptr, want, needles, qsp_context_create(&p, &out));
  CHECK(out == nullptr);
  if (out && out != kSentinel) qsp_context_destroy(out);
}

// A table of ways to break a good qsp_context_params: each edit must make
// qsp_context_create fail with `want`, naming `needles`.
struct CreateCase {
  const char* what;
  void (*edit)(qsp_context_params&);
  qsp_status want;
  const char* needles;
};
template <size_t N>
void expect_create_cases(const qsp_context_params& good, const CreateCase (&cases)[N]) {
  for (const CreateCase& c : cases) {
    INFO("case: " << c.what);
    qsp_context_params p = good;
    c.edit(p);
    expect_create_fails(p, c.want, c.needles);
  }
}

}  // namespace qsp_test
