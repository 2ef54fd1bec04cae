// What other C-boundary files of libqsp (src/tokenizer/tokenizer_api.cpp)
// need from gguf_api.cpp: the parsed file behind a handle, and the
// thread-local message that qsp_gguf_last_error() returns.
#pragma once

#include "gguf/gguf_reader.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

namespace qsp {
namespace gguf {

// The parsed file of an open handle (never NULL for a handle qsp_gguf_open*
// returned).
const File* file_of(const qsp_gguf* g);
// Sets this thread's qsp_gguf_last_error() message (noexcept); returns st.
qsp_status set_last_error(qsp_status st, const char* msg);

}  // namespace gguf
}  // namespace qsp
