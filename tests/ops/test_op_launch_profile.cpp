// The benchmarks' launch profiler (kernels/launch_profile.h, bench_prefill
// --profile): what it records between start() and stop(), what it must not
// record (launches outside that window, launches into a stream being
// captured), and that recording leaves the kernels' results alone.
#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/launch_profile.h"
#include "ops/harness.h"

using namespace qsp_test;
namespace prof = qsp::kern::prof;

TEST_CASE("launch profile: per-family sums of an eager sequence, nothing from captures or outside the window",
          "[gpu][profile]") {
  QSP_REQUIRE_GPU();
  const int64_t n = 100000;
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  Rng rng(4242);
  for (int64_t i = 0; i < n; ++i) a[size_t(i)] = rng.normal(), b[size_t(i)] = rng.normal();
  DevBuf dst(size_t(n) * 4), src(size_t(n) * 4), one(4), out(4);
  dst.upload(a);
  src.upload(b);
  one.upload(std::vector<int32_t>{41});

  // Outside a window: nothing.
  CUDA_REQUIRE(qsp::kern::add_f32(dst.as<float>(), src.as<float>(), n, nullptr));
  CHECK(prof::stop().empty());

  // Two add_f32 and one add_i32 inside it.
  prof::start();
  CHECK(prof::on());
  CUDA_REQUIRE(qsp::kern::add_f32(dst.as<float>(), src.as<float>(), n, nullptr));
  CUDA_REQUIRE(qsp::kern::add_f32(dst.as<float>(), src.as<float>(), n, nullptr));
  CUDA_REQUIRE(qsp::kern::add_i32(one.as<int32_t>(), 1, out.as<int32_t>(), nullptr));
  const std::vector<prof::Row> rows = prof::stop();
  CHECK_FALSE(prof::on());
  REQUIRE(rows.size() == 2);
  int f32 = -1, i32 = -1;
  for (int i = 0; i < 2; ++i) (rows[size_t(i)].name == "add_f32" ? f32 : i32) = i;
  REQUIRE(f32 >= 0);
  REQUIRE(i32 >= 0);
  CHECK(rows[size_t(i32)].name == "add_i32");
  CHECK(rows[size_t(f32)].launches == 2);
  CHECK(rows[size_t(i32)].launches == 1);
  CHECK(rows[size_t(i32)].grid.x == 1);
  CHECK(rows[size_t(f32)].grid.x >= 1);
  CHECK(rows[size_t(f32)].block.x >= 32);
  for (const prof::Row& r : rows) {
    CHECK(r.ms > 0.0);
    CHECK(r.ms < 1000.0);
  }
  CHECK(rows[0].ms >= rows[1].ms);  // the most time first

  // The kernels did their work: dst = a + 3 b (one add before the window,
  // two inside), out = 42.
  const std::vector<float> got = dst.download<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = ((a[size_t(i)] + b[size_t(i)]) + b[size_t(i)]) + b[size_t(i)];
    bad += got[size_t(i)] != want;
  }
  CHECK(bad == 0);
  CHECK(out.download<int32_t>()[0] == 42);

  // A stream being captured: its launches are not recorded (their events
  // would be graph nodes), and the capture itself is unaffected.
  cudaStream_t s = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  prof::start();
  CUDA_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CUDA_REQUIRE(qsp::kern::add_i32(one.as<int32_t>(), 5, out.as<int32_t>(), s));
  cudaGraph_t g = nullptr;
  CUDA_REQUIRE(cudaStreamEndCapture(s, &g));
  CHECK(prof::stop().empty());
  cudaGraphExec_t ge = nullptr;
  CUDA_REQUIRE(cudaGraphInstantiate(&ge, g, 0));
  CUDA_REQUIRE(cudaGraphLaunch(ge, s));
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(out.download<int32_t>()[0] == 46);
  CUDA_REQUIRE(cudaGraphExecDestroy(ge));
  CUDA_REQUIRE(cudaGraphDestroy(g));
  CUDA_REQUIRE(cudaStreamDestroy(s));
}
