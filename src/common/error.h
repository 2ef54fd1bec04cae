// Internal error model: engine code throws qsp::Error; the C layer (src/api)
// catches everything and turns it into a status plus a message. Nothing else
// may let an exception reach the C boundary.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <new>
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

// Runs f() and turns what it throws into a status, with the message in
// *message: a qsp::Error keeps its status, bad_alloc is OUT_OF_MEMORY, any
// other exception INTERNAL. Never throws. For C boundaries that keep their own
// last-error slot (the GGUF loader's qsp_gguf_last_error).
template <class F>
qsp_status run_guarded(F&& f, std::string* message) noexcept {
  try {
    try {
      f();
      return QSP_OK;
    } catch (const Error& e) {
      *message = e.what();
      return e.status();
    } catch (const std::bad_alloc&) {
      *message = "host memory allocation failed";
      return QSP_ERR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
      *message = std::string("internal error: ") + e.what();
      return QSP_ERR_INTERNAL;
    } catch (...) {
      *message = "internal error: unknown exception";
      return QSP_ERR_INTERNAL;
    }
  } catch (...) {  // the message itself could not be allocated
    return QSP_ERR_OUT_OF_MEMORY;
  }
}

}  // namespace qsp
