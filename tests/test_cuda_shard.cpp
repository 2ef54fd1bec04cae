// Tensor parallelism's partitioning on one GPU (issue 19): a CUDA context
// with n_devices = N and a one-bit device_mask runs the model as N
// Megatron-style shards one after another on that device, each shard's cut
// weights a matrix of its own, with a local sum in place of each all-reduce.
// It must equal the unsplit model: relative L2 of the last-token logits
// <= 2e-3 against the unsplit GPU context and the same greedy token (a tie
// within noise excepted), and stay as close to the CPU reference as the
// unsplit GPU model does; for N = 2, 4, 8 on the Qwen3-0.6B and Qwen3-8B
// layer shapes and Llama style, Q4_0, Q8_0 and a Q4_K_M-like mix; one-shot
// prompts of odd lengths, chunked prompts, decode steps through the CUDA
// graph, batched passes of sharded contexts, and the weight cache shared
// with unsplit contexts where the forms agree. Then the NCCL path: with one
// rank on one GPU (QSP_NCCL_ONE_RANK), and a shard per GPU where a machine
// has several.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "cuda/nccl_lib.h"
#include "engine/backend.h"
#include "support/api.h"
#include "support/batch.h"
#include "support/cuda.h"
#include "support/logits.h"
#include "support/model.h"

using namespace qsp_test;

namespace {

constexpr double kTol = 2e-3;  // sharded against unsplit, both on the GPU

ModelSpec qwen3_06b(int32_t wtype, uint64_t seed) {
  ModelSpec s = qwen3_06b_layers(wtype, seed);  // tied: the LM head's shards are cut from the embedding's handle
  s.max_seq = 1200;
  return s;
}

ModelSpec qwen3_8b(int32_t wtype, uint64_t seed) {
  // Qwen3-8B's layer shapes, one layer; a smaller vocabulary than the real
  // 151936 (the 0.6B cases cut that one) keeps the host model small.
  ModelSpec s = qwen3_06b(wtype, seed);
  s.n_layers = 1;
  s.vocab = 32000;
  s.hidden = 4096;
  s.ffn = 12288;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.tied = false;
  return s;
}

ModelSpec llama(int32_t wtype, uint64_t seed) {
  ModelSpec s;  // Llama style: interleaved RoPE, no QK-norm, GQA 4 over 8 KV heads
  s.n_layers = 2;
  s.hidden = 1024;
  s.ffn = 2816;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 64;
  s.vocab = 32000;
  s.max_seq = 1200;
  s.qwen3 = false;
  s.rope_theta = 500000.0f;
  s.wtype = wtype;
  s.embd_type = QSP_DTYPE_F16;
  s.tied = false;
  s.seed = seed;
  return s;
}

// A context of m on the GPU split n ways, every shard on device 0 (in turn,
// or a rank each where the caller set QSP_TP_LOCAL_RANKS).
qsp_context* create_sharded(const TestModel& m, uint32_t n) {
  qsp_context_params p = m.params;
  p.backend = QSP_BACKEND_CUDA;
  p.n_devices = n;
  p.device_mask = 0x1;
  qsp_context* ctx = nullptr;
  {
    const qsp_status st = qsp_context_create(&p, &ctx);
    INFO("n_devices " << n << ": " << qsp_last_error());
    REQUIRE(st == QSP_OK);
  }
  {
    const qsp_status st = m.upload(ctx);
    INFO(qsp_context_last_error(ctx));
    REQUIRE(st == QSP_OK);
  }
  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  CHECK(info.backend == QSP_BACKEND_CUDA);
  // "(2 shards)" in turn; "(2 shards on devices 0, 0)" with QSP_TP_LOCAL_RANKS
  CHECK(std::string(info.device_name).find("(" + std::to_string(n) + " shards") != std::string::npos);
  return ctx;
}

struct Prompt {
  std::string what;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> chunks;
};

// One-shot prompts of the given lengths, then the longest in three uneven
// chunks.
std::vector<Prompt> prompts(const ModelSpec& spec, const std::vector<uint32_t>& lengths) {
  std::vector<Prompt> out;
  for (uint32_t n : lengths)
    out.push_back({"prompt of " + std::to_string(n), random_tokens(n, spec.vocab, spec.seed * 1000 + n), {n}});
  const Prompt& last = out.back();
  const uint32_t n = uint32_t(last.tokens.size()), a = n / 3, b = n / 2;
  out.push_back({"prompt of " + std::to_string(n) + " in chunks", last.tokens, {a, b, n - a - b}});
  return out;
}

// Each prompt on the CPU reference, the unsplit GPU context and the GPU
// split 2, 4 and 8 ways; then decode steps (the reference's greedy token fed
// back, through the one-token graph) on all of them.
void check_shards(const TestModel& m, const std::vector<uint32_t>& lengths, double cpu_tol) {
  const ModelSpec& spec = m.spec;
  ScopedEnv poison("QSP_POISON", "1");
  qsp_context* cpu = m.create(QSP_BACKEND_CPU);
  qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
  REQUIRE(cpu);
  REQUIRE(gpu);
  std::vector<uint32_t> ns;
  std::vector<qsp_context*> sharded;
  for (uint32_t n : {2u, 4u, 8u}) {
    if (spec.n_kv_heads % n != 0) continue;
    ns.push_back(n);
    sharded.push_back(create_sharded(m, n));
  }
  REQUIRE(!sharded.empty());
  auto clear_all = [&] {
    REQUIRE(qsp_kv_clear(cpu) == QSP_OK);
    REQUIRE(qsp_kv_clear(gpu) == QSP_OK);
    for (qsp_context* c : sharded) REQUIRE(qsp_kv_clear(c) == QSP_OK);
  };
  auto compare = [&](const std::string& what, const std::vector<int32_t>& tokens,
                     const std::vector<uint32_t>& chunks) -> Logits {
    std::printf("  %s %s %s\n", spec.qwen3 ? "qwen3" : "llama", spec.wtype < 0 ? "mix" : qsp_dtype_name(spec.wtype),
                what.c_str());
    const Logits ref = run(cpu, tokens, {uint32_t(tokens.size())});
    const Logits whole = run(gpu, tokens, chunks);
    {
      INFO(what << ", unsplit GPU against the CPU");
      check_close(whole, ref, cpu_tol);
    }
    for (size_t i = 0; i < sharded.size(); ++i) {
      const Logits got = run(sharded[i], tokens, chunks);
      INFO(what << ", " << ns[i] << " shards");
      check_close(got, whole, kTol);
      check_close(got, ref, cpu_tol);
    }
    return ref;
  };
  for (const Prompt& p : prompts(spec, lengths)) {
    clear_all();
    compare(p.what, p.tokens, p.chunks);
  }
  // Decode: a prompt of 17, then the reference's greedy token, step by step
  // (the graph is captured at the second step and replayed at every later
  // position), then a truncate and a step at the old position.
  clear_all();
  Logits ref = compare("prompt of 17 before decoding", random_tokens(17, spec.vocab, spec.seed + 17), {17});
  for (int step = 0; step < 6; ++step) ref = compare("decode step " + std::to_string(step), {ref.greedy}, {1});
  REQUIRE(qsp_kv_truncate(cpu, 18) == QSP_OK);
  REQUIRE(qsp_kv_truncate(gpu, 18) == QSP_OK);
  for (qsp_context* c : sharded) REQUIRE(qsp_kv_truncate(c, 18) == QSP_OK);
  compare("a step after truncating to 18", {int32_t(spec.vocab - 1)}, {1});
  for (qsp_context* c : sharded) qsp_context_destroy(c);
  qsp_context_destroy(gpu);
  qsp_context_destroy(cpu);
}

}  // namespace

TEST_CASE("cuda shard: Qwen3-0.6B layer shapes, Q4_0, 2/4/8 shards on one GPU equal the unsplit model",
          "[gpu][shard]") {
  QSP_REQUIRE_GPU();
  check_shards(make_model(qwen3_06b(QSP_DTYPE_Q4_0, 901)), {1, 3, 17, 100, 513}, 1e-2);
}

TEST_CASE("cuda shard: Qwen3-0.6B layer shapes, Q8_0, shards equal the unsplit model", "[gpu][shard]") {
  QSP_REQUIRE_GPU();
  check_shards(make_model(qwen3_06b(QSP_DTYPE_Q8_0, 902)), {1, 17, 100}, 1e-2);
}

TEST_CASE("cuda shard: Qwen3-8B layer shapes, Q4_0, shards equal the unsplit model", "[gpu][shard]") {
  QSP_REQUIRE_GPU();
  check_shards(make_model(qwen3_8b(QSP_DTYPE_Q4_0, 903)), {3, 100, 257}, 1e-2);
}

TEST_CASE("cuda shard: Llama style, Q4_0 and Q8_0, shards equal the unsplit model", "[gpu][shard]") {
  QSP_REQUIRE_GPU();
  check_shards(make_model(llama(QSP_DTYPE_Q4_0, 904)), {1, 17, 513}, 1e-2);
  check_shards(make_model(llama(QSP_DTYPE_Q8_0, 905)), {3, 100}, 1e-2);
}

TEST_CASE("cuda shard: Q4_K_M-like mix (Q4_K, w_down and LM head Q6_K), shards equal the unsplit model",
          "[gpu][shard][kquant]") {
  QSP_REQUIRE_GPU();
  // 0.6B shapes: w_down's 3072 columns over 8 shards are 384, not whole
  // super-blocks, so the mix runs on the 8B shapes (12288 / 8 = 1536).
  ModelSpec s = qwen3_8b(QSP_DTYPE_Q4_K, 906);
  TestModel m = make_model(s);
  retype(m, [](uint32_t, LayerSlot t) { return t == kWDown ? QSP_DTYPE_Q6_K : QSP_DTYPE_Q4_K; }, QSP_DTYPE_Q4_K,
         QSP_DTYPE_Q6_K);
  check_shards(m, {1, 17, 100}, kTol);
}

// qsp_prefill_batch over sharded contexts: one pass whose attention reads
// each shard's part of each owner's cache, against the same pieces run one
// context at a time (the sharded contexts' twins), prompts and decode steps
// mixed, then the same steps checked against unsplit contexts.
TEST_CASE("cuda shard: batched passes of sharded contexts follow one context at a time", "[gpu][shard][batch]") {
  QSP_REQUIRE_GPU();
  ModelSpec spec = qwen3_06b(QSP_DTYPE_Q4_0, 907);
  spec.vocab = 32000;
  spec.tied = false;
  for (uint32_t n : {2u, 8u}) {
    TestModel m = make_model(spec);
    m.params.n_devices = n;
    m.params.device_mask = 0x1;
    BatchWorld w(m, QSP_BACKEND_CUDA, 5, 1200, kTol);
    std::mt19937_64 rng(n);
    for (int step = 0; step < 6; ++step) {
      std::vector<Piece> pieces;
      for (uint32_t slot = 0; slot < w.slots(); ++slot) {
        if (rng() % 4 == 0) continue;  // this one sits the step out
        const uint32_t len = step == 0 || rng() % 3 == 0 ? 1 + uint32_t(rng() % 150) : 1;
        pieces.push_back(random_piece(m, slot, len, rng));
      }
      if (pieces.empty()) pieces.push_back(random_piece(m, 0, 7, rng));
      w.step(pieces);
    }
    std::printf("  %u shards: worst rel L2 batch against single %.3e\n", n, w.worst());
  }
}

// The weight cache keeps a sharded context's cut matrices apart from the
// plain tensors of the same handles, and shares everything it does not cut
// (norms, the embedding) with unsplit contexts; a handle still names one
// tensor across both forms.
TEST_CASE("cuda shard: sharded and unsplit contexts share the weight cache where the forms agree",
          "[gpu][shard][cache]") {
  QSP_REQUIRE_GPU();
  ModelSpec spec = qwen3_06b(QSP_DTYPE_Q4_0, 908);
  spec.vocab = 32000;
  spec.handle_base = 0x5C00000000000000ull;
  const TestModel m = make_model(spec);
  const qsp_cache_stats before = cache_stats(QSP_BACKEND_CUDA);
  qsp_context* plain = m.create(QSP_BACKEND_CUDA);
  REQUIRE(plain);
  const qsp_cache_stats one = cache_stats(QSP_BACKEND_CUDA);
  // Per layer 11 tensors (2 of them Qwen3's q/k norms), the embedding (tied:
  // also the LM head) and the output norm.
  const uint64_t per_model = 11ull * spec.n_layers + 2;
  CHECK(one.n_tensors - before.n_tensors == per_model);
  qsp_context* two = create_sharded(m, 2);
  const qsp_cache_stats second = cache_stats(QSP_BACKEND_CUDA);
  // New: the cut matrices (wq wk wv wo w_gate w_up w_down per layer) and the
  // LM head's cut of the embedding's handle; the rest were hits.
  CHECK(second.n_tensors - one.n_tensors == 7ull * spec.n_layers + 1);
  qsp_context* two_again = create_sharded(m, 2);
  const qsp_cache_stats third = cache_stats(QSP_BACKEND_CUDA);
  CHECK(third.n_tensors == second.n_tensors);
  CHECK(third.n_uploads == second.n_uploads);
  const std::vector<int32_t> t = random_tokens(40, spec.vocab, 5);
  const Logits a = run(plain, t, {40}), b = run(two, t, {40}), c = run(two_again, t, {40});
  check_close(b, a, kTol);
  CHECK(bit_equal(b.v, c.v));
  // A handle of the unsplit model given as another shape to a sharded
  // context is a conflict, though that context's variant of it is new.
  qsp_context* four = nullptr;
  {
    qsp_context_params p = m.params;
    p.backend = QSP_BACKEND_CUDA;
    p.n_devices = 4;
    p.device_mask = 0x1;
    REQUIRE(qsp_context_create(&p, &four) == QSP_OK);
  }
  qsp_layer_weights lw = m.layer_weights(0);
  lw.wq.dtype = QSP_DTYPE_Q8_0;  // wq's handle as another dtype
  lw.wq.n_bytes = qsp_dtype_size(QSP_DTYPE_Q8_0, lw.wq.n_rows, lw.wq.n_cols);
  std::vector<uint8_t> bytes(lw.wq.n_bytes, 0x11);
  lw.wq.data = bytes.data();
  EXPECT_FAIL(four, QSP_ERR_HANDLE_CONFLICT, "already registered|q8_0|q4_0", qsp_upload_layer(four, 0, &lw));
  qsp_context_destroy(four);
  qsp_context_destroy(two_again);
  qsp_context_destroy(two);
  qsp_context_destroy(plain);
}

namespace {

// Whether the process's NCCL loads; says loudly why not.
bool nccl_loads() {
  try {
    qsp::nccl();
    return true;
  } catch (const qsp::Error& e) {
    std::printf("SKIPPED: NCCL does not load (%s)\n", e.what());
    WARN("SKIPPED: NCCL does not load: " << e.what());
    return false;
  }
}

}  // namespace

// The all-reduce path on one GPU: QSP_NCCL_ONE_RANK=1 gives the one rank of
// a context a communicator, so each block ends in an NCCL all-reduce of one
// rank (the residual as it is), graphs after the first eager chunk. The logits must be
// those of the same split without NCCL, bit for bit (the same kernels in the
// same order), and the unsplit model's within 2e-3. A library whose
// ncclCommInitAll fails gives a device error naming the call, and nothing
// of the context is left.
TEST_CASE("cuda shard: the NCCL all-reduce path with one rank equals the local sum", "[gpu][shard][nccl]") {
  QSP_REQUIRE_GPU();
  ModelSpec spec = qwen3_06b(QSP_DTYPE_Q4_0, 909);
  spec.vocab = 32000;
  spec.tied = false;
  const TestModel m = make_model(spec);
  {
    ScopedEnv lib("QSP_NCCL_LIBRARY", QSP_FAKE_NCCL);
    ScopedEnv one("QSP_NCCL_ONE_RANK", "1");
    qsp_context_params p = m.params;
    p.backend = QSP_BACKEND_CUDA;
    p.n_devices = 2;
    p.device_mask = 0x1;
    qsp_context* ctx = nullptr;
    EXPECT_FAIL(nullptr, QSP_ERR_DEVICE, "NCCL|ncclCommInitAll", qsp_context_create(&p, &ctx));
    CHECK(ctx == nullptr);
  }
  if (!nccl_loads()) return;
  qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
  REQUIRE(gpu);
  for (uint32_t n : {2u, 4u}) {
    qsp_context* local = create_sharded(m, n);
    qsp_context* reduced = nullptr;
    {
      ScopedEnv one("QSP_NCCL_ONE_RANK", "1");
      reduced = create_sharded(m, n);
    }
    for (uint32_t len : {1u, 17u, 100u}) {
      const std::vector<int32_t> t = random_tokens(len, spec.vocab, 909 + len);
      for (qsp_context* c : {gpu, local, reduced}) REQUIRE(qsp_kv_clear(c) == QSP_OK);
      const Logits whole = run(gpu, t, {len}), a = run(local, t, {len}), b = run(reduced, t, {len});
      INFO(n << " shards, " << len << " tokens");
      CHECK(bit_equal(a.v, b.v));
      CHECK(a.greedy == b.greedy);
      check_close(b, whole, kTol);
    }
    // Decode steps: graphs on both, NCCL's inside them.
    Logits ref = run(local, {7}, {1});
    CHECK(bit_equal(run(reduced, {7}, {1}).v, ref.v));
    for (int step = 0; step < 3; ++step) {
      const Logits a = run(local, {ref.greedy}, {1}), b = run(reduced, {ref.greedy}, {1});
      CHECK(bit_equal(a.v, b.v));
      ref = a;
    }
    qsp_context_destroy(reduced);
    qsp_context_destroy(local);
  }
  qsp_context_destroy(gpu);
}

// The all-reduces overlapped with the other token half's compute
// (QSP_TP_OVERLAP=1; on by default only for ranks on several GPUs): with
// one rank on one GPU the same schedule runs (two halves, the second at
// position past + the first's length, each block's all-reduce on the comm
// stream), so the result must equal the plain NCCL path within the GEMMs'
// reassociation (their plan may tile half a chunk differently): 2e-3, the
// same greedy token; at the threshold (256 tokens), odd lengths, a chunked
// prompt whose chunks both overlap, a repeated length (its graph replay,
// the comm streams forked and joined inside the capture, equals its eager
// run bit for bit), then decode steps (never overlapped) on the caches the
// halves wrote.
TEST_CASE("cuda shard: the all-reduces overlapped with the other half equal the plain NCCL path",
          "[gpu][shard][nccl]") {
  QSP_REQUIRE_GPU();
  ModelSpec spec = qwen3_06b(QSP_DTYPE_Q4_0, 919);
  spec.vocab = 32000;
  spec.tied = false;
  const TestModel m = make_model(spec);
  if (!nccl_loads()) return;
  for (uint32_t n : {2u, 4u}) {
    qsp_context *plain = nullptr, *over = nullptr;
    {
      ScopedEnv one("QSP_NCCL_ONE_RANK", "1");
      ScopedEnv off("QSP_TP_OVERLAP", "0");
      plain = create_sharded(m, n);
    }
    {
      ScopedEnv one("QSP_NCCL_ONE_RANK", "1");
      ScopedEnv on("QSP_TP_OVERLAP", "1");
      over = create_sharded(m, n);
    }
    for (const std::vector<uint32_t>& chunks :
         std::vector<std::vector<uint32_t>>{{256}, {300}, {513}, {1000}, {300, 400}, {513}}) {
      uint32_t len = 0;
      for (uint32_t c : chunks) len += c;
      const std::vector<int32_t> t = random_tokens(len, spec.vocab, 919 + len);
      for (qsp_context* c : {plain, over}) REQUIRE(qsp_kv_clear(c) == QSP_OK);
      const Logits a = run(plain, t, chunks), b = run(over, t, chunks);
      INFO(n << " shards, " << len << " tokens in " << chunks.size() << " chunks");
      check_close(b, a, kTol);
      if (chunks.size() == 1) {  // again: the graph of this length, against its eager run above
        REQUIRE(qsp_kv_clear(over) == QSP_OK);
        CHECK(bit_equal(run(over, t, chunks).v, b.v));
      }
    }
    Logits ra = run(plain, {7}, {1}), rb = run(over, {7}, {1});
    for (int step = 0; step < 3; ++step) {
      INFO(n << " shards, decode step " << step);
      check_close(rb, ra, kTol);
      const int32_t next = ra.greedy;  // both fed the plain path's token
      ra = run(plain, {next}, {1});
      rb = run(over, {next}, {1});
    }
    qsp_context_destroy(over);
    qsp_context_destroy(plain);
  }
}

// The real thing: a shard per GPU, NCCL all-reduces between them, against
// the unsplit model on GPU 0 (<= 2e-3, the same greedy token), for as many
// of 2, 4 and 8 GPUs as the machine has; prompts, chunks, decode steps, and
// qsp_prefill_batch over such contexts (one pass per GPU, against single calls).
TEST_CASE("cuda shard: a shard per GPU through NCCL equals the unsplit model", "[gpu][shard][multigpu]") {
  QSP_REQUIRE_GPU();
  const int gpus = qsp::cuda_device_count();
  if (gpus < 2) {
    std::printf("SKIPPED: %d CUDA device(s); a shard per GPU needs 2 or more\n", gpus);
    WARN("SKIPPED: fewer than 2 CUDA devices");
    return;
  }
  if (!nccl_loads()) return;
  for (const ModelSpec& spec : {qwen3_06b(QSP_DTYPE_Q4_0, 910), llama(QSP_DTYPE_Q8_0, 911)}) {
    const TestModel m = make_model(spec);
    qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
    REQUIRE(gpu);
    for (uint32_t n : {2u, 4u, 8u}) {
      if (int(n) > gpus || spec.n_kv_heads % n != 0) continue;
      qsp_context_params p = m.params;
      p.backend = QSP_BACKEND_CUDA;
      p.n_devices = n;  // devices 0 .. n-1
      qsp_context* tp = nullptr;
      {
        const qsp_status st = qsp_context_create(&p, &tp);
        INFO(qsp_last_error());
        REQUIRE(st == QSP_OK);
      }
      REQUIRE(m.upload(tp) == QSP_OK);
      qsp_context_info info;
      qsp_context_info_init(&info);
      REQUIRE(qsp_context_get_info(tp, &info) == QSP_OK);
      CHECK(std::string(info.device_name).find("shards on devices 0, 1") != std::string::npos);
      for (const Prompt& pr : prompts(spec, {1, 17, 513})) {
        REQUIRE(qsp_kv_clear(gpu) == QSP_OK);
        REQUIRE(qsp_kv_clear(tp) == QSP_OK);
        const Logits whole = run(gpu, pr.tokens, pr.chunks), got = run(tp, pr.tokens, pr.chunks);
        INFO(n << " GPUs, " << pr.what);
        std::printf("  %u GPUs %s\n", n, pr.what.c_str());
        check_close(got, whole, kTol);
      }
      Logits ref = run(gpu, {3}, {1});
      check_close(run(tp, {3}, {1}), ref, kTol);
      for (int step = 0; step < 4; ++step) {
        const Logits g = run(tp, {ref.greedy}, {1});
        ref = run(gpu, {ref.greedy}, {1});
        check_close(g, ref, kTol);
      }
      qsp_context_destroy(tp);
    }
    qsp_context_destroy(gpu);
  }
  // Batches of multi-GPU contexts against single calls.
  TestModel m = make_model(qwen3_06b(QSP_DTYPE_Q4_0, 912));
  m.params.n_devices = 2;
  BatchWorld w(m, QSP_BACKEND_CUDA, 3, 1200, kTol);
  std::mt19937_64 rng(912);
  for (int step = 0; step < 4; ++step) {
    std::vector<Piece> pieces;
    for (uint32_t slot = 0; slot < w.slots(); ++slot)
      pieces.push_back(random_piece(m, slot, step == 0 ? 1 + uint32_t(rng() % 100) : 1, rng));
    w.step(pieces);
  }
}

// The multi-device machinery on one GPU: QSP_TP_LOCAL_RANKS=1 gives every
// shard a rank of its own on the one device (own stream, activations, KV
// part, copies of the replicated weights; rank 0's products added into its
// residual, the others' stored over theirs, the copies summed in rank order
// and copied back: the all-reduce without NCCL). Those are the sums of the
// shards run in turn, in the same order, so the logits must be theirs bit
// for bit; prompts, chunks, embeddings, decode steps, a truncation, and
// qsp_prefill_batch over such contexts (pieces one by one).
TEST_CASE("cuda shard: a rank per shard on one GPU gives the shards in turn bit for bit", "[gpu][shard]") {
  QSP_REQUIRE_GPU();
  for (const ModelSpec& base : {qwen3_06b(QSP_DTYPE_Q4_0, 913), llama(QSP_DTYPE_Q8_0, 914)}) {
    ModelSpec spec = base;
    spec.vocab = 32000;
    spec.tied = false;
    const TestModel m = make_model(spec);
    for (uint32_t n : {2u, 4u}) {
      ScopedEnv poison("QSP_POISON", "1");
      qsp_context* in_turn = create_sharded(m, n);
      const auto create_ranks = [&] {
        ScopedEnv local("QSP_TP_LOCAL_RANKS", "1");
        return create_sharded(m, n);
      };
      qsp_context* ranks = create_ranks();
      qsp_context_info info;
      qsp_context_info_init(&info);
      REQUIRE(qsp_context_get_info(ranks, &info) == QSP_OK);
      CHECK(std::string(info.device_name).find("shards on devices 0, 0") != std::string::npos);
      const auto same = [&](const std::string& what) {
        INFO(n << " shards, " << what);
        const std::vector<float> a = logits_of(in_turn, spec.vocab), b = logits_of(ranks, spec.vocab);
        CHECK(bit_equal(a, b));
        int32_t ga = -1, gb = -2;
        REQUIRE(qsp_greedy_token(in_turn, &ga) == QSP_OK);
        REQUIRE(qsp_greedy_token(ranks, &gb) == QSP_OK);
        CHECK(ga == gb);
        return ga;
      };
      const std::vector<int32_t> t = random_tokens(300, spec.vocab, 913 + n);
      for (uint32_t len : {1u, 17u, 100u}) {
        for (qsp_context* c : {in_turn, ranks}) {
          REQUIRE(qsp_kv_clear(c) == QSP_OK);
          prefill_ok(c, t.data(), len);
        }
        same("prompt of " + std::to_string(len));
      }
      for (qsp_context* c : {in_turn, ranks}) {
        prefill_ok(c, t.data() + 100, 7);
        prefill_ok(c, t.data() + 107, 30);
      }
      int32_t next = same("chunks of 7 and 30 after 100");
      for (int step = 0; step < 4; ++step) {
        for (qsp_context* c : {in_turn, ranks}) prefill_ok(c, &next, 1);
        next = same("decode step " + std::to_string(step));
      }
      std::vector<float> rows;  // tokens 5..8 embedded by hand
      for (uint32_t i = 5; i < 9; ++i)
        rows.insert(rows.end(), m.embd.values.begin() + uint64_t(t[i]) * spec.hidden,
                    m.embd.values.begin() + uint64_t(t[i] + 1) * spec.hidden);
      for (qsp_context* c : {in_turn, ranks}) {
        REQUIRE(qsp_kv_truncate(c, 50) == QSP_OK);
        REQUIRE(qsp_prefill_embeddings(c, rows.data(), 4) == QSP_OK);
      }
      same("4 embeddings after truncating to 50");
      // A batch of two such contexts (the other fresh), against in-turn single calls.
      qsp_context* ranks2 = create_ranks();
      qsp_context* in_turn2 = create_sharded(m, n);
      qsp_batch_seq b[2] = {};
      b[0].ctx = ranks;
      b[0].tokens = t.data() + 200;
      b[0].n_tokens = 1;
      b[1].ctx = ranks2;
      b[1].tokens = t.data() + 210;
      b[1].n_tokens = 23;
      INFO(qsp_last_error());
      REQUIRE(qsp_prefill_batch(b, 2, sizeof b[0]) == QSP_OK);
      prefill_ok(in_turn, t.data() + 200, 1);
      prefill_ok(in_turn2, t.data() + 210, 23);
      same("a batched decode step");
      CHECK(bit_equal(logits_of(in_turn2, spec.vocab), logits_of(ranks2, spec.vocab)));
      for (qsp_context* c : {in_turn, ranks, ranks2, in_turn2}) qsp_context_destroy(c);
    }
  }
}
