// The C boundary of the tokenizer (include/qsp/qsp_gguf.h, "The tokenizer a
// GGUF file carries"): argument and flag checks, then the work inside one
// guard per call; every failure leaves its message in qsp_gguf_last_error().
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf_api_internal.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using qsp::Error;
using qsp::gguf::set_last_error;
using qsp::tok::Detok;
using qsp::tok::Tokenizer;

struct qsp_tokenizer {
  std::unique_ptr<Tokenizer> t;
};

struct qsp_text_stream {
  Detok detok;
  std::string pending;  // an incomplete UTF-8 sequence held back (0..3 bytes)
};

namespace {

using ull = unsigned long long;

template <class F>
qsp_status guarded(F&& f) {
  std::string msg;
  const qsp_status st = qsp::run_guarded(std::forward<F>(f), &msg);
  return st == QSP_OK ? st : set_last_error(st, msg.c_str());
}

#define TOK_CHECK_PTR(p) \
  do {                   \
    if ((p) == nullptr) return set_last_error(QSP_ERR_INVALID_ARGUMENT, #p " is NULL"); \
  } while (0)

qsp_status bad_flags(const char* fn, uint32_t flags, uint32_t known) {
  char m[160];
  std::snprintf(m, sizeof m, "%s: unknown flags 0x%x (known: 0x%x)", fn, flags & ~known, known);
  return set_last_error(QSP_ERR_INVALID_ARGUMENT, m);
}

qsp_status bad_id(const qsp_tokenizer* t, int32_t id) {
  char m[160];
  std::snprintf(m, sizeof m, "token id %d is out of range: the vocabulary has ids 0..%u", id, t->t->n_vocab() - 1);
  return set_last_error(QSP_ERR_OUT_OF_RANGE, m);
}

bool valid_id(const qsp_tokenizer* t, int32_t id) { return id >= 0 && uint32_t(id) < t->t->n_vocab(); }

// Copies `s` out, or reports the size needed; *len receives the size either way.
qsp_status write_text(const std::string& s, char* buf, uint64_t capacity, uint64_t* len) {
  *len = s.size();
  if (s.size() > capacity) {
    char m[160];
    std::snprintf(m, sizeof m, "the text needs %llu bytes; the buffer holds %llu", ull(s.size()), ull(capacity));
    return set_last_error(QSP_ERR_BUFFER_TOO_SMALL, m);
  }
  if (!s.empty()) std::memcpy(buf, s.data(), s.size());
  return QSP_OK;
}

constexpr uint32_t kTokenizeFlags = QSP_TOKENIZE_ADD_SPECIAL | QSP_TOKENIZE_PARSE_SPECIAL;
constexpr uint32_t kDetokenizeFlags = QSP_DETOKENIZE_SKIP_SPECIAL;

}  // namespace

extern "C" {

void qsp_tokenizer_info_init(qsp_tokenizer_info* info) {
  if (!info) return;
  std::memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

qsp_status qsp_tokenizer_create(const qsp_gguf* g, qsp_tokenizer** out) {
  if (out) *out = nullptr;
  TOK_CHECK_PTR(g);
  TOK_CHECK_PTR(out);
  return guarded([&] {
    std::unique_ptr<qsp_tokenizer> t(new qsp_tokenizer);
    t->t = Tokenizer::load(*qsp::gguf::file_of(g));
    *out = t.release();
  });
}

void qsp_tokenizer_destroy(qsp_tokenizer* t) { delete t; }

qsp_status qsp_tokenizer_get_info(const qsp_tokenizer* t, qsp_tokenizer_info* info) {
  TOK_CHECK_PTR(t);
  TOK_CHECK_PTR(info);
  if (info->struct_size < sizeof(qsp_tokenizer_info) || info->struct_size > (1u << 16)) {
    char m[160];
    std::snprintf(m, sizeof m, "qsp_tokenizer_info.struct_size is %u; expected %zu (use qsp_tokenizer_info_init)",
                  info->struct_size, sizeof(qsp_tokenizer_info));
    return set_last_error(QSP_ERR_STRUCT_SIZE, m);
  }
  const Tokenizer& k = *t->t;
  info->kind = k.kind() == qsp::tok::Kind::kBpe ? QSP_TOKENIZER_BPE : QSP_TOKENIZER_SPM;
  info->n_vocab = k.n_vocab();
  info->bos_id = k.bos();
  info->eos_id = k.eos();
  info->eot_id = k.eot();
  info->add_bos = k.add_bos() && k.bos() >= 0 ? 1 : 0;
  info->add_eos = k.add_eos() && k.eos() >= 0 ? 1 : 0;
  info->max_piece_bytes = k.max_piece_bytes();
  info->model = k.model().c_str();
  info->pre = k.pre().c_str();
  info->chat_template = k.chat_template().c_str();
  info->unicode_version = qsp::tok::unicode_version();
  return QSP_OK;
}

qsp_status qsp_tokenize(const qsp_tokenizer* t, const char* text, uint64_t text_len, uint32_t flags, int32_t* ids,
                        uint64_t capacity, uint64_t* n_ids) {
  TOK_CHECK_PTR(t);
  TOK_CHECK_PTR(n_ids);
  if (!text && text_len > 0) return set_last_error(QSP_ERR_INVALID_ARGUMENT, "text is NULL but text_len > 0");
  if (!ids && capacity > 0) return set_last_error(QSP_ERR_INVALID_ARGUMENT, "ids is NULL but capacity > 0");
  if (flags & ~kTokenizeFlags) return bad_flags("qsp_tokenize", flags, kTokenizeFlags);
  if (text_len > uint64_t(UINT32_MAX))
    return set_last_error(QSP_ERR_INVALID_ARGUMENT, "text_len is above 4 GiB, the most qsp_tokenize takes");
  std::vector<int32_t> out;
  qsp_status st = guarded([&] {
    out.reserve(size_t(text_len / 4 + 4));
    t->t->tokenize(text_len ? text : "", size_t(text_len), flags, &out);
  });
  if (st != QSP_OK) return st;
  *n_ids = out.size();
  if (out.size() > capacity) {
    char m[160];
    std::snprintf(m, sizeof m, "the text is %llu tokens; the buffer holds %llu", ull(out.size()), ull(capacity));
    return set_last_error(QSP_ERR_BUFFER_TOO_SMALL, m);
  }
  if (!out.empty()) std::memcpy(ids, out.data(), out.size() * sizeof(int32_t));
  return QSP_OK;
}

qsp_status qsp_token_piece(const qsp_tokenizer* t, int32_t id, uint32_t flags, char* buf, uint64_t capacity,
                           uint64_t* len) {
  TOK_CHECK_PTR(t);
  TOK_CHECK_PTR(len);
  if (!buf && capacity > 0) return set_last_error(QSP_ERR_INVALID_ARGUMENT, "buf is NULL but capacity > 0");
  if (flags & ~kDetokenizeFlags) return bad_flags("qsp_token_piece", flags, kDetokenizeFlags);
  if (!valid_id(t, id)) return bad_id(t, id);
  static const std::string empty;
  return write_text(t->t->skipped(id, flags) ? empty : t->t->piece(id), buf, capacity, len);
}

qsp_status qsp_detokenize(const qsp_tokenizer* t, const int32_t* ids, uint64_t n_ids, uint32_t flags, char* buf,
                          uint64_t capacity, uint64_t* len) {
  TOK_CHECK_PTR(t);
  TOK_CHECK_PTR(len);
  if (!ids && n_ids > 0) return set_last_error(QSP_ERR_INVALID_ARGUMENT, "ids is NULL but n_ids > 0");
  if (!buf && capacity > 0) return set_last_error(QSP_ERR_INVALID_ARGUMENT, "buf is NULL but capacity > 0");
  if (flags & ~kDetokenizeFlags) return bad_flags("qsp_detokenize", flags, kDetokenizeFlags);
  for (uint64_t i = 0; i < n_ids; ++i)
    if (!valid_id(t, ids[i])) return bad_id(t, ids[i]);
  std::string text;
  const qsp_status st = guarded([&] {
    Detok d;
    d.t = t->t.get();
    d.flags = flags;
    for (uint64_t i = 0; i < n_ids; ++i) d.append(ids[i], &text);
  });
  if (st != QSP_OK) return st;
  return write_text(text, buf, capacity, len);
}

qsp_status qsp_text_stream_create(const qsp_tokenizer* t, uint32_t flags, qsp_text_stream** out) {
  if (out) *out = nullptr;
  TOK_CHECK_PTR(t);
  TOK_CHECK_PTR(out);
  if (flags & ~kDetokenizeFlags) return bad_flags("qsp_text_stream_create", flags, kDetokenizeFlags);
  return guarded([&] {
    std::unique_ptr<qsp_text_stream> s(new qsp_text_stream);
    s->detok.t = t->t.get();
    s->detok.flags = flags;
    *out = s.release();
  });
}

void qsp_text_stream_destroy(qsp_text_stream* s) { delete s; }

qsp_status qsp_text_stream_push(qsp_text_stream* s, int32_t id, char* buf, uint64_t capacity, uint64_t* len) {
  TOK_CHECK_PTR(s);
  TOK_CHECK_PTR(len);
  if (!buf && capacity > 0) return set_last_error(QSP_ERR_INVALID_ARGUMENT, "buf is NULL but capacity > 0");
  const Tokenizer* k = s->detok.t;
  if (id < 0 || uint32_t(id) >= k->n_vocab()) {
    char m[160];
    std::snprintf(m, sizeof m, "token id %d is out of range: the vocabulary has ids 0..%u", id, k->n_vocab() - 1);
    return set_last_error(QSP_ERR_OUT_OF_RANGE, m);
  }
  // Work on copies: on BUFFER_TOO_SMALL (or any failure) the stream is unchanged.
  Detok d = s->detok;
  std::string text;
  const qsp_status st = guarded([&] {
    text = s->pending;
    d.append(id, &text);
  });
  if (st != QSP_OK) return st;
  const size_t hold = qsp::tok::incomplete_utf8_tail(text.data(), text.size());
  *len = text.size() - hold;
  if (*len > capacity) {
    char m[160];
    std::snprintf(m, sizeof m, "the text needs %llu bytes; the buffer holds %llu", ull(*len), ull(capacity));
    return set_last_error(QSP_ERR_BUFFER_TOO_SMALL, m);
  }
  if (*len) std::memcpy(buf, text.data(), size_t(*len));
  s->pending.assign(text, size_t(*len), hold);  // at most 3 bytes: cannot throw past the small-string buffer
  s->detok = d;
  return QSP_OK;
}

qsp_status qsp_text_stream_flush(qsp_text_stream* s, char* buf, uint64_t capacity, uint64_t* len) {
  TOK_CHECK_PTR(s);
  TOK_CHECK_PTR(len);
  if (!buf && capacity > 0) return set_last_error(QSP_ERR_INVALID_ARGUMENT, "buf is NULL but capacity > 0");
  const qsp_status st = write_text(s->pending, buf, capacity, len);
  if (st != QSP_OK) return st;
  s->pending.clear();
  s->detok.started = false;
  return QSP_OK;
}

}  // extern "C"
