#include "cli.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "gguf_write/gguf_synth.h"

namespace qsp_cli {

// ---- arguments -------------------------------------------------------------
std::string ParsedArgs::get(const std::string& name, const std::string& def) const {
  auto it = values.find(name);
  return it == values.end() ? def : it->second;
}

std::vector<std::string> ParsedArgs::get_all(const std::string& name) const {
  auto it = all.find(name);
  return it == all.end() ? std::vector<std::string>{} : it->second;
}

ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& argv,
                      const std::vector<OptionSpec>& specs) {
  ParsedArgs out;
  const std::string see = " (see 'qsp " + command + " --help')";
  bool options_done = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (options_done || a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9')) {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    const size_t eq = a.find('=');
    if (a.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    const OptionSpec* spec = nullptr;
    for (const auto& s : specs)
      if (name == s.name || (s.alias && name == s.alias)) spec = &s;
    if (!spec) throw UsageError("unknown option " + name + " for 'qsp " + command + "'" + see);
    if (spec->takes_value) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw UsageError(std::string(spec->name) + " needs a value" + see);
        value = argv[++i];
      }
    } else if (inline_value) {
      throw UsageError(std::string(spec->name) + " takes no value" + see);
    }
    out.values[spec->name] = value;
    out.all[spec->name].push_back(value);
  }
  return out;
}

uint64_t parse_uint(const std::string& flag, const std::string& s, uint64_t min, uint64_t max) {
  uint64_t v = 0;
  bool ok = !s.empty() && s.size() <= 20;
  for (char c : s) {
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    const uint64_t d = uint64_t(c - '0');
    if (v > (UINT64_MAX - d) / 10) {
      ok = false;
      break;
    }
    v = v * 10 + d;
  }
  if (!ok || v < min || v > max)
    throw UsageError(flag + " expects an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                     "], got '" + s + "'");
  return v;
}

std::vector<uint64_t> parse_uint_list(const std::string& flag, const std::string& s, uint64_t min, uint64_t max) {
  std::vector<uint64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    out.push_back(parse_uint(flag, s.substr(start, comma == std::string::npos ? std::string::npos : comma - start),
                             min, max));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<int32_t> parse_token_list(const std::string& flag, const std::string& s) {
  std::vector<int32_t> out;
  for (uint64_t v : parse_uint_list(flag, s, 0, INT32_MAX)) out.push_back(int32_t(v));
  return out;
}

const std::vector<OptionSpec> kDeviceOptions = {{"--devices", nullptr, true}, {"--shards", nullptr, true}};

const std::vector<OptionSpec> kExecOptions = {
    {"--backend", nullptr, true}, {"--device", nullptr, true}, {"--devices", nullptr, true},
    {"--shards", nullptr, true},  {"--threads", "-t", true},   {"--ctx", "-c", true},
    {"--verbose", "-v", false},
};

std::string DeviceSplit::describe() const {
  const std::string n = std::to_string(shards());
  if (shards() <= 1) return "unsplit on device " + std::to_string(device_index);
  if (one_device) return n + " shards in turn on device " + std::to_string(devices[0]);
  std::string list;
  for (int32_t d : devices) list += (list.empty() ? "" : ", ") + std::to_string(d);
  return n + " shards, one per CUDA device (" + list + ")";
}

DeviceSplit device_split(const ParsedArgs& a) {
  // device_mask has 32 bits: the ordinals a split can name.
  constexpr uint32_t kMaxOrdinal = 31, kMaxShards = 32;
  DeviceSplit d;
  if (a.has("--device") && a.has("--devices"))
    throw UsageError("--device and --devices exclude each other (--devices 1 is --device 1)");
  if (a.has("--device")) d.device_index = int32_t(parse_uint("--device", a.get("--device"), 0, 1024));
  std::vector<int32_t> list;
  if (a.has("--devices")) {
    const std::string s = a.get("--devices");
    const std::string expects =
        "--devices expects comma-separated CUDA device ordinals from 0 to " + std::to_string(kMaxOrdinal) +
        " (e.g. 0,1), got '" + s + "'";
    size_t start = 0;
    while (true) {
      const size_t comma = s.find(',', start);
      const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
        throw UsageError(expects + (item.size() > 1 && item[0] == '-' &&
                                            item.find_first_not_of("0123456789", 1) == std::string::npos
                                        ? ": ordinals are not negative"
                                        : ""));
      const uint64_t v = std::stoull(item);
      if (v > kMaxOrdinal)
        throw UsageError(expects + ": " + item + " is past " + std::to_string(kMaxOrdinal) +
                         " (qsp_context_params.device_mask has 32 bits)");
      if (std::find(list.begin(), list.end(), int32_t(v)) != list.end())
        throw UsageError("--devices " + s + " names device " + item + " twice: one shard per device");
      list.push_back(int32_t(v));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  const uint32_t shards =
      a.has("--shards") ? uint32_t(parse_uint("--shards", a.get("--shards"), 1, kMaxShards)) : 0;
  if (list.size() > 1) {
    // A shard per device, the all-reduces between them.
    if (shards && shards != list.size())
      throw UsageError("--shards " + std::to_string(shards) + " with --devices " + a.get("--devices") +
                       " (" + std::to_string(list.size()) + " devices): give --devices one device (every shard "
                       "in turn on it) or as many devices as shards");
    d.devices = list;
    d.device_index = list[0];
    d.n_devices = uint32_t(list.size());
    for (int32_t v : list) d.device_mask |= 1u << v;
    return d;
  }
  if (!list.empty()) d.device_index = list[0];
  if (!shards) {  // unsplit on one device
    d.devices = {d.device_index};
    return d;
  }
  // --shards N: every shard in turn on one device, a local sum in place of the all-reduce.
  if (uint32_t(d.device_index) > kMaxOrdinal)
    throw UsageError("--shards runs on one device named by a device_mask bit: the device must be 0 to " +
                     std::to_string(kMaxOrdinal) + ", got --device " + std::to_string(d.device_index));
  d.n_devices = shards;
  d.device_mask = 1u << d.device_index;
  d.devices.assign(shards, d.device_index);
  d.one_device = shards > 1;
  return d;
}

ExecOptions exec_options(const ParsedArgs& a) {
  ExecOptions e;
  if (a.has("--backend")) {
    const std::string b = a.get("--backend");
    if (b == "auto") e.backend = QSP_BACKEND_AUTO;
    else if (b == "cpu") e.backend = QSP_BACKEND_CPU;
    else if (b == "cuda") e.backend = QSP_BACKEND_CUDA;
    else throw UsageError("--backend expects auto, cpu or cuda, got '" + b + "'");
  }
  e.split = device_split(a);
  if (a.has("--threads")) e.threads = int32_t(parse_uint("--threads", a.get("--threads"), 0, 4096));
  if (a.has("--ctx")) e.ctx = uint32_t(parse_uint("--ctx", a.get("--ctx"), 1, 1u << 24));
  e.verbose = a.has("--verbose");
  return e;
}

// ---- models ----------------------------------------------------------------
void check(qsp_status st, qsp_context* ctx, const std::string& what) {
  if (st == QSP_OK) return;
  const char* msg = ctx ? qsp_context_last_error(ctx) : qsp_last_error();
  throw RuntimeError(what + ": " + (msg && *msg ? msg : qsp_status_string(st)));
}

std::unique_ptr<Model> Model::open(const std::string& path) {
  std::unique_ptr<Model> m(new Model);
  qsp_status st;
  if (path.empty()) {
    const qsp::gguf::SynthPreset* p = qsp::gguf::find_synth_preset("tiny");
    m->bytes_ = qsp::gguf::synth_memory(*p, QSP_DTYPE_Q4_0, 1, 1);
    m->builtin_ = true;
    m->label_ = "built-in tiny model";
    st = qsp_gguf_open_memory(m->bytes_.data(), m->bytes_.size(), &m->g_);
  } else {
    m->label_ = path;
    st = qsp_gguf_open(path.c_str(), &m->g_);
  }
  if (st != QSP_OK) throw RuntimeError(qsp_gguf_last_error());
  qsp_gguf_info_init(&m->info_);
  if (qsp_gguf_get_info(m->g_, &m->info_) != QSP_OK) throw RuntimeError(qsp_gguf_last_error());
  return m;
}

Model::~Model() { qsp_gguf_close(g_); }

void Model::check_runnable() const {
  qsp_context_params p;
  qsp_context_params_init(&p);
  if (qsp_gguf_fill_params(g_, &p) != QSP_OK) throw RuntimeError(label_ + ": " + qsp_gguf_last_error());
}

std::string Model::summary() const {
  const qsp_gguf_info& i = info_;
  // The dominant matrix type: the type of the most weight bytes.
  std::map<int32_t, uint64_t> by_type;
  for (uint64_t t = 0; t < i.tensor_count; ++t) {
    qsp_gguf_tensor_desc d;
    qsp_gguf_tensor_desc_init(&d);
    if (qsp_gguf_tensor_info(g_, t, &d) == QSP_OK) by_type[d.type] += d.n_bytes;
  }
  int32_t main_type = 0;
  uint64_t best = 0;
  for (const auto& kv : by_type)
    if (kv.second > best) {
      best = kv.second;
      main_type = kv.first;
    }
  char b[512];
  std::snprintf(b, sizeof b, "%s, %u layers, hidden %u, %u/%u heads x %u, ffn %u, vocab %u, %s, %s",
                i.architecture[0] ? i.architecture : "?", i.n_layers, i.hidden_size, i.n_heads, i.n_kv_heads,
                i.head_dim, i.intermediate_size, i.vocab_size, qsp_gguf_type_name(main_type),
                human_bytes(i.weight_bytes).c_str());
  return b;
}

bool computable(int32_t type) { return std::strcmp(qsp_dtype_name(type), "unknown") != 0; }

std::vector<int32_t> computable_types() {
  std::vector<int32_t> r;
  for (int32_t t = 0; t < 256; ++t)  // GGML type ids are small (42 is the newest today)
    if (computable(t)) r.push_back(t);
  return r;
}

namespace {

void log_to_stderr(int32_t level, const char* message, void*) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "qsp: [%s] %s\n", level >= 0 && level <= 3 ? names[level] : "log", message);
}

void upload_progress(uint64_t done, uint64_t total, void* user) {
  static_cast<ProgressBar*>(user)->update(done, total);
}

}  // namespace

qsp_context* Model::create_context(const ExecOptions& e, uint32_t needed, double* upload_seconds) const {
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.backend = e.backend;
  p.device_index = e.split.device_index;
  p.n_devices = e.split.n_devices;
  p.device_mask = e.split.device_mask;
  p.n_threads = e.threads;
  if (e.verbose) {
    p.log_callback = log_to_stderr;
    p.log_level = QSP_LOG_INFO;
  }
  if (e.ctx && e.ctx < needed)
    throw UsageError("--ctx " + std::to_string(e.ctx) + " is less than the " + std::to_string(needed) +
                     " tokens this command needs");
  p.max_seq_len = e.ctx ? e.ctx : needed;
  if (qsp_gguf_fill_params(g_, &p) != QSP_OK) throw RuntimeError(label_ + ": " + qsp_gguf_last_error());
  if (p.max_seq_len < needed)
    throw RuntimeError("this command needs " + std::to_string(needed) + " tokens of context, but the model's "
                       "context length is " + std::to_string(info_.context_length));
  if (e.backend == QSP_BACKEND_CUDA && !qsp_backend_available(QSP_BACKEND_CUDA))
    throw RuntimeError("--backend cuda: no usable CUDA device (or qsp was built without CUDA); try --backend cpu");
  qsp_context* ctx = nullptr;
  // A split the model does not divide (QSP_ERR_SHAPE), or one the backend
  // does not run (QSP_ERR_UNSUPPORTED: several devices on CUDA, for now):
  // the library's message, after what was asked.
  check(qsp_context_create(&p, &ctx), nullptr,
        e.split.shards() > 1 ? "creating the context (" + e.split.describe() + ")" : "creating the context");
  ProgressBar bar("uploading " + label_, 32ull << 20);
  const double t0 = now_seconds();
  if (qsp_gguf_upload(g_, ctx, upload_progress, &bar) != QSP_OK) {
    const std::string msg = qsp_gguf_last_error();
    qsp_context_destroy(ctx);
    throw RuntimeError(label_ + ": " + msg);
  }
  bar.finish();
  if (upload_seconds) *upload_seconds = now_seconds() - t0;
  return ctx;
}

// ---- output ----------------------------------------------------------------
double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string human_bytes(uint64_t n) {
  char b[64];
  const double v = double(n);
  if (n < 1024) std::snprintf(b, sizeof b, "%" PRIu64 " B", n);
  else if (n < (1ull << 20)) std::snprintf(b, sizeof b, "%.1f KiB", v / 1024);
  else if (n < (1ull << 30)) std::snprintf(b, sizeof b, "%.1f MiB", v / (1 << 20));
  else std::snprintf(b, sizeof b, "%.2f GiB", v / (1ull << 30));
  return b;
}

std::string rate(double tokens, double seconds) {
  const double r = seconds > 0 ? tokens / seconds : 0.0;
  char b[64];
  std::snprintf(b, sizeof b, r >= 100 ? "%.0f" : r >= 10 ? "%.1f" : "%.3g", r);
  return b;
}

std::string backend_line(qsp_context* ctx) {
  qsp_context_info info;
  qsp_context_info_init(&info);
  check(qsp_context_get_info(ctx, &info), ctx, "qsp_context_get_info");
  if (info.backend == QSP_BACKEND_CUDA)
    return "CUDA, " + std::string(info.device_name) + " (device " + std::to_string(info.device_index) + ")";
  return info.device_name;  // "CPU (N threads)"

}

std::vector<int32_t> random_tokens(uint32_t n, uint32_t vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t s = seed;
  for (auto& x : t) {
    s += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    x = int32_t((z ^ (z >> 31)) % vocab);
  }
  return t;
}

std::vector<uint32_t> top_k(const float* logits, uint32_t n, uint32_t k) {
  k = std::min(k, n);
  std::vector<uint32_t> idx(n);
  for (uint32_t i = 0; i < n; ++i) idx[i] = i;
  auto key = [&](uint32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](uint32_t a, uint32_t b) {
    const float x = key(a), y = key(b);
    return x > y || (x == y && a < b);
  });
  idx.resize(k);
  return idx;
}

void print_top_k(const float* logits, uint32_t n, uint32_t k, const Tokenizer* t) {
  const std::vector<uint32_t> top = top_k(logits, n, k);
  if (top.empty()) return;
  std::printf("top-%zu next tokens:\n", top.size());
  for (size_t i = 0; i < top.size(); ++i) {
    std::printf("  %2zu. token %6u  logit %+.4f", i + 1, top[i], double(logits[top[i]]));
    if (t && top[i] < t->info().n_vocab) std::printf("  '%s'", escape_piece(t->piece(int32_t(top[i]))).c_str());
    std::printf("\n");
  }
}

ProgressBar::ProgressBar(const std::string& label, uint64_t min_total)
    : label_(label), min_total_(min_total), tty_(isatty(STDERR_FILENO) == 1), t0_(now_seconds()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!tty_ || total < min_total_ || total == 0) return;
  const int permille = int(std::min<uint64_t>(1000, done * 1000 / total));
  if (permille == last_permille_) return;
  last_permille_ = permille;
  constexpr int kWidth = 30;
  const int fill = permille * kWidth / 1000;
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < fill ? '#' : '.';
  bar[kWidth] = 0;
  const double dt = now_seconds() - t0_;
  std::fprintf(stderr, "\r%s [%s] %5.1f%%  %s / %s  %.0f MiB/s\x1b[K", label_.c_str(), bar, permille / 10.0,
               human_bytes(done).c_str(), human_bytes(total).c_str(), dt > 0 ? double(done) / dt / (1 << 20) : 0.0);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\x1b[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace qsp_cli
