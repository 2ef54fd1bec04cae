// bench_prefill: whole-model prefill throughput of qsp on the GPU, next to a
// baseline a user would otherwise pick, in the same run:
//   qsp      the public C API, backend CUDA, Q4_0 / Q8_0 weights (--type: any
//            quantized format, e.g. q4_K,q6_K)
//   cublas   the same layers with fp16 weights through cuBLAS (fp32
//            accumulation), qsp's own norm / RoPE / attention kernels between
//            them — i.e. what dequantizing the model to fp16 would buy.
// Synthetic weights in the shapes of Qwen3-0.6B and Qwen3-8B: by default the
// values `qsp synth` writes (Gaussian weights through the reference
// quantizer; bench_weights.h says why it matters: the clocks). Prints ms,
// tokens/s and effective TOPS (2 x linear parameters x tokens + causal
// attention + the LM head once).
//
// usage: bench_prefill [--model 0.6b|8b|all] [--type q4_0|q8_0|q4_K|...|q4_k_m|...|all]
//                      [--tokens 1,128,512,2048,8192] [--reps N] [--no-baseline]
//                      [--batch SPEC,...]   (qsp_prefill_batch against qsp_prefill
//                      one context at a time; SPEC as parse_batch says)
//                      [--gguf FILE,...]    (instead of the synthetic shapes: the
//                      model of each file, its own weights, as `qsp bench` runs it)
//                      [--tp N,...]         (tensor parallelism: the model split N
//                      ways, a shard per GPU 0..N-1; "Ns": N shards in turn on
//                      GPU 0; each against the first entry, e.g. --tp 1,2,4)
//                      [--profile-range]    (the first timed call of each row inside
//                      cudaProfilerStart / Stop, for scripts/gpu-profile)
//                      [--weights realistic|fast]  (fast: random codes, quicker to make,
//                      ~10% optimistic at 2048 tokens on the H200: bench_weights.h)
//                      [--profile]          (after each qsp row, one more call with its
//                      kernels timed one by one: kernels/launch_profile.h; every
//                      pass eager, QSP_GRAPHS=0)
//                      [--decode-at 2048,...]  (the one-token step on that many cached
//                      tokens, "1@2048": prefilled once, each timed step from the
//                      cache truncated back to them, as in a generation)
//                      [--refill]           (the old method: the cached tokens
//                      re-prefilled before every timed step, so each step follows
//                      a whole prompt's burst of power)
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "prefill_common.h"
#include "support/check.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

namespace bench {

// ---- qsp through the public API ------------------------------------------------
// Weights of a second context are all in the weight cache already, so its
// views carry no data (the API then reads nothing: qsp.h, "Weights").
qsp_context* make_qsp(const Shape& s, const BenchType& bt, uint32_t max_seq, bool generate, uint32_t n_devices,
                      uint32_t device_mask) {
  const int32_t dtype = bt.dtype;
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.n_devices = n_devices;
  p.device_mask = device_mask;
  p.n_layers = s.layers;
  p.hidden_size = s.hidden;
  p.intermediate_size = s.ffn;
  p.n_heads = s.heads;
  p.n_kv_heads = s.kv_heads;
  p.head_dim = s.head_dim;
  p.vocab_size = s.vocab;
  p.max_seq_len = max_seq;
  p.backend = QSP_BACKEND_CUDA;
  qsp_context* ctx = nullptr;
  QSP_QK(qsp_context_create(&p, &ctx));
  const uint64_t H = s.hidden, Q = uint64_t(s.heads) * s.head_dim, KV = uint64_t(s.kv_heads) * s.head_dim;
  uint64_t h = (uint64_t(dtype) << 40) ^ (uint64_t(s.hidden) << 20) ^ (bt.mix ? uint64_t(bt.mix->file_type + 1) << 32 : 0);
  const double t0 = now_ms();
  const auto gen_f32 = [&](uint64_t n, float mean, float sd, uint64_t seed) {
    return generate ? random_f32(n, mean, sd, seed) : std::vector<uint8_t>();
  };
  const auto gen_quant = [&](int32_t t, uint64_t rows, uint64_t cols, uint64_t seed, bool embedding = false) {
    return generate ? bench_quant(t, rows, cols, seed, embedding) : std::vector<uint8_t>();
  };
  for (uint32_t l = 0; l < s.layers; ++l) {
    std::vector<uint8_t> an = gen_f32(H, 1, 0.2f, ++h), fn = gen_f32(H, 1, 0.2f, ++h);
    std::vector<uint8_t> qn = gen_f32(s.head_dim, 1, 0.2f, ++h), kn = gen_f32(s.head_dim, 1, 0.2f, ++h);
    const std::string blk = "blk." + std::to_string(l) + ".";
    const auto type = [&](const char* t, uint64_t cols) { return bt.of(s.name, blk + t + ".weight", cols, dtype); };
    const int32_t tq = type("attn_q", H), tk = type("attn_k", H), tv = type("attn_v", H), to = type("attn_output", Q),
                  tg = type("ffn_gate", H), tu = type("ffn_up", H), td = type("ffn_down", s.ffn);
    std::vector<uint8_t> wq = gen_quant(tq, Q, H, ++h), wk = gen_quant(tk, KV, H, ++h),
                         wv = gen_quant(tv, KV, H, ++h), wo = gen_quant(to, H, Q, ++h),
                         wg = gen_quant(tg, s.ffn, H, ++h), wu = gen_quant(tu, s.ffn, H, ++h),
                         wd = gen_quant(td, H, s.ffn, ++h);
    qsp_layer_weights w;
    qsp_layer_weights_init(&w);
    w.attn_norm = view(h + 100, QSP_DTYPE_F32, 1, H, an);
    w.ffn_norm = view(h + 101, QSP_DTYPE_F32, 1, H, fn);
    w.q_norm = view(h + 102, QSP_DTYPE_F32, 1, s.head_dim, qn);
    w.k_norm = view(h + 103, QSP_DTYPE_F32, 1, s.head_dim, kn);
    w.wq = view(h + 104, tq, Q, H, wq);
    w.wk = view(h + 105, tk, KV, H, wk);
    w.wv = view(h + 106, tv, KV, H, wv);
    w.wo = view(h + 107, to, H, Q, wo);
    w.w_gate = view(h + 108, tg, s.ffn, H, wg);
    w.w_up = view(h + 109, tu, s.ffn, H, wu);
    w.w_down = view(h + 110, td, H, s.ffn, wd);
    h += 200;
    QSP_QK(qsp_upload_layer(ctx, l, &w));
  }
  // Q8_0, tied, for a single format (as Qwen3-0.6B; 8B has its own head of
  // the same shape and cost); a mix's own embedding and head types.
  const int32_t te = bt.of(s.name, "token_embd.weight", H, QSP_DTYPE_Q8_0);
  const int32_t th = bt.of(s.name, "output.weight", H, QSP_DTYPE_Q8_0);
  std::vector<uint8_t> emb = gen_quant(te, s.vocab, H, ++h, /*embedding=*/true);
  std::vector<uint8_t> on = gen_f32(H, 1, 0.2f, ++h);
  qsp_tensor e = view(h + 1, te, s.vocab, H, emb);
  QSP_QK(qsp_upload_embedding(ctx, &e));
  qsp_output_weights o;
  qsp_output_weights_init(&o);
  o.norm = view(h + 2, QSP_DTYPE_F32, 1, H, on);
  o.lm_head = e;
  std::vector<uint8_t> head;
  if (th != te) {
    head = gen_quant(th, s.vocab, H, ++h, /*embedding=*/true);
    o.lm_head = view(h + 3, th, s.vocab, H, head);
  }
  QSP_QK(qsp_upload_output(ctx, &o));
  if (generate)
    std::printf("  [qsp] generated + uploaded %s %s in %.1f s\n", s.name, bt.name().c_str(), (now_ms() - t0) / 1e3);
  return ctx;
}

double time_qsp(qsp_context* ctx, uint32_t n, uint32_t past, int reps, const std::vector<int32_t>& tokens) {
  std::vector<double> t;
  QSP_QK(qsp_kv_truncate(ctx, 0));
  if (past) QSP_QK(qsp_prefill(ctx, tokens.data(), past));  // the cached prefix, once
  for (int r = 0; r < reps + 1; ++r) {
    QSP_QK(qsp_kv_truncate(ctx, g_refill ? 0 : past));
    if (g_refill && past) QSP_QK(qsp_prefill(ctx, tokens.data(), past));
    if (r == 1) profile_range(true);
    const double t0 = now_ms();
    QSP_QK(qsp_prefill(ctx, tokens.data() + past, n));
    const double dt = now_ms() - t0;
    if (r == 1) profile_range(false);
    if (r) t.push_back(dt);  // the first run warms up (and captures the decode graph)
  }
  if (g_profile) {
    QSP_QK(qsp_kv_truncate(ctx, past));
    char what[96];
    std::snprintf(what, sizeof what, "%u tokens after %u (median %.3f ms)", n, past, median(t));
    profile_pass(what, [&] { QSP_QK(qsp_prefill(ctx, tokens.data() + past, n)); });
  }
  return median(t);
}

void print_profile(const char* what, double wall_ms) {
  const std::vector<qsp::kern::prof::Row> rows = qsp::kern::prof::stop();
  double sum = 0.0;
  int launches = 0;
  for (const auto& r : rows) sum += r.ms, launches += r.launches;
  std::printf("  profile, %s: %d launches, kernels %.3f ms of the eager call's %.3f ms\n", what, launches, sum,
              wall_ms);
  if (rows.empty()) {
    std::printf("  (no launch recorded: a replayed graph? QSP_GRAPHS=0 must be set before the context)\n");
    return;
  }
  std::printf("  %-11s %-15s %-5s %8s %9s %9s %6s\n", "kernel", "grid", "block", "launches", "ms", "us each", "%");
  for (const auto& r : rows) {
    char grid[48];
    std::snprintf(grid, sizeof grid, "%ux%ux%u", r.grid.x, r.grid.y, r.grid.z);
    std::printf("  %-11s %-15s %-5u %8d %9.3f %9.2f %6.1f\n", r.name.c_str(), grid, r.block.x * r.block.y * r.block.z,
                r.launches, r.ms, 1e3 * r.ms / r.launches, 100.0 * r.ms / sum);
  }
}

void profile_range(bool start) {
  if (!g_profile_range) return;
  QSP_CK(start ? cudaProfilerStart() : cudaProfilerStop());
}

}  // namespace bench

namespace {

using namespace bench;

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> v;
  for (size_t at = 0; at <= list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    if (end > at) v.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return v;
}

std::vector<uint32_t> parse_list(const char* s) {
  std::vector<uint32_t> v;
  for (const char* p = s; *p;) {
    v.push_back(uint32_t(std::strtoul(p, const_cast<char**>(&p), 10)));
    if (*p == ',') ++p;
  }
  return v;
}

// --gguf: the model of a GGUF file with its own weights (the tool's path:
// qsp_context_create_from_gguf), timed exactly as the synthetic models are,
// so a difference between `qsp bench` and this program can be split into
// weights (this row against the synthetic one) and harness (this row
// against `qsp bench` on the same file).
void bench_file(const std::string& path, const std::vector<uint32_t>& lengths, uint32_t max_seq, int reps,
                const std::vector<int32_t>& tokens, std::vector<std::string>& table) {
  qsp_gguf* g = nullptr;
  qsp_context_params p;
  qsp_context_params_init(&p);
  if (qsp_gguf_open(path.c_str(), &g) != QSP_OK || qsp_gguf_fill_params(g, &p) != QSP_OK) {
    std::fprintf(stderr, "bench_prefill: %s: %s\n", path.c_str(), qsp_gguf_last_error());
    qsp_gguf_close(g);
    std::exit(1);
  }
  qsp_gguf_close(g);
  const Shape s{path.c_str(), p.n_layers, p.hidden_size, p.intermediate_size, p.n_heads, p.n_kv_heads, p.head_dim,
                p.vocab_size};
  qsp_context_params exec;
  qsp_context_params_init(&exec);
  exec.backend = QSP_BACKEND_CUDA;
  exec.max_seq_len = max_seq;
  qsp_context* ctx = nullptr;
  const double t0 = now_ms();
  if (qsp_context_create_from_gguf(path.c_str(), &exec, &ctx) != QSP_OK) {
    std::fprintf(stderr, "bench_prefill: %s: %s\n", path.c_str(), qsp_gguf_last_error());
    std::exit(1);
  }
  std::printf("  [qsp] loaded %s in %.1f s\n", path.c_str(), (now_ms() - t0) / 1e3);
  const std::string name = path.substr(path.find_last_of('/') + 1);
  char line[512];
  std::vector<int32_t> tok(tokens.size());
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = tokens[i] % int32_t(p.vocab_size);
  for (uint32_t n : lengths) {
    const double ms = time_qsp(ctx, n, 0, reps_for(n, reps), tok);
    std::snprintf(line, sizeof line, "| %-10s | file | qsp    | %5u | %9.3f | %10.0f | %7.1f |", name.c_str(), n, ms,
                  n / ms * 1e3, total_flops(s, n, 0) / ms / 1e9);
    std::puts(line);
    table.push_back(line);
  }
  qsp_context_destroy(ctx);
}

// --type: "all" (q4_0 and q8_0) or a comma list of any quantized names (q4_K, ...).
std::vector<BenchType> bench_types(const std::string& type) {
  if (type == "all") return {BenchType{QSP_DTYPE_Q4_0}, BenchType{QSP_DTYPE_Q8_0}};
  std::vector<BenchType> v;
  for (size_t at = 0; at <= type.size();) {
    size_t end = type.find(',', at);
    if (end == std::string::npos) end = type.size();
    const std::string name = type.substr(at, end - at);
    bool found = false;
    for (const BlockScales& x : kBlockScales)
      if (name == qsp_dtype_name(x.dtype)) v.push_back(BenchType{x.dtype}), found = true;
    // A llama.cpp mix (q4_k_m, ...): its own spelling is lower case, so q4_k
    // above (q4_K) and the file types never collide.
    const qsp::gguf::SynthFileType* ft = found ? nullptr : qsp::gguf::find_synth_file_type(name);
    if (ft && name == ft->name) v.push_back(BenchType{ft->base, ft}), found = true;
    if (!found) {
      std::fprintf(stderr, "bench_prefill: unknown --type %s\n", name.c_str());
      std::exit(2);
    }
    at = end + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "all", type = "all";
  std::vector<uint32_t> lengths = {1, 128, 512, 2048, 8192};
  std::vector<uint32_t> decode_at = {2048};  // --decode-at: the one-token step after these many cached
  int reps = 10;
  bool baseline = true;
  std::vector<std::string> batches;  // --batch specs: then only those run
  std::vector<std::string> files;    // --gguf files: then only those run
  std::vector<std::string> tp;       // --tp entries: then only those run
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--type" && i + 1 < argc) type = argv[++i];
    else if (a == "--tokens" && i + 1 < argc) lengths = parse_list(argv[++i]);
    else if (a == "--decode-at" && i + 1 < argc) decode_at = parse_list(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--no-baseline") baseline = false;
    else if (a == "--gguf" && i + 1 < argc) files = split_commas(argv[++i]);
    else if (a == "--batch" && i + 1 < argc) batches = split_commas(argv[++i]);
    else if (a == "--tp" && i + 1 < argc) tp = split_commas(argv[++i]);
    else if (a == "--profile-range") g_profile_range = true;
    else if (a == "--refill") g_refill = true;
    else if (a == "--profile") {
      g_profile = true;
      setenv("QSP_GRAPHS", "0", 1);  // read when a context is made: none exists yet
    }
    else if (a == "--weights" && i + 1 < argc && (std::strcmp(argv[i + 1], "realistic") == 0 ||
                                                   std::strcmp(argv[i + 1], "fast") == 0))
      g_weights = std::strcmp(argv[++i], "fast") == 0 ? Weights::kFast : Weights::kRealistic;
    else {
      std::fprintf(stderr, "usage: %s [--model 0.6b|8b|all] [--type q4_0|q8_0|all] [--tokens 1,128,...] [--decode-at 2048,...] [--reps N] [--no-baseline] [--batch 32x128,64x1@512,4x512+60x1@512] [--gguf FILE,...] [--tp 1,2,4,2s] [--profile-range] [--profile] [--weights realistic|fast] [--refill]\n", argv[0]);
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it comes: a timed-out run keeps them
  if (!qsp_backend_available(QSP_BACKEND_CUDA)) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  QSP_CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench_prefill: qsp %s on %s (%d SMs)\n", qsp_version_string(), prop.name, prop.multiProcessorCount);
  const uint32_t max_len = *std::max_element(lengths.begin(), lengths.end());
  uint32_t max_past = 2048;
  for (uint32_t p : decode_at) max_past = std::max(max_past, p);
  const uint32_t max_seq = max_len + max_past + 16;
  std::vector<int32_t> tokens(max_seq);
  for (uint32_t i = 0; i < max_seq; ++i) tokens[i] = int32_t((i * 2654435761u) % 151936u);

  std::vector<std::string> table;
  char line[512];
  if (!files.empty()) {
    for (const std::string& f : files) bench_file(f, lengths, max_seq, reps, tokens, table);
    return 0;
  }
  if (!tp.empty()) {
    for (const Shape& s : kShapes) {
      if (model != "all" && std::string(s.name).find(model) == std::string::npos) continue;
      for (const BenchType& bt : bench_types(type)) bench_tp(s, bt, tp, lengths, max_seq, reps, tokens, table);
    }
    std::printf("\n| model | type | split | tokens | ms | tokens/s | TOPS | speedup |\n|---|---|---|---|---|---|---|---|\n");
    for (const std::string& l : table) std::puts(l.c_str());
    return 0;
  }
  if (!batches.empty()) {
    for (const Shape& s : kShapes) {
      if (model != "all" && std::string(s.name).find(model) == std::string::npos) continue;
      for (const BenchType& bt : bench_types(type)) {
        for (const std::string& b : batches) bench_batch(s, bt, b, reps, table);
      }
    }
    std::printf("\n| model | type | batch | seqs | tokens | batch ms | tokens/s | one at a time ms | tokens/s | speedup |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& l : table) std::puts(l.c_str());
    return 0;
  }
  for (const Shape& s : kShapes) {
    if (model != "all" && std::string(s.name).find(model) == std::string::npos) continue;
    for (const BenchType& bt : bench_types(type)) {
      qsp_context* ctx = make_qsp(s, bt, max_seq);
      for (uint32_t n : lengths) {
        const double ms = time_qsp(ctx, n, 0, reps_for(n, reps), tokens);
        std::snprintf(line, sizeof line, "| %-10s | %-4s | qsp    | %5u | %9.3f | %10.0f | %7.1f |", s.name,
                      bt.name().c_str(), n, ms, n / ms * 1e3, total_flops(s, n, 0) / ms / 1e9);
        std::puts(line);
        table.push_back(line);
      }
      // The decode step deep into a prompt (graph replay, attention over the cached keys).
      for (uint32_t past : decode_at) {
        const double dms = time_qsp(ctx, 1, past, reps, tokens);
        const std::string at = "1@" + std::to_string(past);
        std::snprintf(line, sizeof line, "| %-10s | %-4s | qsp    | %6s | %8.3f | %10.0f | %7.1f |", s.name,
                      bt.name().c_str(), at.c_str(), dms, 1e3 / dms, total_flops(s, 1, past) / dms / 1e9);
        std::puts(line);
        table.push_back(line);
      }
      qsp_context_destroy(ctx);
    }
    if (baseline) {
      const uint32_t chunk = std::min<uint32_t>(max_len, 4096);
      CublasBaseline b(s, chunk, max_seq);
      for (uint32_t n : lengths) {
        // Chunked like qsp above 4096 tokens, so both pay the same attention.
        double ms = 0;
        for (uint32_t done = 0; done < n; done += chunk) {
          const uint32_t c = std::min(chunk, n - done);
          ms += b.time(int(c), int(done), reps_for(n, reps));
        }
        std::snprintf(line, sizeof line, "| %-10s | f16  | cublas | %5u | %9.3f | %10.0f | %7.1f |", s.name, n, ms,
                      n / ms * 1e3, total_flops(s, n, 0) / ms / 1e9);
        std::puts(line);
        table.push_back(line);
      }
    }
  }
  std::printf("\n| model      | type | engine | tokens | ms | tokens/s | TOPS |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& l : table) std::puts(l.c_str());
  return 0;
}
