// Internal error model: engine code throws qsp::Error; the C layer (src/api)
// catches everything and turns it into a status plus a message. Nothing else
// may let an exception reach the C boundary.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "qsp/qsp.h"

namespace qsp {

class Error : public std::runtime_error {
 public:
  Error(qsp_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  qsp_status status() const { return status_; }

 private:
  qsp_status status_;
};

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string strprintf(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// Throws Error(status, formatted message) when cond holds.
#define QSP_FAIL_IF(cond, status, ...)                         \
  do {                                                          \
    if (cond) throw ::qsp::Error((status), ::qsp::strprintf(__VA_ARGS__)); \
  } while (0)

}  // namespace qsp
