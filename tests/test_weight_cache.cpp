// The weight cache (src/engine/weight_cache.h) on its own: a tensor per
// (handle, variant), one upload per key however many contexts ask, the
// tensor freed with its last user, and a handle that names one tensor
// whatever form a backend keeps it in (Backend::cache_variant: the CUDA
// backend's shard pieces are another variant of the plain tensor).
#include <catch2/catch.hpp>

#include <memory>

#include "common/error.h"
#include "engine/weight_cache.h"

namespace {

using qsp::TensorMeta;
using qsp::TensorRef;
using qsp::TensorRole;

TensorMeta meta(int32_t dtype, uint64_t rows, uint64_t cols) {
  TensorMeta m;
  m.dtype = dtype;
  m.rows = rows;
  m.cols = cols;
  m.bytes = rows * cols * 4;
  m.role = TensorRole::kMatrix;
  return m;
}

// A backend's tensor that says which upload made it.
struct Made : qsp::Tensor {
  Made(const TensorMeta& m, int id_) : Tensor(m), id(id_) { stored_bytes = m.bytes; }
  int id;
};

int id_of(const TensorRef& t) { return static_cast<const Made&>(*t).id; }

}  // namespace

TEST_CASE("weight cache: a tensor per handle and variant, a handle one tensor across variants", "[cache]") {
  // Its own (kind, device) key: no other test's tensors.
  qsp::WeightCache& cache = qsp::WeightCache::get(977, 5);
  int uploads = 0;
  const auto make = [&](const TensorMeta& m) {
    return [&uploads, m]() -> std::unique_ptr<qsp::Tensor> { return std::unique_ptr<qsp::Tensor>(new Made(m, ++uploads)); };
  };
  const TensorMeta a = meta(QSP_DTYPE_F32, 8, 16);
  const uint64_t h = 0xC0FFEE;
  TensorRef plain = cache.acquire(h, 0, a, make(a));
  TensorRef plain_again = cache.acquire(h, 0, a, make(a));
  CHECK(plain == plain_again);  // a hit: one upload
  CHECK(uploads == 1);
  TensorRef two = cache.acquire(h, (2u << 8) | 1u, a, make(a));
  TensorRef four = cache.acquire(h, (4u << 8) | 1u, a, make(a));
  CHECK(uploads == 3);  // each form its own upload
  CHECK(id_of(two) == 2);
  CHECK(id_of(four) == 3);
  CHECK(cache.acquire(h, (2u << 8) | 1u, a, make(a)) == two);
  const qsp::CacheStats s = cache.stats();
  CHECK(s.n_tensors == 3);
  CHECK(s.n_bytes == 3 * a.bytes);
  CHECK(s.n_uploads == 3);
  CHECK(s.n_hits == 2);

  // The same handle as another tensor, in any variant (even a new one): a
  // conflict, and nothing is made.
  const TensorMeta b = meta(QSP_DTYPE_F16, 8, 16);
  for (uint64_t v : {uint64_t(0), uint64_t((2u << 8) | 1u), uint64_t((8u << 8) | 2u)}) {
    INFO("variant " << v);
    try {
      cache.acquire(h, v, b, make(b));
      FAIL("no conflict");
    } catch (const qsp::Error& e) {
      CHECK(e.status() == QSP_ERR_HANDLE_CONFLICT);
    }
  }
  CHECK(uploads == 3);

  // A variant whose last user went is uploaded again; the others stay.
  four.reset();
  CHECK(cache.stats().n_tensors == 2);
  TensorRef four_again = cache.acquire(h, (4u << 8) | 1u, a, make(a));
  CHECK(id_of(four_again) == 4);
  CHECK(cache.acquire(h, 0, a, make(a)) == plain);
  // With every form gone, the handle is free for another tensor.
  for (TensorRef* t : {&plain, &plain_again, &two, &four_again}) t->reset();
  CHECK(cache.stats().n_tensors == 0);
  const TensorRef other = cache.acquire(h, 0, b, make(b));
  CHECK(other->meta == b);
}
