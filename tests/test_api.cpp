// The C API contract of qsp.h: statuses, messages, struct_size rules, and
// "a failing call leaves the context exactly as it was" (checked after each
// error by a full prefill that must match a fresh context bit for bit; the CPU
// backend is deterministic for a fixed thread count).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model_util.h"
#include "qsp/qsp.h"

using namespace qsp_test;

// Sanitizers abort on allocations they cannot serve instead of failing them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define QSP_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define QSP_TEST_SANITIZED 1
#endif
#endif
#ifndef QSP_TEST_SANITIZED
#define QSP_TEST_SANITIZED 0
#endif

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `word` occurs in `msg` not glued to other identifier characters.
bool has_word(const std::string& msg, const std::string& word) {
  for (size_t pos = msg.find(word); pos != std::string::npos; pos = msg.find(word, pos + 1)) {
    const bool left_ok = pos == 0 || !ident_char(msg[pos - 1]) || !ident_char(word.front());
    const size_t end = pos + word.size();
    const bool right_ok = end == msg.size() || !ident_char(msg[end]) || !ident_char(word.back());
    if (left_ok && right_ok) return true;
  }
  return false;
}

std::vector<std::string> split_needles(const std::string& needles) {
  std::vector<std::string> out;
  std::stringstream ss(needles);
  for (std::string w; std::getline(ss, w, '|');) out.push_back(w);
  return out;
}

// Leaves a failure message on the thread (and on ctx) that contains none of the
// needles, so that a stale message cannot pass for the one under test.
void poison(qsp_context* ctx, const std::string& needles) {
  const auto ws = split_needles(needles);
  auto clean = [&](const char* m) {
    return std::none_of(ws.begin(), ws.end(), [&](const std::string& w) { return has_word(m, w); });
  };
  if (ctx) {
    REQUIRE(qsp_kv_truncate(ctx, 0xFFFFFFFFu) == QSP_ERR_OUT_OF_RANGE);
    if (!clean(qsp_context_last_error(ctx))) {
      qsp_context_info info;
      qsp_context_info_init(&info);
      info.struct_size = 0;
      REQUIRE(qsp_context_get_info(ctx, &info) == QSP_ERR_STRUCT_SIZE);
    }
    REQUIRE(clean(qsp_context_last_error(ctx)));
  }
  qsp_cache_stats s;
  qsp_cache_stats_init(&s);
  REQUIRE(qsp_cache_stats_get(77, 0, &s) == QSP_ERR_INVALID_ARGUMENT);
  if (!clean(qsp_last_error())) {
    s.struct_size = 0;
    REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &s) == QSP_ERR_STRUCT_SIZE);
  }
  REQUIRE(clean(qsp_last_error()));
}

void check_failure(qsp_status got, qsp_status want, qsp_context* ctx, const std::string& needles) {
  INFO("status " << got << " (" << qsp_status_string(got) << "), expected " << want << " ("
                 << qsp_status_string(want) << ")");
  CHECK(got == want);
  const std::string msg = qsp_last_error();
  INFO("qsp_last_error: \"" << msg << "\"");
  CHECK_FALSE(msg.empty());
  for (const std::string& w : split_needles(needles)) {
    INFO("the message should name \"" << w << "\"");
    CHECK(has_word(msg, w));
  }
  if (ctx) CHECK(std::string(qsp_context_last_error(ctx)) == msg);
  CHECK(std::string(qsp_context_last_error(nullptr)) == msg);
}

// Expects `call` to fail with `want` and a message naming each of the '|'-separated needles.
#define EXPECT_FAIL(ctx, want, needles, call)                 \
  do {                                                        \
    poison((ctx), (needles));                                 \
    INFO("call: " #call);                                     \
    const qsp_status st_ = (call);                            \
    check_failure(st_, (want), (ctx), (needles));             \
  } while (0)

// As EXPECT_FAIL, then checks that the context still gives a fresh context's logits.
#define EXPECT_FAIL_THEN_WORKS(fx, ctx, want, needles, call) \
  do {                                                        \
    EXPECT_FAIL(ctx, want, needles, call);                    \
    (fx).works(ctx);                                          \
  } while (0)

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

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

uint32_t kv_len(const qsp_context* ctx) {
  uint32_t n = 0xDEAD;
  REQUIRE(qsp_kv_length(ctx, &n) == QSP_OK);
  return n;
}

qsp_cache_stats cache_stats() {
  qsp_cache_stats s;
  qsp_cache_stats_init(&s);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &s) == QSP_OK);
  return s;
}

qsp_context* const kSentinel = reinterpret_cast<qsp_context*>(uintptr_t(0x1));

// qsp_context_create must fail with `want`, name the field, and set *out to NULL.
void expect_create_fails(const qsp_context_params& p, qsp_status want, const std::string& needles) {
  qsp_context* out = kSentinel;
  EXPECT_FAIL(nullptr, want, needles, qsp_context_create(&p, &out));
  CHECK(out == nullptr);
  if (out && out != kSentinel) qsp_context_destroy(out);
}

struct LogCapture {
  std::vector<std::pair<int32_t, std::string>> lines;
  static void cb(int32_t level, const char* message, void* user) {
    static_cast<LogCapture*>(user)->lines.emplace_back(level, message ? message : "(null)");
  }
};

}  // namespace

// ---- Global functions -----------------------------------------------------------

TEST_CASE("api: version functions match the macros", "[api]") {
  REQUIRE(std::string(qsp_version_string()) == QSP_VERSION_STRING);
  REQUIRE(qsp_version_number() == uint32_t(QSP_VERSION_NUMBER));
  REQUIRE(qsp_version_number() == uint32_t(QSP_VERSION_MAJOR * 10000 + QSP_VERSION_MINOR * 100 + QSP_VERSION_PATCH));
  REQUIRE(qsp_abi_version() == uint32_t(QSP_ABI_VERSION));
  REQUIRE(QSP_ABI_VERSION == QSP_VERSION_MAJOR);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d.%d.%d", QSP_VERSION_MAJOR, QSP_VERSION_MINOR, QSP_VERSION_PATCH);
  REQUIRE(std::string(qsp_version_string()) == buf);
}

TEST_CASE("api: every status has a distinct non-empty string; unknown ones say so", "[api]") {
  const qsp_status all[] = {QSP_OK,
                            QSP_ERR_INVALID_ARGUMENT,
                            QSP_ERR_STRUCT_SIZE,
                            QSP_ERR_SHAPE,
                            QSP_ERR_DTYPE,
                            QSP_ERR_OUT_OF_RANGE,
                            QSP_ERR_NOT_READY,
                            QSP_ERR_CONTEXT_FULL,
                            QSP_ERR_HANDLE_CONFLICT,
                            QSP_ERR_NO_DEVICE,
                            QSP_ERR_OUT_OF_MEMORY,
                            QSP_ERR_DEVICE_OUT_OF_MEMORY,
                            QSP_ERR_DEVICE,
                            QSP_ERR_UNSUPPORTED,
                            QSP_ERR_INTERNAL,
                            QSP_ERR_IO,
                            QSP_ERR_BAD_FORMAT};
  std::set<std::string> seen;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
    REQUIRE(all[i] == -qsp_status(i));  // the values are fixed: 0, -1, ..., -16
    const char* s = qsp_status_string(all[i]);
    REQUIRE(s != nullptr);
    INFO("status " << all[i] << ": \"" << s << "\"");
    REQUIRE(std::strlen(s) > 0);
    REQUIRE(std::string(s) != "unknown status");
    seen.insert(s);
  }
  REQUIRE(seen.size() == sizeof all / sizeof all[0]);
  for (qsp_status s : {1, 2, -17, -100, 1000, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
    REQUIRE(qsp_status_string(s) != nullptr);
    REQUIRE(std::string(qsp_status_string(s)) == "unknown status");
  }
}

TEST_CASE("api: backend availability", "[api]") {
  REQUIRE(qsp_backend_available(QSP_BACKEND_CPU) == 1);
  REQUIRE(qsp_backend_available(QSP_BACKEND_AUTO) == 1);
  const int32_t cuda = qsp_backend_available(QSP_BACKEND_CUDA);
  REQUIRE((cuda == 0 || cuda == 1));
  for (int32_t b : {-1, 3, 99}) REQUIRE(qsp_backend_available(b) == 0);
}

TEST_CASE("api: init functions set defaults and are NULL-safe; destroy(NULL) is a no-op", "[api]") {
  qsp_context_params_init(nullptr);
  qsp_context_info_init(nullptr);
  qsp_layer_weights_init(nullptr);
  qsp_output_weights_init(nullptr);
  qsp_cache_stats_init(nullptr);
  qsp_context_destroy(nullptr);

  qsp_context_params p;
  std::memset(&p, 0xCD, sizeof p);
  qsp_context_params_init(&p);
  REQUIRE(p.struct_size == sizeof p);
  REQUIRE(p.backend == QSP_BACKEND_AUTO);
  REQUIRE(p.n_threads == 0);
  REQUIRE(p.rms_eps == 1e-6f);
  REQUIRE(p.rope_theta == 1e6f);
  REQUIRE(p.rope_style == QSP_ROPE_NEOX);
  REQUIRE(p.qk_norm == 1);
  REQUIRE(p.log_level == QSP_LOG_WARN);
  REQUIRE(p.log_callback == nullptr);
  REQUIRE(p.log_user_data == nullptr);
  REQUIRE(p.reserved0 == 0);
  REQUIRE(p.reserved1 == 0);
  REQUIRE(p.device_index == 0);
  REQUIRE((p.n_layers | p.hidden_size | p.intermediate_size | p.n_heads | p.n_kv_heads | p.head_dim |
           p.vocab_size | p.max_seq_len) == 0);
  // The zero model shape must be filled in.
  expect_create_fails(p, QSP_ERR_SHAPE, "n_layers");

  qsp_layer_weights w;
  std::memset(&w, 0xCD, sizeof w);
  qsp_layer_weights_init(&w);
  REQUIRE(w.struct_size == sizeof w);
  REQUIRE(w.reserved == 0);
  REQUIRE(w.wq.handle == 0);
  REQUIRE(w.w_down.data == nullptr);
  REQUIRE(w.k_norm.n_bytes == 0);

  qsp_output_weights o;
  std::memset(&o, 0xCD, sizeof o);
  qsp_output_weights_init(&o);
  REQUIRE(o.struct_size == sizeof o);
  REQUIRE(o.reserved == 0);
  REQUIRE(o.lm_head.handle == 0);

  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(info.struct_size == sizeof info);
  qsp_cache_stats cs;
  qsp_cache_stats_init(&cs);
  REQUIRE(cs.struct_size == sizeof cs);
}

// ---- NULL arguments --------------------------------------------------------------

TEST_CASE("api: NULL arguments give INVALID_ARGUMENT and a message naming them", "[api]") {
  Fixture fx(1);
  qsp_context* ctx = fx.create();
  REQUIRE(std::string(qsp_context_last_error(ctx)).empty());  // no failure yet on this context
  fx.works(ctx);
  const int32_t tok[3] = {1, 2, 3};
  std::vector<float> hidden(3 * fx.m.spec.hidden, 0.01f);
  float buf[1000];
  const float* lp = nullptr;
  uint32_t u = 0;
  int32_t t = 0;
  qsp_layer_weights lw = fx.m.layer_weights(0);
  qsp_output_weights ow = fx.m.output_weights();
  qsp_tensor emb = fx.m.embd.view();
  qsp_context_info info;
  qsp_context_info_init(&info);
  qsp_cache_stats cs;
  qsp_cache_stats_init(&cs);
  qsp_context_params p = fx.m.params;

  SECTION("a NULL context") {
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_context_get_info(nullptr, &info));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_upload_layer(nullptr, 0, &lw));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_upload_embedding(nullptr, &emb));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_upload_output(nullptr, &ow));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_prefill(nullptr, tok, 3));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_prefill_embeddings(nullptr, hidden.data(), 3));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_get_logits(nullptr, &lp, &u));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_copy_logits(nullptr, buf, 1000));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_greedy_token(nullptr, &t));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_kv_length(nullptr, &u));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_kv_clear(nullptr));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_kv_truncate(nullptr, 0));
    // A NULL context's last error is the thread's.
    REQUIRE(std::string(qsp_context_last_error(nullptr)) == qsp_last_error());
  }
  SECTION("NULL output and input pointers, named as in qsp.h") {
    qsp_context* out = kSentinel;
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "params|NULL", qsp_context_create(nullptr, &out));
    CHECK(out == nullptr);
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "out|NULL", qsp_context_create(&p, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "info|NULL", qsp_context_get_info(ctx, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "w|NULL", qsp_upload_layer(ctx, 0, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "w|NULL", qsp_upload_output(ctx, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "tokens|NULL", qsp_prefill(ctx, nullptr, 3));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "hidden|NULL", qsp_prefill_embeddings(ctx, nullptr, 3));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "logits|NULL", qsp_get_logits(ctx, nullptr, &u));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "out|NULL", qsp_copy_logits(ctx, nullptr, 1000));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token|NULL", qsp_greedy_token(ctx, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "length|NULL", qsp_kv_length(ctx, nullptr));
    // After the failures above the logits of the last prefill are still there.
    REQUIRE(qsp_get_logits(ctx, &lp, &u) == QSP_OK);
    REQUIRE(u == fx.vocab());
    REQUIRE(std::memcmp(lp, fx.ref.data(), fx.vocab() * sizeof(float)) == 0);
  }
  SECTION("NULL pointers named differently from qsp.h's parameter names") {
    // qsp.h calls these token_embd and stats.
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token_embd|NULL", qsp_upload_embedding(ctx, nullptr));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "stats|NULL", qsp_cache_stats_get(QSP_BACKEND_CPU, 0, nullptr));
  }
  SECTION("NULL tensor data for a handle the cache does not hold") {
    qsp_layer_weights w = fx.m.layer_weights(1);
    w.w_gate.handle ^= 0x5A5A5A5A00ull;  // a new handle
    w.w_gate.data = nullptr;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 1 w_gate|data", qsp_upload_layer(ctx, 1, &w));
    qsp_tensor e = fx.m.embd.view();
    e.handle ^= 0x5A5A5A5A00ull;
    e.data = nullptr;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token_embd|data", qsp_upload_embedding(ctx, &e));
  }
  SECTION("zero-sized and out-of-enum arguments") {
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "n_tokens", qsp_prefill(ctx, tok, 0));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "n_tokens", qsp_prefill_embeddings(ctx, hidden.data(), 0));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "backend", qsp_cache_stats_get(QSP_BACKEND_AUTO, 0, &cs));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "backend", qsp_cache_stats_get(42, 0, &cs));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "device_index", qsp_cache_stats_get(QSP_BACKEND_CUDA, -1, &cs));
    fx.works(ctx);
  }
  qsp_context_destroy(ctx);
}

// ---- struct_size -------------------------------------------------------------------

TEST_CASE("api: a wrong struct_size on every option struct gives STRUCT_SIZE", "[api]") {
  Fixture fx(2);
  qsp_context* ctx = fx.create();
  for (uint32_t bad : {0u, 1u, 2u}) {
    SECTION("struct_size variant " + std::to_string(bad)) {
      auto size_of = [&](size_t real) -> uint32_t { return bad == 0 ? 0u : bad == 1 ? uint32_t(real - 1) : 4u; };
      qsp_context_params p = fx.m.params;
      p.struct_size = size_of(sizeof p);
      expect_create_fails(p, QSP_ERR_STRUCT_SIZE, "struct_size");

      qsp_context_info info;
      qsp_context_info_init(&info);
      info.struct_size = size_of(sizeof info);
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_context_get_info(ctx, &info));

      qsp_layer_weights w = fx.m.layer_weights(0);
      w.struct_size = size_of(sizeof w);
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_upload_layer(ctx, 0, &w));

      qsp_output_weights o = fx.m.output_weights();
      o.struct_size = size_of(sizeof o);
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_upload_output(ctx, &o));

      qsp_cache_stats cs;
      qsp_cache_stats_init(&cs);
      cs.struct_size = size_of(sizeof cs);
      EXPECT_FAIL(nullptr, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &cs));
    }
  }
  qsp_context_destroy(ctx);
}

// ---- Model shape at create --------------------------------------------------------

TEST_CASE("api: inconsistent model parameters at create", "[api]") {
  Fixture fx(3);
  const qsp_context_params good = fx.m.params;
  {
    qsp_context* ctx = nullptr;
    REQUIRE(qsp_context_create(&good, &ctx) == QSP_OK);
    qsp_context_destroy(ctx);
  }
  struct Case {
    const char* what;
    void (*edit)(qsp_context_params&);
    qsp_status want;
    const char* needles;
  };
  const Case cases[] = {
      {"n_layers 0", [](qsp_context_params& p) { p.n_layers = 0; }, QSP_ERR_SHAPE, "n_layers"},
      {"hidden 0", [](qsp_context_params& p) { p.hidden_size = 0; }, QSP_ERR_SHAPE, "hidden_size"},
      {"ffn 0", [](qsp_context_params& p) { p.intermediate_size = 0; }, QSP_ERR_SHAPE, "intermediate_size"},
      {"n_heads 0", [](qsp_context_params& p) { p.n_heads = 0; }, QSP_ERR_SHAPE, "n_heads"},
      {"n_kv_heads 0", [](qsp_context_params& p) { p.n_kv_heads = 0; }, QSP_ERR_SHAPE, "n_kv_heads"},
      {"head_dim 0", [](qsp_context_params& p) { p.head_dim = 0; }, QSP_ERR_SHAPE, "head_dim"},
      {"vocab 0", [](qsp_context_params& p) { p.vocab_size = 0; }, QSP_ERR_SHAPE, "vocab_size"},
      {"max_seq 0", [](qsp_context_params& p) { p.max_seq_len = 0; }, QSP_ERR_SHAPE, "max_seq_len"},
      {"4 heads over 3 kv heads", [](qsp_context_params& p) { p.n_kv_heads = 3; }, QSP_ERR_SHAPE, "n_heads|n_kv_heads"},
      {"2 heads over 4 kv heads", [](qsp_context_params& p) { p.n_heads = 2; p.n_kv_heads = 4; }, QSP_ERR_SHAPE, "n_kv_heads"},
      {"odd head_dim", [](qsp_context_params& p) { p.head_dim = 31; }, QSP_ERR_SHAPE, "head_dim"},
      {"rope_style 2", [](qsp_context_params& p) { p.rope_style = 2; }, QSP_ERR_INVALID_ARGUMENT, "rope_style"},
      {"rope_style -1", [](qsp_context_params& p) { p.rope_style = -1; }, QSP_ERR_INVALID_ARGUMENT, "rope_style"},
      {"backend 3", [](qsp_context_params& p) { p.backend = 3; }, QSP_ERR_INVALID_ARGUMENT, "backend"},
      {"backend -1", [](qsp_context_params& p) { p.backend = -1; }, QSP_ERR_INVALID_ARGUMENT, "backend"},
      {"reserved0", [](qsp_context_params& p) { p.reserved0 = 1; }, QSP_ERR_INVALID_ARGUMENT, "reserved"},
      {"reserved1", [](qsp_context_params& p) { p.reserved1 = 0x80000000u; }, QSP_ERR_INVALID_ARGUMENT, "reserved"},
      {"qk_norm 2", [](qsp_context_params& p) { p.qk_norm = 2; }, QSP_ERR_INVALID_ARGUMENT, "qk_norm"},
      {"n_threads -1", [](qsp_context_params& p) { p.n_threads = -1; }, QSP_ERR_INVALID_ARGUMENT, "n_threads"},
      {"device_index -1", [](qsp_context_params& p) { p.device_index = -1; }, QSP_ERR_INVALID_ARGUMENT, "device_index"},
      {"rms_eps 0", [](qsp_context_params& p) { p.rms_eps = 0.0f; }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rms_eps < 0", [](qsp_context_params& p) { p.rms_eps = -1e-6f; }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rms_eps NaN", [](qsp_context_params& p) { p.rms_eps = std::nanf(""); }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rms_eps inf", [](qsp_context_params& p) { p.rms_eps = INFINITY; }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rope_theta 0", [](qsp_context_params& p) { p.rope_theta = 0.0f; }, QSP_ERR_INVALID_ARGUMENT, "rope_theta"},
      {"rope_theta NaN", [](qsp_context_params& p) { p.rope_theta = std::nanf(""); }, QSP_ERR_INVALID_ARGUMENT, "rope_theta"},
  };
  for (const Case& c : cases) {
    INFO("case: " << c.what);
    qsp_context_params p = good;
    c.edit(p);
    expect_create_fails(p, c.want, c.needles);
  }
}

TEST_CASE("api: a KV cache too large to allocate is OUT_OF_MEMORY, not a crash", "[api]") {
#if QSP_TEST_SANITIZED
  WARN("skipped under a sanitizer: it aborts on impossible allocations (allocator_may_return_null=0)");
  return;
#endif
  Fixture fx(19);
  qsp_context_params p = fx.m.params;
  // 4096 layers x 1024 KV features x 16M tokens x 2 x 4 bytes = 2^49 bytes: past any address space.
  p.n_layers = 4096;
  p.n_heads = 8;
  p.n_kv_heads = 8;
  p.head_dim = 128;
  p.max_seq_len = 1u << 24;
  expect_create_fails(p, QSP_ERR_OUT_OF_MEMORY, "memory");
}

// ---- Uploads ------------------------------------------------------------------------

TEST_CASE("api: upload validation errors; the context keeps working after each", "[api]") {
  Fixture fx(4);
  qsp_context* ctx = fx.create();
  const TestModel& m = fx.m;
  const uint32_t nl = m.spec.n_layers;

  SECTION("layer index out of range") {
    qsp_layer_weights w = m.layer_weights(0);
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "layer 2", qsp_upload_layer(ctx, nl, &w));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "layer 4294967295", qsp_upload_layer(ctx, 0xFFFFFFFFu, &w));
  }
  SECTION("wrong shapes name the slot") {
    qsp_layer_weights w = m.layer_weights(0);
    w.wq = m.layers[0][2].view();  // wk's tensor (64 x 128) where 128 x 128 is needed
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 0 wq", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(1);
    w.w_down = m.layers[1][8].view();  // w_gate's (256 x 128) where 128 x 256 is needed
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 1 w_down", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(1);
    w.k_norm.n_cols = m.spec.head_dim * 2;
    w.k_norm.n_bytes = w.k_norm.n_cols * 4;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 1 k_norm", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(0);
    w.attn_norm.n_rows = 2;
    w.attn_norm.n_cols = m.spec.hidden / 2;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 0 attn_norm", qsp_upload_layer(ctx, 0, &w));
    qsp_tensor e = m.embd.view();
    e.n_rows -= 1;
    e.n_bytes = qsp_dtype_size(e.dtype, e.n_rows, e.n_cols);
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "token_embd", qsp_upload_embedding(ctx, &e));
    qsp_output_weights o = m.output_weights();
    o.lm_head = m.layers[0][1].view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "lm_head", qsp_upload_output(ctx, &o));
    o = m.output_weights();
    o.norm = m.layers[0][4].view();  // q_norm: 1 x head_dim, not 1 x hidden
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "output_norm", qsp_upload_output(ctx, &o));
  }
  SECTION("wrong byte sizes, unknown dtypes and quantized norms give DTYPE") {
    qsp_layer_weights w = m.layer_weights(0);
    w.wk.n_bytes -= 1;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 wk", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(0);
    w.wk.n_bytes += 18;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 wk", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(0);
    w.w_up.dtype = QSP_DTYPE_Q8_0;  // Q4_0 bytes declared as Q8_0: the byte size is wrong for it
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 w_up", qsp_upload_layer(ctx, 0, &w));
    for (int32_t bad : {3, 6, 31, -1}) {
      INFO("dtype " << bad);
      w = m.layer_weights(1);
      w.wv.dtype = bad;
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 1 wv", qsp_upload_layer(ctx, 1, &w));
    }
    qsp_tensor e = m.embd.view();
    e.dtype = 12;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "token_embd", qsp_upload_embedding(ctx, &e));
    // Norm vectors must be f32 / f16 / bf16: a correctly sized Q8_0 / Q4_0 vector is refused.
    std::mt19937_64 rng(4);
    const HostTensor q8 = make_tensor(rng, 0xA910FFFF0001ull, QSP_DTYPE_Q8_0, 1, m.spec.hidden, 1.0f, 0.2f);
    const HostTensor q4 = make_tensor(rng, 0xA910FFFF0002ull, QSP_DTYPE_Q4_0, 1, m.spec.head_dim, 1.0f, 0.2f);
    w = m.layer_weights(1);
    w.attn_norm = q8.view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 1 attn_norm", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(0);
    w.k_norm = q4.view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 k_norm", qsp_upload_layer(ctx, 0, &w));
    qsp_output_weights o = m.output_weights();
    o.norm = q8.view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "output_norm", qsp_upload_output(ctx, &o));
  }
  SECTION("a quantized slot whose column count is not a multiple of 32 gives DTYPE") {
    // head_dim 20: wo is hidden x 80, which Q4_0 / Q8_0 cannot store.
    qsp_context_params p = m.params;
    p.head_dim = 20;
    qsp_context* c2 = nullptr;
    REQUIRE(qsp_context_create(&p, &c2) == QSP_OK);
    std::mt19937_64 rng(5);
    const HostTensor wo = make_tensor(rng, 0xA910FFFF0010ull, QSP_DTYPE_F32, m.spec.hidden, 80, 0.0f, 0.05f);
    qsp_layer_weights w;
    qsp_layer_weights_init(&w);
    w.wo = wo.view();
    w.wo.dtype = QSP_DTYPE_Q4_0;
    w.wo.n_bytes = 0;  // what qsp_dtype_size reports for it
    const HostTensor an = make_tensor(rng, 0xA910FFFF0011ull, QSP_DTYPE_F32, 1, m.spec.hidden, 1.0f, 0.2f);
    const HostTensor wq = make_tensor(rng, 0xA910FFFF0012ull, QSP_DTYPE_Q8_0, 80, m.spec.hidden, 0.0f, 0.05f);
    const HostTensor wk = make_tensor(rng, 0xA910FFFF0013ull, QSP_DTYPE_Q8_0, 40, m.spec.hidden, 0.0f, 0.05f);
    const HostTensor wv = make_tensor(rng, 0xA910FFFF0014ull, QSP_DTYPE_Q8_0, 40, m.spec.hidden, 0.0f, 0.05f);
    const HostTensor qn = make_tensor(rng, 0xA910FFFF0015ull, QSP_DTYPE_F32, 1, 20, 1.0f, 0.2f);
    w.attn_norm = an.view();
    w.wq = wq.view();
    w.wk = wk.view();
    w.wv = wv.view();
    w.q_norm = qn.view();
    w.k_norm = qn.view();
    EXPECT_FAIL(c2, QSP_ERR_DTYPE, "layer 0 wo", qsp_upload_layer(c2, 0, &w));
    qsp_context_destroy(c2);
    fx.works(ctx);
  }
  SECTION("handle 0, reserved fields and stray QK-norm tensors give INVALID_ARGUMENT") {
    qsp_layer_weights w = m.layer_weights(0);
    w.wo.handle = 0;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 0 wo", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(1);
    w.q_norm.handle = 0;  // required: the model has qk_norm 1
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 1 q_norm", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(0);
    w.w_up.reserved = 1;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 0 w_up|reserved", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(0);
    w.reserved = 7;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "reserved", qsp_upload_layer(ctx, 0, &w));
    qsp_output_weights o = m.output_weights();
    o.reserved = 1;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "reserved", qsp_upload_output(ctx, &o));
    o = m.output_weights();
    o.lm_head.handle = 0;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "lm_head", qsp_upload_output(ctx, &o));
    qsp_tensor e = m.embd.view();
    e.handle = 0;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token_embd", qsp_upload_embedding(ctx, &e));
  }
  SECTION("q_norm / k_norm on a model without QK-norm") {
    Fixture ll(5, /*qwen3=*/false);
    qsp_context* lc = ll.create();
    qsp_layer_weights w = ll.m.layer_weights(0);
    w.q_norm = ll.m.layers[0][4].view();
    w.k_norm = ll.m.layers[0][5].view();
    EXPECT_FAIL_THEN_WORKS(ll, lc, QSP_ERR_INVALID_ARGUMENT, "q_norm", qsp_upload_layer(lc, 0, &w));
    qsp_context_destroy(lc);
  }
  qsp_context_destroy(ctx);
}

TEST_CASE("api: a failed upload_layer keeps the layer's previous weights", "[api]") {
  Fixture fx(6);
  Fixture other(7);  // same shape, other weights and handles
  qsp_context* ctx = fx.create();
  fx.works(ctx);
  const qsp_cache_stats before = cache_stats();

  SECTION("new weights in every slot but a broken last one") {
    qsp_layer_weights w = other.m.layer_weights(0);
    w.w_down = other.m.layers[0][8].view();  // wrong shape, in the last slot checked
    EXPECT_FAIL(ctx, QSP_ERR_SHAPE, "layer 0 w_down", qsp_upload_layer(ctx, 0, &w));
    // The other model's tensors were not kept anywhere.
    CHECK(cache_stats().n_tensors == before.n_tensors);
    fx.works(ctx);
  }
  SECTION("one new handle, then a conflict in a later slot") {
    qsp_layer_weights w = fx.m.layer_weights(1);
    w.wq = other.m.layers[1][1].view();                 // valid, new
    w.w_up = fx.m.layers[0][9].view();                  // valid, cached
    w.w_down = fx.m.layers[1][10].view();
    w.w_down.handle = fx.m.layers[1][1].handle;         // wq's handle: 128 x 128 already, now 128 x 256
    EXPECT_FAIL(ctx, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_layer(ctx, 1, &w));
    CHECK(cache_stats().n_tensors == before.n_tensors);
    fx.works(ctx);
  }
  SECTION("a valid swap changes the logits, swapping back restores them") {
    qsp_layer_weights w = other.m.layer_weights(1);
    REQUIRE(qsp_upload_layer(ctx, 1, &w) == QSP_OK);
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    REQUIRE(qsp_prefill(ctx, fx.toks.data(), uint32_t(fx.toks.size())) == QSP_OK);
    REQUIRE_FALSE(bit_equal(fx.logits(ctx), fx.ref));
    w = fx.m.layer_weights(1);
    REQUIRE(qsp_upload_layer(ctx, 1, &w) == QSP_OK);
    fx.works(ctx);
  }
  qsp_context_destroy(ctx);
}

TEST_CASE("api: a cached handle is taken without reading its data", "[api]") {
  Fixture fx(8);
  qsp_context* ctx = fx.create();
  const qsp_cache_stats s0 = cache_stats();
  qsp_layer_weights w = fx.m.layer_weights(0);
  for (qsp_tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.q_norm, &w.k_norm, &w.wo, &w.ffn_norm, &w.w_gate,
                        &w.w_up, &w.w_down})
    t->data = nullptr;
  REQUIRE(qsp_upload_layer(ctx, 0, &w) == QSP_OK);
  qsp_tensor e = fx.m.embd.view();
  e.data = nullptr;
  REQUIRE(qsp_upload_embedding(ctx, &e) == QSP_OK);
  const qsp_cache_stats s1 = cache_stats();
  CHECK(s1.n_uploads == s0.n_uploads);
  CHECK(s1.n_hits == s0.n_hits + 12);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: re-registering a handle with other metadata is a HANDLE_CONFLICT", "[api]") {
  Fixture fx(9);
  qsp_context* a = fx.create();
  const TestModel& m = fx.m;
  std::mt19937_64 rng(9);
  char hex[32];

  SECTION("in the same context: another dtype") {
    const HostTensor h = m.layers[0][1];  // layer 0 wq, Q4_0
    const HostTensor q8 = make_tensor(rng, h.handle, QSP_DTYPE_Q8_0, h.rows, h.cols, 0.0f, 0.05f);
    qsp_layer_weights w = m.layer_weights(1);
    w.wq = q8.view();
    std::snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)h.handle);
    EXPECT_FAIL_THEN_WORKS(fx, a, QSP_ERR_HANDLE_CONFLICT, std::string("handle|") + hex, qsp_upload_layer(a, 1, &w));
  }
  SECTION("in the same context: another shape") {
    qsp_layer_weights w = m.layer_weights(1);
    w.wk.handle = m.layers[0][1].handle;  // registered as 128 x 128; wk is 64 x 128
    EXPECT_FAIL_THEN_WORKS(fx, a, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_layer(a, 1, &w));
    const HostTensor f16 = make_tensor(rng, m.layers[0][0].handle, QSP_DTYPE_F16, 1, m.spec.hidden, 1.0f, 0.2f);
    w = m.layer_weights(1);
    w.attn_norm = f16.view();  // layer 0's attn_norm handle, registered as f32
    EXPECT_FAIL_THEN_WORKS(fx, a, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_layer(a, 1, &w));
  }
  SECTION("in a second context of the same model") {
    qsp_context* b = fx.create();
    qsp_tensor e = m.embd.view();  // Q8_0 vocab x hidden ...
    e.handle = m.lm_head.handle;   // ... under the LM head's handle (Q4_0 vocab x hidden)
    EXPECT_FAIL_THEN_WORKS(fx, b, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_embedding(b, &e));
    fx.works(a);
    qsp_context_destroy(b);
  }
  SECTION("in a context of another model shape") {
    ModelSpec s;
    s.hidden = 64;
    s.ffn = 128;
    s.n_heads = 2;
    s.n_kv_heads = 1;
    s.seed = 5099;
    s.handle_base = 0xA91F00000000000ull;
    TestModel small = make_model(s);
    small.params.n_threads = 2;
    qsp_context* c = nullptr;
    REQUIRE(qsp_context_create(&small.params, &c) == QSP_OK);
    qsp_tensor e = small.embd.view();
    e.handle = m.embd.handle;  // 1000 x 128 in the cache, 1000 x 64 here
    EXPECT_FAIL(c, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_embedding(c, &e));
    // Its own handles are fine.
    REQUIRE(small.upload(c) == QSP_OK);
    REQUIRE(qsp_prefill(c, fx.toks.data(), 5) == QSP_OK);
    qsp_context_destroy(c);
    fx.works(a);
  }
  qsp_context_destroy(a);
}

TEST_CASE("api: a handle freed with its last context may be registered anew with other metadata", "[api]") {
  Fixture fx(20);
  const uint64_t h = fx.m.embd.handle;
  qsp_context* a = fx.create();
  fx.works(a);
  qsp_context_destroy(a);  // the last user of every handle of fx
  // Now the embedding's handle names other bytes (another dtype): no conflict, a fresh upload.
  std::mt19937_64 rng(20);
  const HostTensor f16 = make_tensor(rng, h, QSP_DTYPE_F16, fx.vocab(), fx.m.spec.hidden, 0.0f, 0.05f);
  qsp_context* b = fx.bare();
  const qsp_cache_stats s0 = cache_stats();
  qsp_tensor e = f16.view();
  REQUIRE(qsp_upload_embedding(b, &e) == QSP_OK);
  CHECK(cache_stats().n_uploads == s0.n_uploads + 1);
  // While b holds it, the old metadata conflicts.
  qsp_tensor old = fx.m.embd.view();
  EXPECT_FAIL(b, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_embedding(b, &old));
  qsp_context_destroy(b);
}

// ---- Prefill ----------------------------------------------------------------------

TEST_CASE("api: prefill before all weights are uploaded is NOT_READY, naming what is missing", "[api]") {
  Fixture fx(10);
  qsp_context* ctx = fx.bare();
  const TestModel& m = fx.m;
  std::vector<float> rows;
  for (int32_t t : fx.toks)
    rows.insert(rows.end(), m.embd.values.begin() + uint64_t(t) * m.spec.hidden,
                m.embd.values.begin() + uint64_t(t + 1) * m.spec.hidden);
  const uint32_t n = uint32_t(fx.toks.size());

  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "layer 0", qsp_prefill(ctx, fx.toks.data(), n));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "layer 0", qsp_prefill_embeddings(ctx, rows.data(), n));
  qsp_layer_weights w = m.layer_weights(0);
  REQUIRE(qsp_upload_layer(ctx, 0, &w) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "layer 1", qsp_prefill(ctx, fx.toks.data(), n));
  w = m.layer_weights(1);
  REQUIRE(qsp_upload_layer(ctx, 1, &w) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "output", qsp_prefill(ctx, fx.toks.data(), n));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "output", qsp_prefill_embeddings(ctx, rows.data(), n));
  qsp_output_weights o = m.output_weights();
  REQUIRE(qsp_upload_output(ctx, &o) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "embedding", qsp_prefill(ctx, fx.toks.data(), n));
  REQUIRE(kv_len(ctx) == 0);
  const float* lp = nullptr;
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_get_logits(ctx, &lp, nullptr));
  // Embeddings need no table; they give the same logits as the token ids.
  REQUIRE(qsp_prefill_embeddings(ctx, rows.data(), n) == QSP_OK);
  REQUIRE(kv_len(ctx) == n);
  CHECK(rel_l2(fx.logits(ctx).data(), fx.ref.data(), fx.vocab()) <= 1e-6);
  qsp_tensor e = m.embd.view();
  REQUIRE(qsp_upload_embedding(ctx, &e) == QSP_OK);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: token ids outside the vocabulary are OUT_OF_RANGE and change nothing", "[api]") {
  Fixture fx(11);
  qsp_context* ctx = fx.create();
  fx.works(ctx);  // leaves 17 tokens and their logits
  for (int32_t bad : {int32_t(fx.vocab()), int32_t(fx.vocab()) + 12345, -1, std::numeric_limits<int32_t>::min()}) {
    INFO("bad id " << bad);
    std::vector<int32_t> t = {5, 6, bad, 7};
    EXPECT_FAIL(ctx, QSP_ERR_OUT_OF_RANGE, std::to_string(bad), qsp_prefill(ctx, t.data(), 4));
    REQUIRE(kv_len(ctx) == fx.toks.size());
    REQUIRE(bit_equal(fx.logits(ctx), fx.ref));  // the previous logits are untouched
  }
  const int32_t last = int32_t(fx.vocab()) - 1, zero = 0;
  REQUIRE(qsp_prefill(ctx, &last, 1) == QSP_OK);
  REQUIRE(qsp_prefill(ctx, &zero, 1) == QSP_OK);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: prefill past max_seq_len is CONTEXT_FULL and keeps the KV length", "[api]") {
  Fixture fx(12);
  qsp_context* ctx = fx.create(20);  // 17 prompt tokens + 3
  const std::vector<int32_t> more = random_tokens(8, fx.vocab(), 77);
  std::vector<float> row(fx.m.spec.hidden, 0.02f);
  fx.works(ctx);
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill(ctx, more.data(), 4));
  REQUIRE(kv_len(ctx) == 17);
  REQUIRE(bit_equal(fx.logits(ctx), fx.ref));
  REQUIRE(qsp_prefill(ctx, more.data(), 3) == QSP_OK);  // exactly full is fine
  REQUIRE(kv_len(ctx) == 20);
  const std::vector<float> full = fx.logits(ctx);
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill(ctx, more.data(), 1));
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill_embeddings(ctx, row.data(), 1));
  REQUIRE(kv_len(ctx) == 20);
  REQUIRE(bit_equal(fx.logits(ctx), full));
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  std::vector<int32_t> long_prompt = random_tokens(21, fx.vocab(), 78);
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill(ctx, long_prompt.data(), 21));
  REQUIRE(kv_len(ctx) == 0);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: NaN / Inf embeddings are not rejected and propagate", "[api]") {
  Fixture fx(13);
  qsp_context* ctx = fx.create();
  std::vector<float> rows(3 * fx.m.spec.hidden, 0.01f);
  rows[fx.m.spec.hidden + 5] = std::numeric_limits<float>::quiet_NaN();
  rows[2 * fx.m.spec.hidden + 7] = std::numeric_limits<float>::infinity();
  REQUIRE(qsp_prefill_embeddings(ctx, rows.data(), 3) == QSP_OK);
  const std::vector<float> l = fx.logits(ctx);
  REQUIRE(std::any_of(l.begin(), l.end(), [](float v) { return !std::isfinite(v); }));
  int32_t g = -1;
  REQUIRE(qsp_greedy_token(ctx, &g) == QSP_OK);
  REQUIRE((g >= 0 && g < int32_t(fx.vocab())));
  fx.works(ctx);  // the poisoned KV entries are gone after a clear
  qsp_context_destroy(ctx);
}

// ---- Logits and KV cache ----------------------------------------------------------

TEST_CASE("api: logits and KV-cache errors", "[api]") {
  Fixture fx(14);
  qsp_context* ctx = fx.create();
  const float* lp = nullptr;
  uint32_t nv = 0;
  int32_t tok = 0;
  std::vector<float> buf(fx.vocab() + 1);

  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_get_logits(ctx, &lp, &nv));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_copy_logits(ctx, buf.data(), buf.size()));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_greedy_token(ctx, &tok));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "18", qsp_kv_truncate(ctx, 18));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, std::to_string(fx.vocab() - 1),
                         qsp_copy_logits(ctx, buf.data(), fx.vocab() - 1));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "0", qsp_copy_logits(ctx, buf.data(), 0));
  REQUIRE(qsp_copy_logits(ctx, buf.data(), buf.size()) == QSP_OK);  // larger is fine
  REQUIRE(std::memcmp(buf.data(), fx.ref.data(), fx.vocab() * sizeof(float)) == 0);
  REQUIRE(qsp_greedy_token(ctx, &tok) == QSP_OK);
  REQUIRE(tok == int32_t(std::max_element(fx.ref.begin(), fx.ref.end()) - fx.ref.begin()));
  // Truncation and clearing forget the logits.
  REQUIRE(qsp_kv_truncate(ctx, 17) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_get_logits(ctx, &lp, &nv));
  fx.works(ctx);
  REQUIRE(qsp_kv_truncate(ctx, 3) == QSP_OK);
  REQUIRE(kv_len(ctx) == 3);
  EXPECT_FAIL(ctx, QSP_ERR_OUT_OF_RANGE, "4", qsp_kv_truncate(ctx, 4));
  REQUIRE(kv_len(ctx) == 3);
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_greedy_token(ctx, &tok));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "1", qsp_kv_truncate(ctx, 1));
  qsp_context_destroy(ctx);
}

// ---- Backends, logging, info ---------------------------------------------------------

TEST_CASE("api: the CUDA backend without a device is NO_DEVICE", "[api]") {
  if (qsp_backend_available(QSP_BACKEND_CUDA) != 0) {
    WARN("a CUDA device is present: NO_DEVICE cannot be provoked here");
    return;
  }
  Fixture fx(15);
  qsp_context_params p = fx.m.params;
  p.backend = QSP_BACKEND_CUDA;
  expect_create_fails(p, QSP_ERR_NO_DEVICE, "CUDA");
}

TEST_CASE("api: AUTO falls back to the CPU, logs it, and reports the CPU backend", "[api]") {
  if (qsp_backend_available(QSP_BACKEND_CUDA) != 0) {
    WARN("a CUDA device is present: AUTO does not fall back here");
    return;
  }
  Fixture fx(16);
  LogCapture log;
  qsp_context_params p = fx.m.params;
  p.backend = QSP_BACKEND_AUTO;
  p.log_callback = &LogCapture::cb;
  p.log_user_data = &log;
  p.log_level = QSP_LOG_INFO;
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  REQUIRE(ctx != nullptr);
  REQUIRE_FALSE(log.lines.empty());
  bool fallback = false;
  for (const auto& l : log.lines) {
    INFO("log line (" << l.first << "): " << l.second);
    CHECK(l.first <= QSP_LOG_INFO);
    CHECK_FALSE(l.second.empty());
    if (l.second.find("CPU") != std::string::npos) fallback = true;
  }
  CHECK(fallback);

  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  CHECK(info.backend == QSP_BACKEND_CPU);
  CHECK(info.device_index == -1);
  CHECK(info.n_threads == 2);
  CHECK(std::memchr(info.device_name, 0, sizeof info.device_name) != nullptr);
  CHECK(std::strlen(info.device_name) > 0);
  const uint64_t kv_elems = uint64_t(2) * fx.m.spec.n_layers * fx.m.spec.max_seq * fx.m.spec.n_kv_heads * fx.m.spec.head_dim;
  CHECK(info.kv_cache_bytes >= kv_elems * 2);  // at least fp16 keys and values
  CHECK(info.scratch_bytes > 0);
  REQUIRE(fx.m.upload(ctx) == QSP_OK);
  fx.works(ctx);
  qsp_context_destroy(ctx);

  // At WARN the informational fallback line is filtered out.
  LogCapture quiet;
  p.log_user_data = &quiet;
  p.log_level = QSP_LOG_WARN;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  for (const auto& l : quiet.lines) CHECK(l.first <= QSP_LOG_WARN);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: the process-wide log sink serves contexts without their own", "[api]") {
  if (qsp_backend_available(QSP_BACKEND_CUDA) != 0) {
    WARN("a CUDA device is present: AUTO does not fall back here");
    return;
  }
  Fixture fx(17);
  LogCapture global, own;
  qsp_set_log_callback(&LogCapture::cb, &global, QSP_LOG_INFO);
  qsp_context_params p = fx.m.params;
  p.backend = QSP_BACKEND_AUTO;
  qsp_context* a = nullptr;
  const qsp_status sa = qsp_context_create(&p, &a);
  p.log_callback = &LogCapture::cb;
  p.log_user_data = &own;
  p.log_level = QSP_LOG_INFO;
  qsp_context* b = nullptr;
  const size_t global_after_a = global.lines.size();
  const qsp_status sb = qsp_context_create(&p, &b);
  qsp_set_log_callback(nullptr, nullptr, QSP_LOG_WARN);  // restore the default before any REQUIRE
  REQUIRE(sa == QSP_OK);
  REQUIRE(sb == QSP_OK);
  CHECK(global_after_a > 0);
  CHECK(global.lines.size() == global_after_a);  // b logged to its own sink only
  CHECK_FALSE(own.lines.empty());
  qsp_context_destroy(a);
  qsp_context_destroy(b);
  // Restored: nothing more reaches the capture.
  const size_t n = global.lines.size();
  p.log_callback = nullptr;
  REQUIRE(qsp_context_create(&p, &a) == QSP_OK);
  qsp_context_destroy(a);
  CHECK(global.lines.size() == n);
}

TEST_CASE("api: qsp_context_get_info on the CPU backend", "[api]") {
  Fixture fx(18);
  qsp_context* ctx = fx.create();
  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  CHECK(info.backend == QSP_BACKEND_CPU);
  CHECK(info.device_index == -1);
  CHECK(info.n_threads == 2);
  CHECK(std::strlen(info.device_name) > 0);
  CHECK(info.kv_cache_bytes > 0);
  qsp_context_params p = fx.m.params;
  p.n_threads = 1;
  qsp_context* one = nullptr;
  REQUIRE(qsp_context_create(&p, &one) == QSP_OK);
  REQUIRE(qsp_context_get_info(one, &info) == QSP_OK);
  CHECK(info.n_threads == 1);
  REQUIRE(fx.m.upload(one) == QSP_OK);
  // The thread count changes nothing in the CPU results.
  REQUIRE(qsp_prefill(one, fx.toks.data(), uint32_t(fx.toks.size())) == QSP_OK);
  CHECK(rel_l2(fx.logits(one).data(), fx.ref.data(), fx.vocab()) <= 1e-6);
  qsp_context_destroy(one);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: the last error is kept per thread", "[api]") {
  qsp_cache_stats cs;
  qsp_cache_stats_init(&cs);
  REQUIRE(qsp_cache_stats_get(123, 0, &cs) == QSP_ERR_INVALID_ARGUMENT);
  const std::string mine = qsp_last_error();
  REQUIRE_FALSE(mine.empty());
  std::string before, after;
  std::thread th([&] {
    before = qsp_last_error();
    qsp_kv_clear(nullptr);
    after = qsp_last_error();
  });
  th.join();
  CHECK(before.empty());  // a new thread has no failure yet
  CHECK(has_word(after, "ctx"));
  CHECK(std::string(qsp_last_error()) == mine);  // untouched by the other thread
}
