// Logging: a per-context sink (from qsp_context_params) falling back to the
// process-wide one (qsp_set_log_callback).
#pragma once

#include <string>

#include "qsp/qsp.h"

namespace qsp {

struct LogSink {
  qsp_log_callback callback = nullptr;  // nullptr: use the process-wide sink
  void* user_data = nullptr;
  int32_t max_level = QSP_LOG_WARN;

  void operator()(int32_t level, const std::string& message) const;
};

void set_global_log_sink(qsp_log_callback cb, void* user_data, int32_t max_level);
void log_global(int32_t level, const std::string& message);

}  // namespace qsp
