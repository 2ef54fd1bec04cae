#include "common/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace qsp {
namespace {

struct GlobalSink {
  std::mutex mu;
  qsp_log_callback callback = nullptr;
  void* user_data = nullptr;
  int32_t max_level = QSP_LOG_WARN;
};

GlobalSink& global_sink() {
  static GlobalSink* sink = new GlobalSink;  // never destroyed: usable during exit
  return *sink;
}

const char* level_name(int32_t level) {
  switch (level) {
    case QSP_LOG_ERROR: return "error";
    case QSP_LOG_WARN: return "warning";
    case QSP_LOG_INFO: return "info";
    default: return "debug";
  }
}

}  // namespace

void set_global_log_sink(qsp_log_callback cb, void* user_data, int32_t max_level) {
  GlobalSink& g = global_sink();
  std::lock_guard<std::mutex> lock(g.mu);
  g.callback = cb;
  g.user_data = user_data;
  g.max_level = max_level;
}

void log_global(int32_t level, const std::string& message) {
  GlobalSink& g = global_sink();
  qsp_log_callback cb;
  void* ud;
  int32_t max_level;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    cb = g.callback;
    ud = g.user_data;
    max_level = g.max_level;
  }
  if (level > max_level) return;
  if (cb) {
    cb(level, message.c_str(), ud);
  } else if (std::getenv("QSP_LOG")) {
    std::fprintf(stderr, "qsp %s: %s\n", level_name(level), message.c_str());
  }
}

void LogSink::operator()(int32_t level, const std::string& message) const {
  if (callback) {
    if (level <= max_level) callback(level, message.c_str(), user_data);
  } else {
    log_global(level, message);
  }
}

}  // namespace qsp
