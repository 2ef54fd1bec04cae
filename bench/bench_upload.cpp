// bench_upload: weight upload throughput, qsp_gguf_upload of a GGUF file in
// the page cache into a fresh CUDA context (the repack to the kernels' layout
// included), as `qsp prefill` loads a model.
//
// Writes a Qwen3-shaped GGUF (random codes with realistic fp16 block scales,
// norms from the synthesizer; the LM head q6_K as llama.cpp writes Q4_0 /
// Q4_K files, --head same: the --type) to --file, or reuses it when it
// exists (--rewrite: write it again); reads it once to warm the page cache;
// then per rep: open the file (a fresh mapping), create a context (not
// timed), time qsp_gguf_upload, destroy the context (its weights go with
// it). Prints per rep the seconds and GB/s (file bytes / seconds) and the
// CUDA backend's own account of upload() (QSP_LOG_DEBUG: device allocation,
// repack, waits for the staging slots, final copies), then the median, then
// the two halves alone: the repack on all cores (kern::repack_weight of
// every matrix into pageable memory) and pinned host-to-device copies of the
// same bytes.
//
// usage: bench_upload [--model 0.6b|8b] [--type q4_0|q8_0|q4_K] [--head same|q6_K]
//                     [--file PATH] [--rewrite] [--reps N] [--no-phases]
#include <cuda_runtime.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_weights.h"
#include "gguf_write/gguf_synth.h"
#include "gguf_write/gguf_writer.h"
#include "kernels/kernels.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"
#include "support/check.h"
#include "support/rng.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}


// Random quantized rows [r0, r1) of a cols-wide matrix: random codes, fp16
// block scales (and mins) at the scale bench_prefill uses (bench_weights.h).
void random_rows(int32_t dtype, uint64_t cols, uint64_t seed, uint64_t r0, uint64_t r1, uint8_t* dst) {
  const bench::BlockScales* bs = nullptr;
  for (const bench::BlockScales& x : bench::kBlockScales)
    if (x.dtype == dtype) bs = &x;
  if (!bs) {
    std::fprintf(stderr, "bench_upload: no random blocks for %s\n", qsp_dtype_name(dtype));
    std::exit(2);
  }
  const size_t n = size_t(qsp_dtype_size(dtype, r1 - r0, cols));
  qsp_test::Rng r(seed ^ (r0 * 0x9E3779B97F4A7C15ull));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = r.next();
    std::memcpy(dst + i, &v, 8);
  }
  for (; i < n; ++i) dst[i] = uint8_t(r.next());
  const float elem_sd = 0.6f / std::sqrt(float(cols));
  for (size_t off = 0; off < n; off += bs->block_bytes) {
    const float jitter = 0.75f + 0.5f * float(r.next() & 0xffff) / 65535.0f;
    const uint16_t h = qsp::fp32_to_fp16(elem_sd * bs->d_per_elem * jitter);
    std::memcpy(dst + off + bs->d_off, &h, 2);
    if (bs->m_off >= 0) std::memcpy(dst + off + bs->m_off, &h, 2);
  }
}

// The synthesizer's metadata and tensor list (qsp synth's), with the LM head
// in `head` (0: as the rest).
void write_model(const std::string& path, const qsp::gguf::SynthPreset& p, int32_t type, int32_t head) {
  using qsp::gguf::SynthTensor;
  std::vector<SynthTensor> ts = qsp::gguf::synth_tensors(p, type, 42);
  for (SynthTensor& t : ts)
    if (head && (t.name == "output.weight" || (p.tied && t.name == "token_embd.weight"))) t.type = head;
  qsp::gguf::Writer w(32, 3);
  const std::string& a = p.arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", "bench_upload " + p.name + " " + qsp_dtype_name(type));
  w.add_u32("general.alignment", 32);
  w.add_u32("general.quantization_version", 2);
  qsp::gguf::add_model_keys(w, p);
  w.add_string("tokenizer.ggml.model", "none");
  for (const SynthTensor& t : ts) {
    if (t.vector)
      w.add_tensor(t.name, t.type, {t.cols});
    else
      w.add_tensor(t.name, t.type, {t.cols, t.rows});
  }
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const double t0 = now_s();
  w.write_file(
      path,
      [&](size_t i, uint64_t r0, uint64_t r1, uint8_t* dst) {
        const SynthTensor& t = ts[i];
        if (t.vector)
          qsp::gguf::synth_rows(t, r0, r1, dst);
        else
          random_rows(t.type, t.cols, t.seed, r0, r1, dst);
      },
      int(hw));
  std::printf("wrote %s (%.2f GB) in %.1f s\n", path.c_str(), double(w.file_size()) / 1e9, now_s() - t0);
}

// Reads the whole file once (page cache).
uint64_t warm(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::vector<char> buf(16 << 20);
  uint64_t n = 0;
  for (ssize_t r; (r = ::read(fd, buf.data(), buf.size())) > 0;) n += uint64_t(r);
  ::close(fd);
  return n;
}

// The CUDA backend's account of its uploads (logged when a context goes).
std::string g_upload_line;
void on_log(int32_t, const char* msg, void*) {
  if (std::strncmp(msg, "CUDA upload:", 12) == 0) g_upload_line = msg;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "8b", type_name = "q4_0", head_name, file;
  int reps = 3;
  bool rewrite = false, phases = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--type" && i + 1 < argc) type_name = argv[++i];
    else if (a == "--head" && i + 1 < argc) head_name = argv[++i];
    else if (a == "--file" && i + 1 < argc) file = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--rewrite") rewrite = true;
    else if (a == "--no-phases") phases = false;
    else {
      std::fprintf(stderr,
                   "usage: %s [--model 0.6b|8b] [--type q4_0|q8_0|q4_K] [--head same|q6_K] [--file PATH] "
                   "[--rewrite] [--reps N] [--no-phases]\n",
                   argv[0]);
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes: a timed-out run keeps them

  const std::string preset_name = model == "0.6b" ? "qwen3-0.6b" : model == "8b" ? "qwen3-8b" : model;
  const qsp::gguf::SynthPreset* preset = qsp::gguf::find_synth_preset(preset_name);
  int32_t type = -1;
  for (int32_t t : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_Q4_K})
    if (strcasecmp(type_name.c_str(), qsp_dtype_name(t)) == 0) type = t;
  if (!preset || type < 0) {
    std::fprintf(stderr, "bench_upload: --model 0.6b|8b, --type q4_0|q8_0|q4_K\n");
    return 2;
  }
  // llama.cpp's LM head for these file types: q6_K (q8_0 files keep q8_0).
  int32_t head = type == QSP_DTYPE_Q8_0 ? 0 : QSP_DTYPE_Q6_K;
  if (!head_name.empty()) head = strcasecmp(head_name.c_str(), "q6_k") == 0 ? QSP_DTYPE_Q6_K : 0;
  if (file.empty())
    file = "/tmp/qsp_bench_upload_" + model + "_" + qsp_dtype_name(type) + (head ? "_head_q6_K" : "") + ".gguf";
  struct stat sb;
  if (rewrite || ::stat(file.c_str(), &sb) != 0) write_model(file, *preset, type, head);
  else std::printf("reusing %s (--rewrite writes it again)\n", file.c_str());
  double t0 = now_s();
  const uint64_t file_bytes = warm(file);
  std::printf("read %.2f GB in %.2f s (page cache warm-up); %u hardware threads\n", file_bytes / 1e9, now_s() - t0,
              std::thread::hardware_concurrency());

  // Without a device only the repack half runs (and says so).
  const bool gpu = qsp_backend_available(QSP_BACKEND_CUDA) != 0;
  if (!gpu) std::printf("SKIPPED: no CUDA device: the upload reps and the copy half\n");
  qsp_set_log_callback(on_log, nullptr, QSP_LOG_DEBUG);
  std::vector<double> secs;
  for (int r = 0; gpu && r < reps; ++r) {
    qsp_gguf* g = nullptr;
    QSP_QK(qsp_gguf_open(file.c_str(), &g));
    qsp_context_params p;
    qsp_context_params_init(&p);
    QSP_QK(qsp_gguf_fill_params(g, &p));
    p.max_seq_len = 256;  // the KV cache is not what is measured
    p.backend = QSP_BACKEND_CUDA;
    qsp_context* ctx = nullptr;
    t0 = now_s();
    QSP_QK(qsp_context_create(&p, &ctx));
    const double create_s = now_s() - t0;
    t0 = now_s();
    QSP_QK(qsp_gguf_upload(g, ctx, nullptr, nullptr));
    const double s = now_s() - t0;
    g_upload_line.clear();
    qsp_context_destroy(ctx);
    qsp_gguf_close(g);
    secs.push_back(s);
    std::printf("rep %d: upload %.3f s = %.2f GB/s (context creation %.3f s)\n", r, s, file_bytes / s / 1e9, create_s);
    if (!g_upload_line.empty()) std::printf("  %s\n", g_upload_line.c_str());
  }
  if (gpu) {
    const double med = median(secs);
    std::printf("median: %.3f s = %.2f GB/s (%s %s, %.2f GB file)\n", med, file_bytes / med / 1e9,
                preset->name.c_str(), qsp_dtype_name(type), file_bytes / 1e9);
  }
  if (!phases) return 0;

  // The halves alone. Repack: every matrix the CUDA backend would repack,
  // kern::repack_weight (all cores, up to 16 threads) into one reused,
  // already touched pageable buffer.
  qsp_gguf* g = nullptr;
  QSP_QK(qsp_gguf_open(file.c_str(), &g));
  const uint64_t nt = qsp_gguf_tensor_count(g);
  std::vector<qsp_gguf_tensor_desc> mats;
  size_t max_out = 0;
  uint64_t in_bytes = 0, out_bytes = 0;
  for (uint64_t i = 0; i < nt; ++i) {
    qsp_gguf_tensor_desc d;
    qsp_gguf_tensor_desc_init(&d);
    QSP_QK(qsp_gguf_tensor_info(g, i, &d));
    if (d.n_dims < 2 || !qsp::kern::format_supported(d.type)) continue;
    mats.push_back(d);
    const size_t o = qsp::kern::dweight_bytes(qsp::kern::format_for(d.type), int64_t(d.n_rows), int64_t(d.n_cols));
    max_out = std::max(max_out, o);
    in_bytes += d.n_bytes;
    out_bytes += o;
  }
  std::vector<uint8_t> out(max_out, 0);
  // Twice: the first pass pays the mapping's page faults (as an upload
  // does), the second runs on mapped pages.
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::pair<int32_t, std::pair<double, double>>> by_type;  // type -> (seconds, bytes)
    t0 = now_s();
    for (const qsp_gguf_tensor_desc& d : mats) {
      const double t1 = now_s();
      qsp::kern::repack_weight(d.type, d.data, int64_t(d.n_rows), int64_t(d.n_cols), out.data());
      auto it = std::find_if(by_type.begin(), by_type.end(), [&](const auto& x) { return x.first == d.type; });
      if (it == by_type.end()) it = by_type.insert(by_type.end(), {d.type, {0.0, 0.0}});
      it->second.first += now_s() - t1;
      it->second.second += double(d.n_bytes);
    }
    const double repack_s = now_s() - t0;
    std::printf("repack alone (%s): %zu matrices, %.2f GB in, %.3f s = %.2f GB/s of file bytes (",
                pass == 0 ? "fresh mapping" : "pages mapped", mats.size(), in_bytes / 1e9, repack_s,
                in_bytes / repack_s / 1e9);
    for (size_t i = 0; i < by_type.size(); ++i)
      std::printf("%s%s %.2f GB/s", i ? ", " : "", qsp_dtype_name(by_type[i].first),
                  by_type[i].second.second / by_type[i].second.first / 1e9);
    std::printf(")\n");
  }
  qsp_gguf_close(g);
  if (!gpu) return 0;

  // Copy: the device bytes from pinned memory in 16 MB pieces (the staging
  // slots' size), each into its own place of a device buffer of that size.
  const size_t piece = size_t(16) << 20;
  void *h = nullptr, *dbuf = nullptr;
  QSP_CK(cudaSetDevice(0));
  QSP_CK(cudaHostAlloc(&h, piece, cudaHostAllocDefault));
  QSP_CK(cudaMalloc(&dbuf, piece));
  std::memset(h, 1, piece);
  QSP_CK(cudaMemcpy(dbuf, h, piece, cudaMemcpyHostToDevice));
  t0 = now_s();
  for (uint64_t done = 0; done < out_bytes; done += piece)
    QSP_CK(cudaMemcpyAsync(dbuf, h, size_t(std::min<uint64_t>(piece, out_bytes - done)), cudaMemcpyHostToDevice, 0));
  QSP_CK(cudaDeviceSynchronize());
  const double copy_s = now_s() - t0;
  std::printf("pinned copy alone: %.2f GB to the device, %.3f s = %.2f GB/s\n", out_bytes / 1e9, copy_s,
              out_bytes / copy_s / 1e9);
  QSP_CK(cudaFree(dbuf));
  QSP_CK(cudaFreeHost(h));
  return 0;
}
