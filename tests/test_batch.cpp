// qsp_prefill_batch on the CPU: equal, bit for bit, to the same pieces run one
// context at a time; isolated; and every refusal leaves every context as it was.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "support/batch.h"
#include "support/model.h"
#include "qsp/qsp.h"

using namespace qsp_test;

namespace {

ModelSpec tiny(bool qwen3, int32_t wtype) {
  ModelSpec s;
  s.qwen3 = qwen3;
  s.wtype = wtype;
  s.seed = qwen3 ? 71 : 72;
  return s;
}

}  // namespace

TEST_CASE("batched prefill equals one context at a time, bit for bit (CPU)", "[batch]") {
  for (bool qwen3 : {true, false}) {
    for (int32_t wt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0}) {
      INFO((qwen3 ? "qwen3 " : "llama ") << qsp_dtype_name(wt));
      const TestModel m = make_model(tiny(qwen3, wt));
      check_random_batches(m, QSP_BACKEND_CPU, 24, 160, 500, 2, 0.0, 1000 + wt + qwen3);
    }
  }
}

TEST_CASE("batched prefill of many one-token sequences (CPU)", "[batch]") {
  const TestModel m = make_model(tiny(true, QSP_DTYPE_Q4_0));
  check_random_batches(m, QSP_BACKEND_CPU, 64, 1, 5, 1, 0.0, 77);
}

TEST_CASE("batched prefill: one sequence's tokens never change another's logits (CPU)", "[batch]") {
  const TestModel m = make_model(tiny(true, QSP_DTYPE_Q8_0));
  check_isolation(m, QSP_BACKEND_CPU, 5, 13, 5);
}

TEST_CASE("batched prefill: a long run of joining, decoding, truncated and cleared sequences (CPU)", "[batch]") {
  const TestModel m = make_model(tiny(false, -1));
  check_long_run(m, QSP_BACKEND_CPU, 6, 25, 12, 0.0, 9);
}

TEST_CASE("batched prefill refuses bad batches and leaves every context as it was", "[batch][errors]") {
  const TestModel m = make_model(tiny(true, QSP_DTYPE_Q4_0));
  const uint32_t max_seq = 64;
  std::vector<qsp_context*> c;
  for (int i = 0; i < 3; ++i) c.push_back(m.create(QSP_BACKEND_CPU, max_seq));
  for (auto* x : c) REQUIRE(x != nullptr);
  // Some history, so that "as it was" means something: cache and logits.
  std::vector<int32_t> hist = random_tokens(7, m.spec.vocab, 3);
  for (auto* x : c) REQUIRE(qsp_prefill(x, hist.data(), 7) == QSP_OK);
  std::vector<Seen> before;
  for (auto* x : c) before.push_back(observe(x));

  std::vector<int32_t> ok = random_tokens(5, m.spec.vocab, 4);
  std::vector<int32_t> bad = ok;
  bad[3] = int32_t(m.spec.vocab);  // out of the vocabulary
  std::vector<float> emb(size_t(5) * m.spec.hidden, 0.01f);

  auto seqs = [&](std::initializer_list<qsp_context*> ctxs) {
    std::vector<qsp_batch_seq> v;
    for (auto* x : ctxs) {
      qsp_batch_seq s{};
      s.ctx = x;
      s.tokens = ok.data();
      s.n_tokens = 5;
      v.push_back(s);
    }
    return v;
  };
  auto expect = [&](std::vector<qsp_batch_seq> v, qsp_status want, const char* text, uint32_t size = sizeof(qsp_batch_seq)) {
    const qsp_status st = qsp_prefill_batch(v.data(), uint32_t(v.size()), size);
    INFO(qsp_last_error());
    CHECK(st == want);
    CHECK(std::string(qsp_last_error()).find(text) != std::string::npos);
    for (size_t i = 0; i < c.size(); ++i) {
      const Seen s = observe(c[i]);
      CHECK(s.kv == before[i].kv);
      CHECK(s.logits == before[i].logits);
    }
    // Every non-null context of the refused batch carries the message (when
    // seq_size is wrong the library cannot know where the contexts are).
    if (size == sizeof(qsp_batch_seq))
      for (const auto& s : v)
      if (s.ctx) CHECK(std::string(qsp_context_last_error(s.ctx)).find(text) != std::string::npos);
  };

  CHECK(qsp_prefill_batch(nullptr, 1, sizeof(qsp_batch_seq)) == QSP_ERR_INVALID_ARGUMENT);
  {
    auto v = seqs({c[0]});
    CHECK(qsp_prefill_batch(v.data(), 0, sizeof(qsp_batch_seq)) == QSP_ERR_INVALID_ARGUMENT);
    expect(v, QSP_ERR_STRUCT_SIZE, "seq_size", 8);
  }
  {
    auto v = seqs({c[0], nullptr});
    expect(v, QSP_ERR_INVALID_ARGUMENT, "sequence 1: ctx is NULL");
  }
  {
    auto v = seqs({c[0], c[1], c[2]});
    v[2].tokens = bad.data();
    expect(v, QSP_ERR_OUT_OF_RANGE, "sequence 2: token 3");
  }
  {
    auto v = seqs({c[0], c[1], c[0]});
    expect(v, QSP_ERR_INVALID_ARGUMENT, "sequence 2: its context is also sequence 0's");
  }
  {
    auto v = seqs({c[0], c[1]});
    v[1].embeddings = emb.data();
    expect(v, QSP_ERR_INVALID_ARGUMENT, "sequence 1: set tokens or embeddings, not both");
    v[1].tokens = nullptr;
    v[1].embeddings = nullptr;
    expect(v, QSP_ERR_INVALID_ARGUMENT, "sequence 1: tokens and embeddings are both NULL");
  }
  {
    auto v = seqs({c[0], c[1]});
    v[0].flags = 1;
    expect(v, QSP_ERR_INVALID_ARGUMENT, "sequence 0: flags must be 0");
    v[0].flags = 0;
    v[1].n_tokens = 0;
    expect(v, QSP_ERR_INVALID_ARGUMENT, "sequence 1: n_tokens must be > 0");
  }
  {
    auto v = seqs({c[0], c[1]});
    std::vector<int32_t> big = random_tokens(max_seq, m.spec.vocab, 5);
    v[1].tokens = big.data();
    v[1].n_tokens = max_seq;
    expect(v, QSP_ERR_CONTEXT_FULL, "sequence 1: prefill of 64 tokens after 7 cached");
  }
  {
    // The same shape, but other weights: not one model.
    ModelSpec other = tiny(true, QSP_DTYPE_Q4_0);
    other.seed = 99;
    const TestModel m2 = make_model(other);
    qsp_context* x = m2.create(QSP_BACKEND_CPU, max_seq);
    REQUIRE(x != nullptr);
    expect(seqs({c[0], x}), QSP_ERR_INVALID_ARGUMENT, "sequence 1: its context does not share sequence 0's model");
    qsp_context_destroy(x);
    // Another shape.
    ModelSpec wide = tiny(true, QSP_DTYPE_Q4_0);
    wide.n_layers = 3;
    wide.seed = 100;
    const TestModel m3 = make_model(wide);
    x = m3.create(QSP_BACKEND_CPU, max_seq);
    REQUIRE(x != nullptr);
    expect(seqs({x, c[2]}), QSP_ERR_INVALID_ARGUMENT, "shape or hyperparameters differ");
    qsp_context_destroy(x);
  }
  {
    // A context without weights.
    qsp_context_params p = m.params;
    qsp_context* x = nullptr;
    REQUIRE(qsp_context_create(&p, &x) == QSP_OK);
    expect(seqs({c[1], x}), QSP_ERR_INVALID_ARGUMENT, "sequence 1:");
    qsp_context_destroy(x);
  }

  // Still usable: a good batch runs and equals single calls on fresh twins.
  auto v = seqs({c[2], c[0]});
  REQUIRE(qsp_prefill_batch(v.data(), 2, sizeof(qsp_batch_seq)) == QSP_OK);
  qsp_context* twin = m.create(QSP_BACKEND_CPU, max_seq);
  REQUIRE(qsp_prefill(twin, hist.data(), 7) == QSP_OK);
  REQUIRE(qsp_prefill(twin, ok.data(), 5) == QSP_OK);
  CHECK(observe(twin).logits == observe(c[0]).logits);
  CHECK(observe(c[1]).logits == before[1].logits);
  qsp_context_destroy(twin);
  for (auto* x : c) qsp_context_destroy(x);
}

TEST_CASE("batched prefill reads a newer caller's larger struct at its stride", "[batch]") {
  const TestModel m = make_model(tiny(true, QSP_DTYPE_Q8_0));
  struct Newer {
    qsp_batch_seq s;
    uint64_t future_field;
  };
  qsp_context* a = m.create(QSP_BACKEND_CPU, 32);
  qsp_context* b = m.create(QSP_BACKEND_CPU, 32);
  qsp_context* t = m.create(QSP_BACKEND_CPU, 32);
  std::vector<int32_t> ta = random_tokens(3, m.spec.vocab, 1), tb = random_tokens(4, m.spec.vocab, 2);
  Newer v[2] = {};
  v[0].s.ctx = a;
  v[0].s.tokens = ta.data();
  v[0].s.n_tokens = 3;
  v[1].s.ctx = b;
  v[1].s.tokens = tb.data();
  v[1].s.n_tokens = 4;
  v[0].future_field = v[1].future_field = 0xdeadbeef;
  INFO(qsp_last_error());
  REQUIRE(qsp_prefill_batch(&v[0].s, 2, sizeof(Newer)) == QSP_OK);
  REQUIRE(qsp_prefill(t, tb.data(), 4) == QSP_OK);
  CHECK(observe(b).logits == observe(t).logits);
  for (auto* x : {a, b, t}) qsp_context_destroy(x);
}
