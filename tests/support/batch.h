// Checks of qsp_prefill_batch shared by the CPU and GPU tests: a batch must
// compute what the same pieces compute one context at a time through
// qsp_prefill, and must leave every context as it was when it refuses.
//
// A "world" holds two contexts per sequence slot on the same model: one
// driven by batches, its twin by single-context calls with the same pieces.
// After every step both must agree (bit for bit where `tol` is 0).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "support/model.h"
#include "qsp/qsp.h"

namespace qsp_test {

struct Piece {
  uint32_t slot = 0;
  std::vector<int32_t> tokens;   // ids, or empty when embeddings are used
  std::vector<float> embeddings; // n x hidden, or empty when tokens are used
  uint32_t n = 0;
};

inline qsp_batch_seq seq_of(qsp_context* ctx, const Piece& p) {
  qsp_batch_seq s{};
  s.ctx = ctx;
  if (!p.tokens.empty()) s.tokens = p.tokens.data();
  else s.embeddings = p.embeddings.data();
  s.n_tokens = p.n;
  return s;
}

// What an observer can see of a context: its cache length and, when it has
// them, its logits and greedy token.
struct Seen {
  uint32_t kv = 0;
  bool has_logits = false;
  std::vector<float> logits;
  int32_t greedy = -1;
};

inline Seen observe(qsp_context* ctx) {
  Seen s;
  REQUIRE(qsp_kv_length(ctx, &s.kv) == QSP_OK);
  const float* l = nullptr;
  uint32_t n = 0;
  if (qsp_get_logits(ctx, &l, &n) == QSP_OK) {
    s.has_logits = true;
    s.logits.assign(l, l + n);
    REQUIRE(qsp_greedy_token(ctx, &s.greedy) == QSP_OK);
  }
  return s;
}

class BatchWorld {
 public:
  BatchWorld(const TestModel& m, int32_t backend, uint32_t n_slots, uint32_t max_seq, double tol)
      : m_(m), tol_(tol) {
    for (uint32_t i = 0; i < n_slots; ++i) {
      batch_.push_back(m.create(backend, max_seq));
      twin_.push_back(m.create(backend, max_seq));
      REQUIRE(batch_.back() != nullptr);
      REQUIRE(twin_.back() != nullptr);
    }
  }
  ~BatchWorld() {
    for (auto* c : batch_) qsp_context_destroy(c);
    for (auto* c : twin_) qsp_context_destroy(c);
  }
  BatchWorld(const BatchWorld&) = delete;
  BatchWorld& operator=(const BatchWorld&) = delete;

  uint32_t slots() const { return uint32_t(batch_.size()); }
  double worst() const { return worst_; }  // largest rel L2 seen (GPU)
  qsp_context* ctx(uint32_t slot) { return batch_[slot]; }
  uint32_t kv(uint32_t slot) {
    uint32_t n = 0;
    REQUIRE(qsp_kv_length(batch_[slot], &n) == QSP_OK);
    return n;
  }

  // Runs the pieces as one batch and one at a time on the twins; both must agree.
  void step(const std::vector<Piece>& pieces) {
    std::vector<qsp_batch_seq> seqs;
    for (const Piece& p : pieces) seqs.push_back(seq_of(batch_[p.slot], p));
    const qsp_status st = qsp_prefill_batch(seqs.data(), uint32_t(seqs.size()), sizeof(qsp_batch_seq));
    INFO(qsp_last_error());
    REQUIRE(st == QSP_OK);
    for (const Piece& p : pieces) {
      const qsp_status s1 = p.tokens.empty()
                                ? qsp_prefill_embeddings(twin_[p.slot], p.embeddings.data(), p.n)
                                : qsp_prefill(twin_[p.slot], p.tokens.data(), p.n);
      REQUIRE(s1 == QSP_OK);
    }
    compare_all();
  }
  void truncate(uint32_t slot, uint32_t len) {
    REQUIRE(qsp_kv_truncate(batch_[slot], len) == QSP_OK);
    REQUIRE(qsp_kv_truncate(twin_[slot], len) == QSP_OK);
  }
  void clear(uint32_t slot) {
    REQUIRE(qsp_kv_clear(batch_[slot]) == QSP_OK);
    REQUIRE(qsp_kv_clear(twin_[slot]) == QSP_OK);
  }

  void compare_all() {
    for (uint32_t i = 0; i < slots(); ++i) {
      INFO("slot " << i);
      const Seen a = observe(batch_[i]), b = observe(twin_[i]);
      REQUIRE(a.kv == b.kv);
      REQUIRE(a.has_logits == b.has_logits);
      if (!a.has_logits) continue;
      if (tol_ == 0) {
        REQUIRE(a.logits == b.logits);
        REQUIRE(a.greedy == b.greedy);
        continue;
      }
      // The GPU: close, and the same greedy token unless the single run's top
      // two are closer than the batch's measured error (a tie within noise).
      double max_abs = 0;
      for (size_t k = 0; k < a.logits.size(); ++k)
        max_abs = std::max(max_abs, std::fabs(double(a.logits[k]) - double(b.logits[k])));
      const double err = rel_l2(a.logits.data(), b.logits.data(), a.logits.size());
      INFO("rel L2 " << err << ", max abs " << max_abs << ", greedy " << a.greedy << " / " << b.greedy);
      CHECK(err <= tol_);
      if (a.greedy != b.greedy) CHECK(double(b.logits[b.greedy]) - double(b.logits[a.greedy]) <= 2 * max_abs);
      worst_ = std::max(worst_, err);
    }
  }

 private:
  const TestModel& m_;
  double tol_;
  double worst_ = 0;
  std::vector<qsp_context*> batch_, twin_;
};

// A piece for `slot` of n random token ids (what a batch graph can replay:
// pieces given as embeddings run eagerly).
inline Piece token_piece(const TestModel& m, uint32_t slot, uint32_t n, std::mt19937_64& rng) {
  Piece p;
  p.slot = slot;
  p.n = n;
  p.tokens = random_tokens(n, m.spec.vocab, rng());
  return p;
}

// A random piece for `slot` of n tokens (ids, or embeddings one time in five).
inline Piece random_piece(const TestModel& m, uint32_t slot, uint32_t n, std::mt19937_64& rng) {
  if (rng() % 5 != 0) return token_piece(m, slot, n, rng);
  Piece p;
  p.slot = slot;
  p.n = n;
  std::normal_distribution<float> nd(0.0f, 0.05f);
  p.embeddings.resize(size_t(n) * m.spec.hidden);
  for (auto& v : p.embeddings) v = nd(rng);
  return p;
}

// Random mixes: `rounds` batches of 1..max_seqs sequences, pieces of
// 1..max_piece tokens on caches of 0..max_past tokens (built beforehand).
inline void check_random_batches(const TestModel& m, int32_t backend, uint32_t max_seqs, uint32_t max_piece,
                                 uint32_t max_past, int rounds, double tol, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int r = 0; r < rounds; ++r) {
    const uint32_t n = 1 + uint32_t(rng() % max_seqs);
    BatchWorld w(m, backend, n, max_past + max_piece + 1, tol);
    // Existing caches, built by one batch of the "past" pieces.
    std::vector<Piece> past;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t len = uint32_t(rng() % (max_past + 1));
      if (len) past.push_back(random_piece(m, i, len, rng));
    }
    if (!past.empty()) w.step(past);
    std::vector<Piece> now;
    for (uint32_t i = 0; i < n; ++i) {
      // Decode steps (1 token) and prompts, mixed.
      const uint32_t len = rng() % 3 == 0 ? 1 : 1 + uint32_t(rng() % max_piece);
      now.push_back(random_piece(m, i, len, rng));
    }
    std::shuffle(now.begin(), now.end(), rng);
    INFO("round " << r << ", " << n << " sequences");
    w.step(now);
    if (tol > 0) std::printf("    batch of %u sequences: worst rel L2 %.3e\n", n, w.worst());
  }
}

// One sequence's tokens changed: every other sequence's logits stay bit-identical.
inline void check_isolation(const TestModel& m, int32_t backend, uint32_t n, uint32_t len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Piece> pieces;
  for (uint32_t i = 0; i < n; ++i) pieces.push_back(random_piece(m, i, len + i, rng));
  std::vector<std::vector<float>> first;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<qsp_context*> ctxs;
    std::vector<qsp_batch_seq> seqs;
    for (uint32_t i = 0; i < n; ++i) {
      ctxs.push_back(m.create(backend, 4 * len + n + 8));
      REQUIRE(ctxs.back() != nullptr);
      seqs.push_back(seq_of(ctxs.back(), pieces[i]));
    }
    REQUIRE(qsp_prefill_batch(seqs.data(), n, sizeof(qsp_batch_seq)) == QSP_OK);
    for (uint32_t i = 0; i < n; ++i) {
      const Seen s = observe(ctxs[i]);
      if (pass == 0) {
        first.push_back(s.logits);
      } else if (i != 1) {
        INFO("sequence " << i);
        REQUIRE(s.logits == first[i]);
      } else {
        REQUIRE(s.logits != first[i]);
      }
    }
    for (auto* c : ctxs) qsp_context_destroy(c);
    // Change sequence 1's piece for the second pass.
    pieces[1] = random_piece(m, 1, len + 1, rng);
  }
}

// Sequences join, decode, get truncated or cleared, and leave, over many steps.
inline void check_long_run(const TestModel& m, int32_t backend, uint32_t slots, int steps, uint32_t max_piece,
                           double tol, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const uint32_t max_seq = 8 * max_piece + 64;
  BatchWorld w(m, backend, slots, max_seq, tol);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    std::vector<Piece> pieces;
    for (uint32_t i = 0; i < slots; ++i) {
      const uint32_t kv = w.kv(i);
      switch (rng() % 8) {
        case 0: continue;  // not in this batch (left, or waiting)
        case 1: if (kv) w.truncate(i, uint32_t(rng() % kv)); break;
        case 2: w.clear(i); break;
        default: break;
      }
      const uint32_t room = max_seq - w.kv(i);
      if (room == 0) { w.clear(i); continue; }
      const uint32_t len = std::min<uint32_t>(room, w.kv(i) && rng() % 2 ? 1 : 1 + uint32_t(rng() % max_piece));
      pieces.push_back(random_piece(m, i, len, rng));
    }
    if (pieces.empty()) continue;
    std::shuffle(pieces.begin(), pieces.end(), rng);
    w.step(pieces);
  }
}

}  // namespace qsp_test
