// qsp_prefill_batch on the CUDA backend: one pass over several contexts'
// pieces against the same pieces run one context at a time (qsp_prefill on
// the GPU), in real layer shapes, Qwen3 and Llama style, Q4_0 and Q8_0.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "support/batch.h"
#include "support/cuda.h"
#include "support/model.h"

using namespace qsp_test;

namespace {

ModelSpec shape(bool qwen3, int32_t wtype, uint64_t seed) {
  ModelSpec s;
  s.n_layers = 2;
  s.qwen3 = qwen3;
  s.wtype = wtype;
  s.seed = seed;
  s.embd_type = QSP_DTYPE_Q8_0;
  if (qwen3) {  // Qwen3-0.6B's layer shapes: GQA 2, head_dim 128
    s.hidden = 1024;
    s.ffn = 3072;
    s.n_heads = 16;
    s.n_kv_heads = 8;
    s.head_dim = 128;
    s.vocab = 32000;
  } else {  // Llama style: interleaved RoPE, no QK-norm, GQA 4, head_dim 64
    s.hidden = 512;
    s.ffn = 1536;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.head_dim = 64;
    s.vocab = 32000;
  }
  return s;
}

constexpr double kTol = 2e-3;

}  // namespace

TEST_CASE("GPU batched prefill equals one context at a time", "[gpu][batch]") {
  QSP_REQUIRE_GPU();
  for (bool qwen3 : {true, false}) {
    for (int32_t wt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0}) {
      INFO((qwen3 ? "qwen3 " : "llama ") << qsp_dtype_name(wt));
      std::printf("  %s %s\n", qwen3 ? "qwen3" : "llama", qsp_dtype_name(wt));
      const TestModel m = make_model(shape(qwen3, wt, 300 + wt + qwen3));
      // Short pieces on short caches, many sequences; then long ones.
      check_random_batches(m, QSP_BACKEND_CUDA, 64, 40, 60, 2, kTol, 11 + wt);
      check_random_batches(m, QSP_BACKEND_CUDA, 12, 700, 3000, 2, kTol, 12 + wt);
    }
  }
}

TEST_CASE("GPU batched prefill: a pass of 64 one-token decode steps", "[gpu][batch][sanitize]") {
  QSP_REQUIRE_GPU();
  const TestModel m = make_model(shape(true, QSP_DTYPE_Q4_0, 41));
  check_random_batches(m, QSP_BACKEND_CUDA, 64, 1, 40, 1, kTol, 5);
}

TEST_CASE("GPU batched prefill: more tokens than one pass holds", "[gpu][batch]") {
  QSP_REQUIRE_GPU();
  // 3 x 2000 tokens: the engine splits them over passes of 4096.
  const TestModel m = make_model(shape(false, QSP_DTYPE_Q8_0, 42));
  BatchWorld w(m, QSP_BACKEND_CUDA, 3, 2100, kTol);
  std::mt19937_64 rng(8);
  std::vector<Piece> pieces;
  for (uint32_t i = 0; i < 3; ++i) pieces.push_back(random_piece(m, i, 2000, rng));
  w.step(pieces);
}

TEST_CASE("GPU batched prefill: one sequence's tokens never change another's logits", "[gpu][batch]") {
  QSP_REQUIRE_GPU();
  const TestModel m = make_model(shape(true, QSP_DTYPE_Q8_0, 43));
  check_isolation(m, QSP_BACKEND_CUDA, 6, 37, 3);
}

TEST_CASE("GPU batched prefill: a long run of joining, decoding, truncated and cleared sequences",
          "[gpu][batch][sanitize]") {
  QSP_REQUIRE_GPU();
  const TestModel m = make_model(shape(false, QSP_DTYPE_Q4_0, 44));
  check_long_run(m, QSP_BACKEND_CUDA, 8, 30, 90, kTol, 21);
}

// A server's decode loop: the same sequences, one token each, step after
// step: the batch shape repeats, so the pass is captured at its second step
// and replayed from the third (src/cuda/chunk_graphs.h, BatchGraphs), with
// each step's positions and tokens copied in by the graph. A truncation, a
// new order of the same sequences (the same graph: where the logits go is
// data it copies in) and a prompt among the decode steps (another shape)
// must all still equal one context at a time.
TEST_CASE("GPU batched prefill: repeated decode steps through a batch graph follow one context at a time",
          "[gpu][batch][graph]") {
  QSP_REQUIRE_GPU();
  const TestModel m = make_model(shape(true, QSP_DTYPE_Q4_0, 47));
  std::mt19937_64 rng(47);
  const uint32_t n = 12;
  BatchWorld w(m, QSP_BACKEND_CUDA, n, 256, kTol);
  std::vector<Piece> prompts;
  for (uint32_t i = 0; i < n; ++i) prompts.push_back(token_piece(m, i, 5 + uint32_t(rng() % 60), rng));
  w.step(prompts);
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  for (int s = 0; s < 14; ++s) {
    INFO("step " << s);
    if (s == 6) w.truncate(3, w.kv(3) / 2);                     // same shape, other positions
    if (s == 9) std::shuffle(order.begin(), order.end(), rng);  // same shape, other order
    std::vector<Piece> pieces;
    for (uint32_t i : order) pieces.push_back(token_piece(m, i, s == 11 && i == order[0] ? 9 : 1, rng));
    w.step(pieces);
  }
  std::printf("    %u sequences, 14 decode steps: worst rel L2 %.3e\n", n, w.worst());
}

// A server's batches change members: one graph serves every set of contexts
// of its shape (where the logits rows go is data the graph copies in), and
// more shapes in turn than the graph cache holds (10 against 8) do not
// capture at every step (a shape dropped and wanted again twice runs
// eagerly). Every step equals one context at a time.
TEST_CASE("GPU batched prefill: batch graphs over changing members and more shapes than the cache holds",
          "[gpu][batch][graph]") {
  QSP_REQUIRE_GPU();
  const TestModel m = make_model(shape(true, QSP_DTYPE_Q4_0, 48));
  std::mt19937_64 rng(48);
  const uint32_t n = 12;
  BatchWorld w(m, QSP_BACKEND_CUDA, n, 256, kTol);
  std::vector<Piece> prompts;
  for (uint32_t i = 0; i < n; ++i) prompts.push_back(token_piece(m, i, 3 + uint32_t(rng() % 20), rng));
  w.step(prompts);
  for (int s = 0; s < 44; ++s) {
    INFO("step " << s);
    // Even steps: 4 of the 12 contexts, another 4 each time (one shape);
    // odd steps: the first 1 .. 10 contexts in turn (10 shapes).
    std::vector<uint32_t> members;
    if (s % 2 == 0) {
      for (uint32_t i = 0; i < 4; ++i) members.push_back((uint32_t(s) * 5 + i * 3) % n);
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
    } else {
      for (uint32_t i = 0; i < 1 + uint32_t(s / 2) % 10; ++i) members.push_back(i);
    }
    std::vector<Piece> pieces;
    for (uint32_t i : members) pieces.push_back(token_piece(m, i, 1, rng));
    w.step(pieces);
  }
  std::printf("    %u sequences, 44 steps of changing members and shapes: worst rel L2 %.3e\n", n, w.worst());
}
