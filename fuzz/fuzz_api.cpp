// libFuzzer target for the C API: the input is a program of calls (create,
// uploads with mutated tensors, prefills with random sizes and token ids,
// logits, truncate/clear, destroy, NULLs and wrong struct sizes) on a tiny
// model. After every call: the status is OK or a documented error with a
// message. At the end, every context that saw errors is repaired with valid
// uploads and must give the same logits, bit for bit, as a fresh context.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_model.h"
#include "qsp/qsp.h"

namespace {

using namespace fuzz;

std::vector<float> logits_of(qsp_context* ctx, const std::vector<int32_t>& tokens) {
  const float* p = nullptr;
  uint32_t n = 0;
  if (qsp_kv_clear(ctx) != QSP_OK || qsp_prefill(ctx, tokens.data(), uint32_t(tokens.size())) != QSP_OK ||
      qsp_get_logits(ctx, &p, &n) != QSP_OK)
    return {};
  return std::vector<float>(p, p + n);
}

const Model& model() {
  static Model* m = [] {
    Model* mm = new Model(build_model(0x1234567));
    const qsp_context_params& p = mm->params;
    for (int i = 0; i < 11; ++i) mm->tokens.push_back(int32_t((i * 37 + 5) % kVocab));
    qsp_context* ctx = nullptr;
    if (qsp_context_create(&p, &ctx) != QSP_OK || !upload_all(*mm, ctx)) std::abort();
    mm->ref_logits = logits_of(ctx, mm->tokens);
    qsp_context_destroy(ctx);
    if (mm->ref_logits.size() != kVocab) std::abort();
    return mm;
  }();
  return *m;
}

void check_status(qsp_status s, qsp_context* ctx, const char* what) {
  FUZZ_CHECK(s <= 0, "%s returned positive status %d", what, s);
  FUZZ_CHECK(std::strcmp(qsp_status_string(s), "unknown status") != 0, "%s: undocumented status %d", what, s);
  if (s != QSP_OK) {
    FUZZ_CHECK(qsp_last_error()[0] != '\0', "%s failed (%d) without a message", what, s);
    if (ctx) FUZZ_CHECK(qsp_context_last_error(ctx)[0] != '\0', "%s: no context message", what);
  }
}

// Returns a possibly broken copy of t.
qsp_tensor mutate(qsp_tensor t, Reader& r) {
  switch (r.u8() % 10) {
    case 0: t.dtype = int32_t(r.u8() % 32); break;
    case 1: t.n_rows += r.u8() % 3; break;
    case 2: t.n_cols = r.u32() % 256; break;
    case 3: t.n_bytes = t.n_bytes + int(r.u8() % 5) - 2; break;
    case 4: t.data = nullptr; break;
    case 5: t.handle = r.u8() % 4 ? (r.u32() & 0xffff) : 0; break;  // a fresh handle (or none)
    case 6: t.reserved = 1; break;
    case 7: t.handle = 1 + r.u8() % 8; break;  // a small pool: provokes conflicts between mutated tensors
    default: break;  // unchanged
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Model& m = model();
  Reader r{data, size};
  qsp_context* ctxs[2] = {nullptr, nullptr};
  std::vector<int32_t> toks(kMaxSeq + 8);
  std::vector<float> fbuf((kMaxSeq + 8) * kH);
  for (int step = 0; step < 64 && r.n; ++step) {
    const uint8_t op = r.u8();
    qsp_context*& ctx = ctxs[op >> 7];
    switch (op % 12) {
      case 0: {  // create (replacing), with a possibly broken field
        qsp_context_destroy(ctx);
        ctx = nullptr;
        qsp_context_params p = m.params;
        switch (r.u8() % 8) {
          case 0: p.struct_size = r.u32() % 256; break;
          case 1: p.n_kv_heads = r.u8() % 6; break;
          case 2: p.head_dim = r.u8() % 40; break;
          case 3: p.backend = int32_t(r.u8() % 5); break;
          case 4: p.rope_style = int32_t(r.u8() % 3); break;
          case 5: p.max_seq_len = r.u8() % 64; break;
          case 6:  // tensor parallelism: shards that may or may not divide the model
            p.n_devices = r.u8() % 10;
            p.device_mask = r.u8() % 2 ? 0 : r.u32();
            break;
          default: break;
        }
        // A changed shape makes the valid weights invalid; keep the shape for the
        // final check by recreating with the model's params when it differs.
        qsp_status s = qsp_context_create(&p, &ctx);
        check_status(s, nullptr, "qsp_context_create");
        FUZZ_CHECK((s == QSP_OK) == (ctx != nullptr), "create: status %d but ctx %p", s, (void*)ctx);
        if (ctx && (p.max_seq_len != m.params.max_seq_len || p.n_kv_heads != m.params.n_kv_heads ||
                    p.head_dim != m.params.head_dim || p.rope_style != m.params.rope_style)) {
          qsp_context_destroy(ctx);
          ctx = nullptr;
        }
        break;
      }
      case 1: {  // upload a layer, one slot mutated
        if (!ctx) break;
        const uint32_t layer = r.u8() % 4;  // 2 and 3 are out of range
        qsp_layer_weights w = layer_weights(m, layer % kLayers);
        qsp_tensor* slots[] = {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.q_norm, &w.k_norm,
                               &w.wo, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down};
        qsp_tensor* s = slots[r.u8() % 11];
        *s = mutate(*s, r);
        if (r.u8() % 16 == 0) w.struct_size = r.u8();
        check_status(qsp_upload_layer(ctx, layer, &w), ctx, "qsp_upload_layer");
        break;
      }
      case 2: {
        if (!ctx) break;
        qsp_tensor t = mutate(m.embd.t, r);
        check_status(qsp_upload_embedding(ctx, r.u8() % 8 ? &t : nullptr), ctx, "qsp_upload_embedding");
        break;
      }
      case 3: {
        if (!ctx) break;
        qsp_output_weights o;
        qsp_output_weights_init(&o);
        o.norm = mutate(m.norm.t, r);
        o.lm_head = mutate(m.embd.t, r);
        check_status(qsp_upload_output(ctx, &o), ctx, "qsp_upload_output");
        break;
      }
      case 4: {  // prefill token ids, some maybe outside the vocabulary
        if (!ctx) break;
        const uint32_t n = r.u8() % (kMaxSeq + 4);
        uint32_t before = 0, after = 0;
        check_status(qsp_kv_length(ctx, &before), ctx, "qsp_kv_length");
        for (uint32_t i = 0; i < n; ++i) toks[i] = r.u8() % 16 ? int32_t(r.u8() % kVocab) : int32_t(r.u32());
        const qsp_status s = qsp_prefill(ctx, n ? toks.data() : nullptr, n);
        check_status(s, ctx, "qsp_prefill");
        check_status(qsp_kv_length(ctx, &after), ctx, "qsp_kv_length");
        FUZZ_CHECK(after == (s == QSP_OK ? before + n : before), "kv length %u -> %u after status %d", before, after, s);
        break;
      }
      case 5: {  // prefill embeddings (finite values)
        if (!ctx) break;
        const uint32_t n = 1 + r.u8() % 8;
        for (uint32_t i = 0; i < n * kH; ++i) fbuf[i] = float(int(r.u8()) - 128) / 64.0f;
        check_status(qsp_prefill_embeddings(ctx, fbuf.data(), n), ctx, "qsp_prefill_embeddings");
        break;
      }
      case 6: {
        if (!ctx) break;
        const float* lp = nullptr;
        uint32_t nv = 0;
        const qsp_status s = qsp_get_logits(ctx, &lp, &nv);
        check_status(s, ctx, "qsp_get_logits");
        if (s == QSP_OK) FUZZ_CHECK(lp && nv == kVocab, "logits %p, n %u", (const void*)lp, nv);
        int32_t tok = -1;
        const qsp_status g = qsp_greedy_token(ctx, &tok);
        check_status(g, ctx, "qsp_greedy_token");
        if (g == QSP_OK) FUZZ_CHECK(tok >= 0 && uint32_t(tok) < kVocab, "greedy token %d", tok);
        check_status(qsp_copy_logits(ctx, fbuf.data(), r.u8() % 2 ? kVocab : r.u8()), ctx, "qsp_copy_logits");
        break;
      }
      case 7:
        if (!ctx) break;
        check_status(qsp_kv_truncate(ctx, r.u8() % (kMaxSeq + 2)), ctx, "qsp_kv_truncate");
        break;
      case 8:
        if (!ctx) break;
        check_status(qsp_kv_clear(ctx), ctx, "qsp_kv_clear");
        break;
      case 9:
        qsp_context_destroy(ctx);
        ctx = nullptr;
        break;
      case 10: {  // NULLs everywhere
        check_status(qsp_prefill(ctx, nullptr, 3), ctx, "qsp_prefill(NULL)");
        check_status(qsp_upload_layer(ctx, 0, nullptr), ctx, "qsp_upload_layer(NULL)");
        check_status(qsp_get_logits(ctx, nullptr, nullptr), ctx, "qsp_get_logits(NULL)");
        check_status(qsp_context_create(nullptr, nullptr), nullptr, "qsp_context_create(NULL)");
        qsp_cache_stats st;
        qsp_cache_stats_init(&st);
        st.struct_size = r.u8();
        check_status(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &st), nullptr, "qsp_cache_stats_get");
        break;
      }
      default:
        if (ctx) FUZZ_CHECK(upload_all(m, ctx), "valid upload failed: %s", qsp_context_last_error(ctx));
        break;
    }
  }
  // Whatever happened, a context repaired with the valid weights computes
  // exactly what a fresh one does.
  for (qsp_context*& ctx : ctxs) {
    if (!ctx) continue;
    FUZZ_CHECK(upload_all(m, ctx), "repair upload failed: %s", qsp_context_last_error(ctx));
    const std::vector<float> l = logits_of(ctx, m.tokens);
    FUZZ_CHECK(l == m.ref_logits, "logits differ from a fresh context's after errors");
    qsp_context_destroy(ctx);
  }
  return 0;
}
