// Test helper: the logits of a synthesized model computed by driving the C
// API directly — tensors generated in memory (the generator `qsp synth`
// uses) and uploaded with qsp_upload_* under handles of its own, no GGUF
// file and no GGUF reader involved.
//
// usage: qsp_api_logits PRESET TYPE SEED TOKENS(1,2,3) THREADS OUT.bin
// Writes vocab_size little-endian float32 values (as qsp prefill --logits-out).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gguf_write/gguf_synth.h"
#include "qsp/qsp.h"

static int die(const std::string& what) {
  std::fprintf(stderr, "qsp_api_logits: %s: %s\n", what.c_str(), qsp_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: qsp_api_logits PRESET TYPE SEED TOKENS THREADS OUT\n");
    return 2;
  }
  const qsp::gguf::SynthPreset* p = qsp::gguf::find_synth_preset(argv[1]);
  const std::string type = argv[2];
  const int32_t wtype = type == "q4_0" ? QSP_DTYPE_Q4_0 : type == "q8_0" ? QSP_DTYPE_Q8_0
                        : type == "f16" ? QSP_DTYPE_F16 : type == "bf16" ? QSP_DTYPE_BF16 : QSP_DTYPE_F32;
  if (!p) return std::fprintf(stderr, "unknown preset\n"), 2;
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  std::vector<int32_t> tokens;
  for (std::string s = argv[4]; !s.empty();) {
    const size_t c = s.find(',');
    tokens.push_back(std::atoi(s.substr(0, c).c_str()));
    s = c == std::string::npos ? "" : s.substr(c + 1);
  }

  qsp_context_params params;
  qsp_context_params_init(&params);
  params.n_layers = p->n_layers;
  params.hidden_size = p->hidden;
  params.intermediate_size = p->ffn;
  params.n_heads = p->n_heads;
  params.n_kv_heads = p->n_kv_heads;
  params.head_dim = p->head_dim;
  params.vocab_size = p->vocab;
  params.max_seq_len = uint32_t(tokens.size());
  params.rms_eps = p->rms_eps;
  params.rope_theta = p->rope_theta;
  const bool qwen3 = p->arch == "qwen3";
  params.rope_style = qwen3 ? QSP_ROPE_NEOX : QSP_ROPE_INTERLEAVED;
  params.qk_norm = qwen3 ? 1 : 0;
  params.backend = QSP_BACKEND_CPU;
  params.n_threads = std::atoi(argv[5]);
  qsp_context* ctx = nullptr;
  if (qsp_context_create(&params, &ctx) != QSP_OK) return die("qsp_context_create");

  const std::vector<qsp::gguf::SynthTensor> ts = qsp::gguf::synth_tensors(*p, wtype, seed);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<qsp_tensor> views;
  uint64_t handle = 0x7e57000000000000ull;
  for (const auto& t : ts) {
    bytes.push_back(qsp::gguf::synth_tensor_bytes(t));
    qsp_tensor v{};
    v.handle = ++handle;
    v.dtype = t.type;
    v.n_rows = t.rows;
    v.n_cols = t.cols;
    v.data = bytes.back().data();
    v.n_bytes = bytes.back().size();
    views.push_back(v);
  }
  // synth_tensors order: token_embd, per layer (attn_norm q k v [q_norm k_norm] o ffn_norm gate up down),
  // output_norm, [output].
  size_t i = 0;
  const qsp_tensor embd = views[i++];
  for (uint32_t l = 0; l < p->n_layers; ++l) {
    qsp_layer_weights w;
    qsp_layer_weights_init(&w);
    w.attn_norm = views[i++];
    w.wq = views[i++];
    w.wk = views[i++];
    w.wv = views[i++];
    if (qwen3) {
      w.q_norm = views[i++];
      w.k_norm = views[i++];
    }
    w.wo = views[i++];
    w.ffn_norm = views[i++];
    w.w_gate = views[i++];
    w.w_up = views[i++];
    w.w_down = views[i++];
    if (qsp_upload_layer(ctx, l, &w) != QSP_OK) return die("qsp_upload_layer");
  }
  if (qsp_upload_embedding(ctx, &embd) != QSP_OK) return die("qsp_upload_embedding");
  qsp_output_weights o;
  qsp_output_weights_init(&o);
  o.norm = views[i++];
  o.lm_head = p->tied ? embd : views[i++];
  if (qsp_upload_output(ctx, &o) != QSP_OK) return die("qsp_upload_output");

  if (qsp_prefill(ctx, tokens.data(), uint32_t(tokens.size())) != QSP_OK) return die("qsp_prefill");
  std::vector<float> logits(p->vocab);
  if (qsp_copy_logits(ctx, logits.data(), logits.size()) != QSP_OK) return die("qsp_copy_logits");
  std::FILE* f = std::fopen(argv[6], "wb");
  if (!f || std::fwrite(logits.data(), 4, logits.size(), f) != logits.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "qsp_api_logits: cannot write %s\n", argv[6]);
    return 1;
  }
  qsp_context_destroy(ctx);
  return 0;
}
