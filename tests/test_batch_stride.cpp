// qsp_prefill_batch with a seq_size that is in range but not a multiple of 8:
// the library used to bind a reference to the misaligned seqs[1] (undefined
// behaviour; UBSan reports it), found by fuzz/fuzz_batch. It now copies each
// entry out; the batch must work and equal the pieces run one at a time.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "support/model.h"
#include "qsp/qsp.h"

using namespace qsp_test;

TEST_CASE("batched prefill reads entries at a stride that is not a multiple of 8", "[batch][errors]") {
  ModelSpec spec;
  spec.seed = 73;
  const TestModel m = make_model(spec);
  qsp_context* a = m.create(QSP_BACKEND_CPU, 32);
  qsp_context* b = m.create(QSP_BACKEND_CPU, 32);
  qsp_context* ta = m.create(QSP_BACKEND_CPU, 32);
  qsp_context* tb = m.create(QSP_BACKEND_CPU, 32);
  REQUIRE((a && b && ta && tb));
  const int32_t ta_tok[3] = {1, 2, 3}, tb_tok[2] = {4, 5};
  const uint32_t stride = sizeof(qsp_batch_seq) + 5;  // 37: seqs[1] at offset 37
  std::vector<unsigned char> raw(2 * stride + 8, 0);
  qsp_batch_seq s0{}, s1{};
  s0.ctx = a; s0.tokens = ta_tok; s0.n_tokens = 3;
  s1.ctx = b; s1.tokens = tb_tok; s1.n_tokens = 2;
  std::memcpy(raw.data(), &s0, sizeof s0);
  std::memcpy(raw.data() + stride, &s1, sizeof s1);
  // raw.data() is 8-aligned (operator new), so raw.data() + 37 is not.
  REQUIRE(qsp_prefill_batch(reinterpret_cast<const qsp_batch_seq*>(raw.data()), 2, stride) == QSP_OK);
  REQUIRE(qsp_prefill(ta, ta_tok, 3) == QSP_OK);
  REQUIRE(qsp_prefill(tb, tb_tok, 2) == QSP_OK);
  const float *la, *lb, *lta, *ltb;
  uint32_t n = 0;
  REQUIRE(qsp_get_logits(a, &la, &n) == QSP_OK);
  REQUIRE(qsp_get_logits(ta, &lta, nullptr) == QSP_OK);
  REQUIRE(std::memcmp(la, lta, n * sizeof(float)) == 0);
  REQUIRE(qsp_get_logits(b, &lb, nullptr) == QSP_OK);
  REQUIRE(qsp_get_logits(tb, &ltb, nullptr) == QSP_OK);
  REQUIRE(std::memcmp(lb, ltb, n * sizeof(float)) == 0);
  for (auto* c : {a, b, ta, tb}) qsp_context_destroy(c);
}
