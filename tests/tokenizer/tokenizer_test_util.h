// Helpers of the tokenizer tests (test_tokenizer_*.cpp): the vocabularies of
// tokenizer_vocab.h opened with qsp_gguf_open_memory and turned into a
// qsp_tokenizer, and thin C++ wrappers of the C API that check its
// size-query protocol on every call.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"
#include "tokenizer/tokenizer_vocab.h"

namespace tok_test {

// Creation result: the status, the message, and the tokenizer on success.
struct Made {
  qsp_status st = QSP_OK;
  std::string msg;
  qsp_tokenizer* t = nullptr;
  Made() = default;
  Made(const Made&) = delete;
  ~Made() { qsp_tokenizer_destroy(t); }
};

inline std::unique_ptr<Made> make(const Bytes& file) {
  std::unique_ptr<Made> m(new Made);
  qsp_gguf* g = nullptr;
  REQUIRE(qsp_gguf_open_memory(file.data(), file.size(), &g) == QSP_OK);
  m->st = qsp_tokenizer_create(g, &m->t);
  m->msg = qsp_gguf_last_error();
  qsp_gguf_close(g);  // the tokenizer copies what it needs
  if (m->st != QSP_OK) CHECK(m->t == nullptr);
  return m;
}
inline std::unique_ptr<Made> make(const Vocab& v) { return make(write(v)); }

// qsp_tokenize with a size query first, then an exact buffer.
inline Ids tokenize(const qsp_tokenizer* t, const std::string& text, uint32_t flags = 0) {
  uint64_t n = 0;
  const qsp_status st = qsp_tokenize(t, text.data(), text.size(), flags, nullptr, 0, &n);
  if (n == 0) {
    REQUIRE(st == QSP_OK);
    return {};
  }
  REQUIRE(st == QSP_ERR_BUFFER_TOO_SMALL);
  Ids ids(size_t(n), -7);
  uint64_t n2 = 0;
  REQUIRE(qsp_tokenize(t, text.data(), text.size(), flags, ids.data(), ids.size(), &n2) == QSP_OK);
  REQUIRE(n2 == n);
  return ids;
}

inline std::string detokenize(const qsp_tokenizer* t, const Ids& ids, uint32_t flags = 0) {
  uint64_t n = 0;
  const qsp_status st = qsp_detokenize(t, ids.data(), ids.size(), flags, nullptr, 0, &n);
  if (n == 0) {
    REQUIRE(st == QSP_OK);
    return {};
  }
  REQUIRE(st == QSP_ERR_BUFFER_TOO_SMALL);
  std::string s(size_t(n), '\0');
  uint64_t n2 = 0;
  REQUIRE(qsp_detokenize(t, ids.data(), ids.size(), flags, &s[0], s.size(), &n2) == QSP_OK);
  REQUIRE(n2 == n);
  return s;
}

inline std::string piece(const qsp_tokenizer* t, int32_t id, uint32_t flags = 0) {
  char buf[256];
  uint64_t n = 0;
  REQUIRE(qsp_token_piece(t, id, flags, buf, sizeof buf, &n) == QSP_OK);
  return std::string(buf, size_t(n));
}

// The text of pushing every id into a fresh stream, then flushing; the
// buffer of each push is max_piece_bytes + 4 (the documented bound).
inline std::string stream(const qsp_tokenizer* t, const Ids& ids, uint32_t flags = 0) {
  qsp_tokenizer_info info;
  qsp_tokenizer_info_init(&info);
  REQUIRE(qsp_tokenizer_get_info(t, &info) == QSP_OK);
  qsp_text_stream* s = nullptr;
  REQUIRE(qsp_text_stream_create(t, flags, &s) == QSP_OK);
  std::string out;
  std::vector<char> buf(info.max_piece_bytes + 4);
  for (int32_t id : ids) {
    uint64_t n = 0;
    REQUIRE(qsp_text_stream_push(s, id, buf.data(), buf.size(), &n) == QSP_OK);
    out.append(buf.data(), size_t(n));
  }
  uint64_t n = 0;
  REQUIRE(qsp_text_stream_flush(s, buf.data(), buf.size(), &n) == QSP_OK);
  out.append(buf.data(), size_t(n));
  qsp_text_stream_destroy(s);
  return out;
}

}  // namespace tok_test
