// NCCL loaded at run time (src/cuda/nccl_lib.h; issue 19): the library runs
// where NCCL is absent, and a context whose shards span CUDA devices says
// what is missing. Stand-in libraries (support/fake_nccl.c) give a complete
// NCCL, one without ncclAllReduce, and any version ($FAKE_NCCL_VERSION).
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <utility>

#include "common/error.h"
#include "cuda/nccl_lib.h"
#include "engine/backend.h"
#include "support/api.h"
#include "qsp/qsp.h"

using namespace qsp_test;

namespace {

// What load_nccl throws: the status and the message.
std::pair<qsp_status, std::string> load_error(const std::string& path) {
  try {
    qsp::load_nccl(path);
  } catch (const qsp::Error& e) {
    return {e.status(), e.what()};
  }
  return {QSP_OK, ""};
}

// A model that splits in two: 2 KV heads, 128 FFN features, 32 columns of wo
// and 64 of w_down per shard.
qsp_context_params split_params(uint32_t n_devices, uint32_t mask) {
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.n_layers = 1;
  p.hidden_size = 64;
  p.intermediate_size = 128;
  p.n_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = 16;
  p.vocab_size = 32;
  p.max_seq_len = 16;
  p.backend = QSP_BACKEND_CUDA;
  p.n_devices = n_devices;
  p.device_mask = mask;
  return p;
}

std::pair<qsp_status, std::string> create_error(const qsp_context_params& p) {
  qsp_context* ctx = nullptr;
  const qsp_status st = qsp_context_create(&p, &ctx);
  std::string msg = qsp_last_error();
  qsp_context_destroy(ctx);
  return {st, msg};
}

}  // namespace

TEST_CASE("nccl: a complete library loads and says its version", "[nccl]") {
  const qsp::NcclLib lib = qsp::load_nccl(QSP_FAKE_NCCL);
  CHECK(lib.version == 22304);
  CHECK(lib.describe() == std::string("NCCL 2.23.4 (") + QSP_FAKE_NCCL + ")");
  CHECK(lib.all_reduce != nullptr);
  CHECK(lib.group_end != nullptr);
  CHECK(lib.group_start() == 0);
  CHECK(std::string(lib.get_error_string(5)) == "invalid usage (fake)");
  // An old-style version code (before 2.9: major * 1000 + minor * 100 + patch).
  ScopedEnv v("FAKE_NCCL_VERSION", "2708");
  const auto [st, msg] = load_error(QSP_FAKE_NCCL);
  CHECK(st == QSP_ERR_UNSUPPORTED);
  CHECK_THAT(msg, Catch::Contains("version 2.7.8 is older than 2.9.0"));
  v.set("21903");
  CHECK(qsp::load_nccl(QSP_FAKE_NCCL).version == 21903);
  v.set("-1");  // ncclGetVersion fails
  CHECK_THAT(load_error(QSP_FAKE_NCCL).second, Catch::Contains("ncclGetVersion failed (5: invalid usage (fake))"));
}

TEST_CASE("nccl: a missing library or entry point is a clear UNSUPPORTED", "[nccl]") {
  auto [st, msg] = load_error("/nonexistent/libnccl.so.2");
  CHECK(st == QSP_ERR_UNSUPPORTED);
  CHECK_THAT(msg, Catch::Contains("cannot load NCCL: dlopen(/nonexistent/libnccl.so.2)"));
  CHECK_THAT(msg, Catch::Contains("libnccl2"));
  std::tie(st, msg) = load_error(QSP_FAKE_NCCL_PARTIAL);
  CHECK(st == QSP_ERR_UNSUPPORTED);
  CHECK_THAT(msg, Catch::Contains("it has no ncclAllReduce"));
}

TEST_CASE("nccl: the process's NCCL follows QSP_NCCL_LIBRARY and is kept once loaded", "[nccl]") {
  ScopedEnv lib("QSP_NCCL_LIBRARY", "/nonexistent/libnccl.so.2");
  CHECK_THROWS_AS(qsp::nccl(), qsp::Error);
  lib.set(QSP_FAKE_NCCL);
  const qsp::NcclLib& a = qsp::nccl();
  CHECK(a.version == 22304);
  CHECK(&qsp::nccl() == &a);
}

TEST_CASE("nccl: a CUDA context across devices without NCCL names what is missing", "[nccl][api]") {
  ScopedEnv lib("QSP_NCCL_LIBRARY", "/nonexistent/libnccl.so.2");
  if (!qsp::cuda_built()) {
    // No CUDA backend at all: nothing is loaded; the backend is what is missing.
    const auto [st, msg] = create_error(split_params(2, 0x3));
    CHECK(st == QSP_ERR_NO_DEVICE);
    CHECK_THAT(msg, Catch::Contains("without CUDA"));
    CHECK_THAT(msg, !Catch::Contains("NCCL"));
    return;
  }
  auto [st, msg] = create_error(split_params(2, 0x3));
  CHECK(st == QSP_ERR_UNSUPPORTED);
  CHECK_THAT(msg, Catch::Contains("tensor parallelism across CUDA devices needs NCCL: cannot load NCCL"));
  // With a library that loads, the devices come next: without two GPUs the
  // missing device is named; with them, the stand-in's ncclCommInitAll
  // refuses (it implements nothing), a device error naming the call.
  lib.set(QSP_FAKE_NCCL);
  qsp_context_params two = split_params(2, 0x3);
  two.head_dim = 64;  // one the CUDA kernels take
  std::tie(st, msg) = create_error(two);
  CHECK_THAT(msg, !Catch::Contains("needs NCCL"));
  if (qsp::cuda_device_count() >= 2) {
    CHECK(st == QSP_ERR_DEVICE);
    CHECK_THAT(msg, Catch::Contains("ncclCommInitAll"));
  } else {
    CHECK(st == QSP_ERR_NO_DEVICE);
  }
  // Every shard on one device needs no NCCL: it runs where there is a GPU
  // (tests/test_cuda_shard.cpp), and without one the device is what is missing.
  lib.set("/nonexistent/libnccl.so.2");
  {
    qsp_context_params one = split_params(2, 0x1);
    one.head_dim = 64;  // one the CUDA kernels take
    qsp_context* ctx = nullptr;
    const qsp_status s1 = qsp_context_create(&one, &ctx);
    if (qsp_backend_available(QSP_BACKEND_CUDA)) {
      CHECK(s1 == QSP_OK);
    } else {
      CHECK(s1 == QSP_ERR_NO_DEVICE);
      CHECK_THAT(std::string(qsp_last_error()), !Catch::Contains("NCCL"));
    }
    qsp_context_destroy(ctx);
  }
  // The CPU backend runs the shards whatever NCCL there is.
  qsp_context_params cpu = split_params(2, 0x3);
  cpu.backend = QSP_BACKEND_CPU;
  qsp_context* ctx = nullptr;
  CHECK(qsp_context_create(&cpu, &ctx) == QSP_OK);
  qsp_context_destroy(ctx);
}
