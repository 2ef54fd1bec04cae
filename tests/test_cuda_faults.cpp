// Faults on the GPU: device out of memory (provoked with the test cap
// QSP_DEVICE_MEMORY_LIMIT) while allocating the KV cache and while uploading
// weights gives QSP_ERR_DEVICE_OUT_OF_MEMORY, leaks nothing, leaves the weight
// cache consistent, and a retry after memory is freed succeeds. Plus a soak
// run: many prefill/clear cycles on several contexts, device memory flat.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/api.h"
#include "support/cuda.h"
#include "support/model.h"

using namespace qsp_test;

namespace {

// QSP_DEVICE_MEMORY_LIMIT for the scope.
struct Cap : ScopedEnv {
  explicit Cap(uint64_t bytes) : ScopedEnv("QSP_DEVICE_MEMORY_LIMIT", std::to_string(bytes)) {}
};

ModelSpec fault_spec(uint64_t seed) {
  ModelSpec s;
  s.n_layers = 4;
  s.hidden = 512;
  s.ffn = 1536;
  s.n_heads = 8;
  s.n_kv_heads = 4;
  s.head_dim = 64;
  s.vocab = 4096;
  s.max_seq = 512;
  s.seed = seed;
  s.handle_base = 0xFA017000000ull + (seed << 12);
  return s;
}

}  // namespace

TEST_CASE("cuda faults: out of device memory at context creation", "[gpu][faults]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(fault_spec(1));
  qsp_context_params p = m.params;
  p.backend = QSP_BACKEND_CUDA;
  qsp_context* ctx = reinterpret_cast<qsp_context*>(1);
  {
    Cap cap(1 << 20);  // far less than the KV cache and scratch
    CHECK(qsp_context_create(&p, &ctx) == QSP_ERR_DEVICE_OUT_OF_MEMORY);
    CHECK(ctx == nullptr);
    CHECK(std::string(qsp_last_error()).find("device memory") != std::string::npos);
  }
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);  // the cap lifted: works
  qsp_context_destroy(ctx);
}

TEST_CASE("cuda faults: out of device memory while uploading weights, then a retry", "[gpu][faults]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(fault_spec(2));
  const std::vector<int32_t> tokens = random_tokens(33, m.spec.vocab, 8);
  // The reference: a context with no cap.
  std::vector<float> ref;
  {
    qsp_context* c = m.create(QSP_BACKEND_CUDA);
    REQUIRE(c);
    ref = fresh_logits(c, tokens);
    qsp_context_destroy(c);
  }
  const qsp_cache_stats s0 = cache_stats(QSP_BACKEND_CUDA);
  qsp_context_params p = m.params;
  p.backend = QSP_BACKEND_CUDA;
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  {
    // Room for the context plus about two layers: the upload fails part way.
    const uint64_t layer_bytes = 2 * 1024 * 1024;
    Cap cap(info.kv_cache_bytes + info.scratch_bytes + 2 * layer_bytes);
    qsp_status st = QSP_OK;
    uint32_t failed_at = 0;
    for (uint32_t l = 0; l < m.spec.n_layers && st == QSP_OK; ++l) {
      qsp_layer_weights w = m.layer_weights(l);
      st = qsp_upload_layer(ctx, l, &w);
      failed_at = l;
    }
    REQUIRE(st == QSP_ERR_DEVICE_OUT_OF_MEMORY);
    INFO("failed at layer " << failed_at << ": " << qsp_context_last_error(ctx));
    CHECK(std::string(qsp_context_last_error(ctx)).find("device memory") != std::string::npos);
    // The failed layer holds nothing; prefill says which layer is missing.
    CHECK(qsp_prefill(ctx, tokens.data(), 3) == QSP_ERR_NOT_READY);
    uint32_t len = 1;
    REQUIRE(qsp_kv_length(ctx, &len) == QSP_OK);
    CHECK(len == 0);
  }
  // The cache holds only tensors of completed uploads (of this context).
  const qsp_cache_stats s1 = cache_stats(QSP_BACKEND_CUDA);
  CHECK(s1.n_tensors >= s0.n_tensors);
  // Retry with the cap lifted: everything uploads, logits equal the reference.
  REQUIRE(m.upload(ctx) == QSP_OK);
  CHECK(fresh_logits(ctx, tokens) == ref);
  qsp_context_destroy(ctx);
  const qsp_cache_stats s2 = cache_stats(QSP_BACKEND_CUDA);
  CHECK(s2.n_tensors == s0.n_tensors);
  CHECK(s2.n_bytes == s0.n_bytes);
}

// The smallest QSP_DEVICE_MEMORY_LIMIT (to 64 KiB) under which a context of
// m is created and uploaded: what the library already holds (cached
// weights) plus what a context takes. Counted by the library itself, so
// other processes on the GPU (gpu-check runs the suite as several) do not
// move it, as they move the device's free memory.
uint64_t smallest_cap(const TestModel& m) {
  uint64_t lo = 0, hi = uint64_t(1) << 32;  // create fails at lo, succeeds at hi
  while (hi - lo > (64u << 10)) {
    const uint64_t mid = lo + (hi - lo) / 2;
    Cap cap(mid);
    qsp_context* c = m.create(QSP_BACKEND_CUDA);
    (c ? hi : lo) = mid;
    qsp_context_destroy(c);
  }
  return hi;
}

TEST_CASE("cuda faults: a second context under a cap shares and does not leak", "[gpu][faults]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(fault_spec(3));
  qsp_context_destroy(m.create(QSP_BACKEND_CUDA));  // the weights cached
  const uint64_t need0 = smallest_cap(m);
  for (int i = 0; i < 20; ++i) {
    Cap cap(uint64_t(1) << (20 + i % 8));  // 1 MiB .. 128 MiB: fails at various points
    qsp_context* c = m.create(QSP_BACKEND_CUDA);
    qsp_context_destroy(c);
  }
  // Nothing of the failed creations stayed allocated: a context still fits
  // the same cap (a leak of even one buffer would raise the smallest cap).
  {
    Cap cap(need0);
    qsp_context* c = m.create(QSP_BACKEND_CUDA);
    CHECK(c != nullptr);
    qsp_context_destroy(c);
  }
  CHECK(smallest_cap(m) == need0);
  qsp_context* c = m.create(QSP_BACKEND_CUDA);
  REQUIRE(c);
  qsp_context_destroy(c);
}

TEST_CASE("cuda soak: prefill/clear cycles on several contexts, memory flat", "[gpu][.soak]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(fault_spec(4));
  std::vector<qsp_context*> ctxs;
  for (int i = 0; i < 3; ++i) {
    ctxs.push_back(m.create(QSP_BACKEND_CUDA));
    REQUIRE(ctxs.back());
  }
  const std::vector<int32_t> tokens = random_tokens(512, m.spec.vocab, 1);
  const std::vector<float> ref = fresh_logits(ctxs[0], std::vector<int32_t>(tokens.begin(), tokens.begin() + 100));
  const size_t free0 = device_free_bytes();
  int cycles = 0;
  for (int i = 0; i < 3000; ++i) {
    qsp_context* c = ctxs[i % 3];
    const uint32_t n = 1 + uint32_t((i * 2654435761u) % 400);
    REQUIRE(qsp_kv_clear(c) == QSP_OK);
    REQUIRE(qsp_prefill(c, tokens.data(), n) == QSP_OK);
    if (i % 7 == 0) {  // decode steps through the graph
      int32_t t = 0;
      REQUIRE(qsp_greedy_token(c, &t) == QSP_OK);
      REQUIRE(qsp_prefill(c, &t, 1) == QSP_OK);
    }
    ++cycles;
  }
  const size_t free1 = device_free_bytes();
  std::printf("soak: %d cycles, device free %zu -> %zu bytes\n", cycles, free0, free1);
  CHECK(free1 == free0);
  CHECK(fresh_logits(ctxs[1], std::vector<int32_t>(tokens.begin(), tokens.begin() + 100)) == ref);
  for (qsp_context* c : ctxs) qsp_context_destroy(c);
}
