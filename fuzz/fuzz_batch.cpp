// libFuzzer target for qsp_prefill_batch (include/qsp/qsp.h, src/engine/batch.cpp;
// issue 22). Once per process: a tiny CPU model (fuzz_api's) and a pool of six
// contexts: four of the model, one of another shape (max_seq_len), one
// without weights, each with a twin. The input is a program of up to 12 steps:
// batches of random contexts (repeats, NULLs), random tokens (some out of
// range), random lengths (0, past the cache, near 2^32), tokens or embeddings
// (or both, or neither), flags, seq_size values (short, long, with a nonzero
// appended byte), a NULL array; and kv_truncate / kv_clear on a context and
// its twin. Property after each batch: either a documented non-OK status with
// a message and EVERY context unchanged (kv_length, logits bytes), or QSP_OK
// and then the same pieces, one qsp_prefill at a time on the twins, succeed
// and every context equals its twin bit for bit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_model.h"
#include "qsp/qsp.h"

namespace {

using namespace fuzz;

// The model: fuzz_api's tiny two-layer model (Q4_0 and Q8_0 weights).
const Model& model() {
  static Model* m = [] {
    Model* mm = new Model(build_model(0x7654321));
    return mm;
  }();
  return *m;
}

// What a context shows from outside: its cache length and its logits.
struct State {
  qsp_status len_status, logit_status;
  uint32_t len;
  std::vector<uint8_t> logits;
  bool operator==(const State& o) const {
    return len_status == o.len_status && logit_status == o.logit_status && len == o.len && logits == o.logits;
  }
};

State state(qsp_context* c) {
  State s{};
  s.len_status = qsp_kv_length(c, &s.len);
  const float* p = nullptr;
  uint32_t n = 0;
  s.logit_status = qsp_get_logits(c, &p, &n);
  if (s.logit_status == QSP_OK) s.logits.assign(reinterpret_cast<const uint8_t*>(p), reinterpret_cast<const uint8_t*>(p + n));
  return s;
}

// The pool: slots 0-3 share the model; slot 4 has another shape (half the
// max_seq_len) with the same weights; slot 5 has no weights. Each slot has a
// twin that gets the same operations, batch pieces one at a time.
constexpr int kPool = 6;

struct Pool {
  qsp_context* ctx[kPool];
  qsp_context* twin[kPool];
};

qsp_context* make_ctx(int slot) {
  const Model& m = model();
  qsp_context_params p = m.params;
  if (slot == 4) p.max_seq_len = kMaxSeq / 2;
  qsp_context* c = nullptr;
  if (qsp_context_create(&p, &c) != QSP_OK) std::abort();
  if (slot != 5 && !upload_all(m, c)) std::abort();
  return c;
}

Pool& pool() {
  static Pool* p = [] {
    Pool* pp = new Pool;
    for (int i = 0; i < kPool; ++i) { pp->ctx[i] = make_ctx(i); pp->twin[i] = make_ctx(i); }
    return pp;
  }();
  return *p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Pool& P = pool();
  Reader r{data, size};
  for (int i = 0; i < kPool; ++i) {  // a known start: every cache empty
    qsp_kv_clear(P.ctx[i]);
    qsp_kv_clear(P.twin[i]);
  }
  constexpr uint32_t kBuf = kMaxSeq + 16;
  for (int step = 0; step < 12 && r.n; ++step) {
    const uint8_t op = r.u8();
    if (op % 8 == 6) {  // truncate both
      const int s = r.u8() % kPool;
      const uint32_t len = r.u8() % (kMaxSeq + 2);
      const qsp_status a = qsp_kv_truncate(P.ctx[s], len), b = qsp_kv_truncate(P.twin[s], len);
      FUZZ_CHECK(a == b, "truncate slot %d to %u: %d vs twin %d", s, len, a, b);
    } else if (op % 8 == 7) {
      const int s = r.u8() % kPool;
      FUZZ_CHECK(qsp_kv_clear(P.ctx[s]) == QSP_OK && qsp_kv_clear(P.twin[s]) == QSP_OK, "clear");
    } else {  // a batch
      const uint32_t n_seqs = r.u8() % 6;
      uint32_t seq_size = sizeof(qsp_batch_seq);
      switch (r.u8() % 16) {
        case 0: seq_size = r.u8(); break;
        case 1: seq_size = sizeof(qsp_batch_seq) + 8 * (1 + r.u8() % 3); break;
        case 2: seq_size = sizeof(qsp_batch_seq) - 4; break;
        default: break;
      }
      const uint32_t stride = seq_size < sizeof(qsp_batch_seq) ? uint32_t(sizeof(qsp_batch_seq)) : seq_size;
      const bool null_seqs = r.u8() % 32 == 0;
      std::vector<uint8_t> raw(size_t(stride) * (n_seqs + 1), 0);
      std::vector<std::vector<int32_t>> toks(n_seqs, std::vector<int32_t>(kBuf));
      std::vector<std::vector<float>> embs(n_seqs, std::vector<float>(size_t(kBuf) * kH));
      std::vector<int> slot(n_seqs, -1);
      for (uint32_t i = 0; i < n_seqs; ++i) {
        qsp_batch_seq q{};
        const uint8_t c = r.u8();
        slot[i] = c % 16 == 15 ? -1 : c % kPool;  // -1: a NULL ctx
        q.ctx = slot[i] < 0 ? nullptr : P.ctx[slot[i]];
        const uint8_t lsel = r.u8();
        uint32_t n = 1 + lsel % 8;                        // short pieces
        if (lsel >= 240) n = lsel == 255 ? UINT32_MAX - r.u8() : lsel == 254 ? 0 : kMaxSeq + lsel % 8;  // 0, huge
        const uint32_t filled = n < kBuf ? n : kBuf;
        const uint8_t kind = r.u8();
        for (uint32_t t = 0; t < filled; ++t) {
          const uint8_t v = r.u8();
          toks[i][t] = v < 250 ? int32_t(v % kVocab) : v == 250 ? -1 : v == 251 ? int32_t(kVocab) : int32_t(r.u32());
        }
        for (uint32_t t = 0; t < filled * kH; ++t) embs[i][t] = float(int8_t(t * 37 + kind)) / 64.0f;
        // Near 2^32 the buffer cannot hold the piece: such a piece must fail
        // before its tokens are read past the first (qsp_prefill scans the
        // ids before the capacity check), so its first id is out of range;
        // embeddings are never read before the capacity check.
        if (n > kBuf) toks[i][0] = -1;
        switch (kind % 16) {
          case 0: q.tokens = toks[i].data(); q.embeddings = embs[i].data(); break;  // both
          case 1: break;                                                          // neither
          case 2: case 3: case 4: q.embeddings = embs[i].data(); break;
          default: q.tokens = toks[i].data(); break;
        }
        q.n_tokens = n;
        q.flags = kind >= 250 ? kind : 0;
        std::memcpy(raw.data() + size_t(i) * stride, &q, sizeof q);
        if (stride > sizeof q && r.u8() % 8 == 0) raw[size_t(i) * stride + sizeof q] = 1;  // a nonzero appended byte
      }
      State before[kPool];
      for (int i = 0; i < kPool; ++i) before[i] = state(P.ctx[i]);
      const qsp_status s = qsp_prefill_batch(null_seqs ? nullptr : reinterpret_cast<const qsp_batch_seq*>(raw.data()),
                                             n_seqs, seq_size);
      FUZZ_CHECK(s <= 0 && std::strcmp(qsp_status_string(s), "unknown status") != 0, "batch: status %d", s);
      if (s != QSP_OK) {
        FUZZ_CHECK(qsp_last_error()[0] != '\0', "batch failed (%d) without a message", s);
        for (int i = 0; i < kPool; ++i) FUZZ_CHECK(state(P.ctx[i]) == before[i], "batch failed (%d) but slot %d changed", s, i);
        continue;
      }
      FUZZ_CHECK(!null_seqs && n_seqs > 0, "batch OK on NULL / empty");
      for (uint32_t i = 0; i < n_seqs; ++i) {
        qsp_batch_seq e;
        std::memcpy(&e, raw.data() + size_t(i) * stride, sizeof e);  // the stride may misalign it
        const qsp_batch_seq* q = &e;
        FUZZ_CHECK(slot[i] >= 0, "batch OK with a NULL ctx");
        qsp_context* t = P.twin[slot[i]];
        const qsp_status ts = q->tokens ? qsp_prefill(t, q->tokens, q->n_tokens) : qsp_prefill_embeddings(t, q->embeddings, q->n_tokens);
        FUZZ_CHECK(ts == QSP_OK, "batch OK but piece %u alone on the twin of slot %d gives %d (%s)", i, slot[i], ts, qsp_last_error());
      }
    }
    for (int i = 0; i < kPool; ++i)
      FUZZ_CHECK(state(P.ctx[i]) == state(P.twin[i]), "step %d: slot %d differs from its twin", step, i);
  }
  return 0;
}
