// Helpers for tests that drive the public C API (Catch2): status and message
// checks, logits, KV length, cache statistics, environment switches.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "qsp/qsp.h"

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

namespace qsp_test {

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline uint32_t kv_len(const qsp_context* ctx) {
  uint32_t n = 0xDEAD;
  REQUIRE(qsp_kv_length(ctx, &n) == QSP_OK);
  return n;
}

inline qsp_cache_stats cache_stats(int32_t backend = QSP_BACKEND_CPU) {
  qsp_cache_stats s;
  qsp_cache_stats_init(&s);
  REQUIRE(qsp_cache_stats_get(backend, 0, &s) == QSP_OK);
  return s;
}

inline void prefill_ok(qsp_context* ctx, const int32_t* tok, uint32_t n) {
  INFO("prefill of " << n << " tokens: " << qsp_context_last_error(ctx));
  REQUIRE(qsp_prefill(ctx, tok, n) == QSP_OK);
}

// The logits after a prefill; also checks get_logits and copy_logits agree
// and that every logit is finite.
inline std::vector<float> logits_of(qsp_context* ctx, uint32_t vocab) {
  const float* p = nullptr;
  uint32_t nv = 0;
  REQUIRE(qsp_get_logits(ctx, &p, &nv) == QSP_OK);
  REQUIRE(p != nullptr);
  REQUIRE(nv == vocab);
  std::vector<float> out(vocab);
  REQUIRE(qsp_copy_logits(ctx, out.data(), vocab) == QSP_OK);
  REQUIRE(std::memcmp(out.data(), p, vocab * sizeof(float)) == 0);
  REQUIRE(std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }));
  return out;
}

// kv_clear, prefill `t` in one call, and the logits (borrowed view copied).
inline std::vector<float> fresh_logits(qsp_context* ctx, const std::vector<int32_t>& t) {
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  prefill_ok(ctx, t.data(), uint32_t(t.size()));
  const float* p = nullptr;
  uint32_t n = 0;
  REQUIRE(qsp_get_logits(ctx, &p, &n) == QSP_OK);
  return std::vector<float>(p, p + n);
}

// Sets an environment variable for the scope (QSP_POISON, memory caps).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const std::string& value) : name(n) { set(value); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
  void set(const std::string& value) { setenv(name.c_str(), value.c_str(), 1); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// Collects what a log callback receives.
struct LogCapture {
  std::vector<std::pair<int32_t, std::string>> lines;
  static void cb(int32_t level, const char* message, void* user) {
    static_cast<LogCapture*>(user)->lines.emplace_back(level, message ? message : "(null)");
  }
};

// ---- Status + message checks ------------------------------------------------------

inline bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `word` occurs in `msg` not glued to other identifier characters.
inline bool has_word(const std::string& msg, const std::string& word) {
  for (size_t pos = msg.find(word); pos != std::string::npos; pos = msg.find(word, pos + 1)) {
    const bool left_ok = pos == 0 || !ident_char(msg[pos - 1]) || !ident_char(word.front());
    const size_t end = pos + word.size();
    const bool right_ok = end == msg.size() || !ident_char(msg[end]) || !ident_char(word.back());
    if (left_ok && right_ok) return true;
  }
  return false;
}

inline std::vector<std::string> split_needles(const std::string& needles) {
  std::vector<std::string> out;
  std::stringstream ss(needles);
  for (std::string w; std::getline(ss, w, '|');) out.push_back(w);
  return out;
}

// Leaves a failure message on the thread (and on ctx) that contains none of the
// needles, so that a stale message cannot pass for the one under test.
inline void poison_last_error(qsp_context* ctx, const std::string& needles) {
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

inline void check_failure(qsp_status got, qsp_status want, qsp_context* ctx, const std::string& needles) {
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

}  // namespace qsp_test

// Expects `call` to fail with `want` and a message naming each of the '|'-separated needles.
#define EXPECT_FAIL(ctx, want, needles, call)                      \
  do {                                                             \
    qsp_test::poison_last_error((ctx), (needles));                 \
    INFO("call: " #call);                                          \
    const qsp_status st_ = (call);                                 \
    qsp_test::check_failure(st_, (want), (ctx), (needles));        \
  } while (0)

// As EXPECT_FAIL, then checks that the context still gives a fresh context's logits.
#define EXPECT_FAIL_THEN_WORKS(fx, ctx, want, needles, call) \
  do {                                                        \
    EXPECT_FAIL(ctx, want, needles, call);                    \
    (fx).works(ctx);                                          \
  } while (0)
