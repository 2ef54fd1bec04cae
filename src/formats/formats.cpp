// The registry of weight formats, generated from format_list.h.
#include <string>

#include "formats/format.h"
#include "formats/format_list.h"
#include "qsp/qsp.h"

namespace qsp {
namespace fmt {

#define QSP_DECLARE_FORMAT(N) extern const Format kFormat##N;
QSP_FORMATS(QSP_DECLARE_FORMAT)
#undef QSP_DECLARE_FORMAT

namespace {
#define QSP_LIST_FORMAT(N) &kFormat##N,
const Format* const kAll[] = {QSP_FORMATS(QSP_LIST_FORMAT) nullptr};
#undef QSP_LIST_FORMAT
}  // namespace

const Format* find(int32_t dtype) {
  for (const Format* const* f = kAll; *f; ++f)
    if ((*f)->dtype == dtype) return *f;
  return nullptr;
}

const Format* const* all() { return kAll; }

const char* names() {
  static const std::string s = [] {
    std::string r;
    for (const Format* const* f = kAll; *f; ++f) r += (r.empty() ? "" : ", ") + std::string((*f)->name);
    return r;
  }();
  return s.c_str();
}

uint64_t tensor_bytes(int32_t dtype, uint64_t rows, uint64_t cols) {
  const Format* f = find(dtype);
  const uint64_t row = f ? f->row_bytes(cols) : 0;
  if (row == 0 || rows == 0 || rows > UINT64_MAX / row) return 0;
  return row * rows;
}

const char* name(int32_t dtype) {
  const Format* f = find(dtype);
  return f ? f->name : "unknown";
}

void dequantize_row(int32_t dtype, const void* src, float* dst, uint64_t n) {
  if (const Format* f = find(dtype)) f->dequantize(src, dst, n);
}

}  // namespace fmt
}  // namespace qsp
