// Text in, text out for `qsp`: the model's tokenizer (qsp_tokenizer_* of
// qsp_gguf.h), the prompt options --prompt / --prompt-file / --chat of
// prefill and generate, the streamed text of generate, and `qsp tokenize`.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli.h"

namespace qsp_cli {

// ---- the tokenizer -------------------------------------------------------------
std::unique_ptr<Tokenizer> Tokenizer::try_open(const Model& m) {
  std::unique_ptr<Tokenizer> t(new Tokenizer);
  if (qsp_tokenizer_create(m.gguf(), &t->t_) != QSP_OK) return nullptr;
  qsp_tokenizer_info_init(&t->info_);
  if (qsp_tokenizer_get_info(t->t_, &t->info_) != QSP_OK) return nullptr;
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::open(const Model& m, const std::string& hint) {
  std::unique_ptr<Tokenizer> t(new Tokenizer);
  const qsp_status st = qsp_tokenizer_create(m.gguf(), &t->t_);
  if (st != QSP_OK) {
    const std::string why = qsp_gguf_last_error();
    std::string what = st == QSP_ERR_UNSUPPORTED ? "qsp cannot tokenize text for " : "the tokenizer of ";
    throw RuntimeError(what + m.label() + ": " +
                       (why.empty() ? qsp_status_string(st) : why) + (hint.empty() ? "" : "; " + hint));
  }
  qsp_tokenizer_info_init(&t->info_);
  if (qsp_tokenizer_get_info(t->t_, &t->info_) != QSP_OK) throw RuntimeError(qsp_gguf_last_error());
  return t;
}

Tokenizer::~Tokenizer() { qsp_tokenizer_destroy(t_); }

std::vector<int32_t> Tokenizer::tokenize(const std::string& text, uint32_t flags) const {
  std::vector<int32_t> ids(text.size() + 8);
  uint64_t n = 0;
  qsp_status st = qsp_tokenize(t_, text.data(), text.size(), flags, ids.data(), ids.size(), &n);
  if (st == QSP_ERR_BUFFER_TOO_SMALL) {
    ids.resize(size_t(n));
    st = qsp_tokenize(t_, text.data(), text.size(), flags, ids.data(), ids.size(), &n);
  }
  if (st != QSP_OK) throw RuntimeError(std::string("qsp_tokenize: ") + qsp_gguf_last_error());
  ids.resize(size_t(n));
  return ids;
}

std::string Tokenizer::piece(int32_t id) const {
  std::string s(info_.max_piece_bytes + 4, '\0');
  uint64_t n = 0;
  if (qsp_token_piece(t_, id, 0, &s[0], s.size(), &n) != QSP_OK)
    throw RuntimeError(std::string("qsp_token_piece: ") + qsp_gguf_last_error());
  s.resize(size_t(n));
  return s;
}

std::string Tokenizer::detokenize(const std::vector<int32_t>& ids, uint32_t flags) const {
  uint64_t n = 0;
  qsp_status st = qsp_detokenize(t_, ids.data(), ids.size(), flags, nullptr, 0, &n);
  std::string s(size_t(n), '\0');
  if (st == QSP_ERR_BUFFER_TOO_SMALL) st = qsp_detokenize(t_, ids.data(), ids.size(), flags, &s[0], s.size(), &n);
  if (st != QSP_OK) throw RuntimeError(std::string("qsp_detokenize: ") + qsp_gguf_last_error());
  s.resize(size_t(n));
  return s;
}

TextPrinter::TextPrinter(const Tokenizer& t) : buf_(t.info().max_piece_bytes + 4) {
  if (qsp_text_stream_create(t.get(), QSP_DETOKENIZE_SKIP_SPECIAL, &s_) != QSP_OK)
    throw RuntimeError(std::string("qsp_text_stream_create: ") + qsp_gguf_last_error());
}

TextPrinter::~TextPrinter() { qsp_text_stream_destroy(s_); }

void TextPrinter::push(int32_t id) {
  uint64_t n = 0;
  if (qsp_text_stream_push(s_, id, buf_.data(), buf_.size(), &n) != QSP_OK)
    throw RuntimeError(std::string("qsp_text_stream_push: ") + qsp_gguf_last_error());
  std::fwrite(buf_.data(), 1, size_t(n), stdout);
  std::fflush(stdout);
}

void TextPrinter::finish() {
  uint64_t n = 0;
  if (qsp_text_stream_flush(s_, buf_.data(), buf_.size(), &n) != QSP_OK)
    throw RuntimeError(std::string("qsp_text_stream_flush: ") + qsp_gguf_last_error());
  std::fwrite(buf_.data(), 1, size_t(n), stdout);
  std::fflush(stdout);
}

// ---- chat formats ------------------------------------------------------------------
const char* chat_format_name(ChatFormat f) { return f == ChatFormat::kChatML ? "ChatML" : "Llama 3"; }

ChatFormat chat_format(const Tokenizer& t, const std::string& label) {
  const std::string tmpl = t.info().chat_template ? t.info().chat_template : "";
  if (tmpl.empty())
    throw RuntimeError("--chat: " + label +
                       " has no chat template (tokenizer.chat_template is absent); give the prompt without --chat");
  if (tmpl.find("<|start_header_id|>") != std::string::npos && tmpl.find("<|end_header_id|>") != std::string::npos)
    return ChatFormat::kLlama3;
  if (tmpl.find("<|im_start|>") != std::string::npos) return ChatFormat::kChatML;
  throw RuntimeError("--chat: qsp does not recognise the chat template of " + label +
                     " (it knows ChatML, as in Qwen, and the Llama 3 header format); "
                     "give the prompt without --chat, formatted as the model expects");
}

std::string chat_wrap(ChatFormat f, const Tokenizer& t, const std::string& prompt) {
  if (f == ChatFormat::kChatML) return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n";
  // Llama 3: <|begin_of_text|> is the BOS that QSP_TOKENIZE_ADD_SPECIAL adds
  // when the tokenizer adds one; spelled out otherwise.
  const std::string bos = t.info().add_bos && t.info().bos_id >= 0 ? "" : "<|begin_of_text|>";
  return bos + "<|start_header_id|>user<|end_header_id|>\n\n" + prompt +
         "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
}

// ---- prompts as text -----------------------------------------------------------------
const std::vector<OptionSpec> kTextPromptOptions = {
    {"--prompt", nullptr, true}, {"--prompt-file", nullptr, true}, {"--chat", nullptr, false}};

extern const char* const kTextPromptHelp =
    "  --prompt TEXT      the prompt as text, tokenized with the model's tokenizer (its BOS\n"
    "                     added when the model adds one; special-token spellings such as\n"
    "                     <|im_start|> become those tokens)\n"
    "  --prompt-file F    the same, read from the file F (all of it, as it is)\n"
    "  --chat             wrap the prompt as one user turn of the model's chat format\n"
    "                     (ChatML or Llama 3, recognised from tokenizer.chat_template)\n";

bool has_text_prompt(const ParsedArgs& a) { return a.has("--prompt") || a.has("--prompt-file"); }

namespace {
std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw RuntimeError("cannot open " + path + ": " + std::strerror(errno));
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err) throw RuntimeError("cannot read " + path);
  return s;
}

std::string prompt_text(const ParsedArgs& a) {
  if (a.has("--prompt") && a.has("--prompt-file")) throw UsageError("--prompt and --prompt-file exclude each other");
  return a.has("--prompt") ? a.get("--prompt") : read_file(a.get("--prompt-file"));
}
}  // namespace

std::vector<int32_t> text_prompt_tokens(const ParsedArgs& a, const Model& m) {
  if (a.has("--chat") && !has_text_prompt(a)) throw UsageError("--chat needs the prompt as text: --prompt or --prompt-file");
  std::string text = prompt_text(a);
  std::unique_ptr<Tokenizer> t = Tokenizer::open(m, "give the prompt as token ids with --tokens");
  if (a.has("--chat")) text = chat_wrap(chat_format(*t, m.label()), *t, text);
  std::vector<int32_t> ids = t->tokenize(text, QSP_TOKENIZE_ADD_SPECIAL | QSP_TOKENIZE_PARSE_SPECIAL);
  if (ids.empty()) throw UsageError("the prompt is empty (no tokens)");
  const uint32_t vocab = m.info().vocab_size;
  for (int32_t id : ids)
    if (vocab && uint32_t(id) >= vocab)
      throw RuntimeError(m.label() + ": the tokenizer gave token " + std::to_string(id) +
                         ", outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
  return ids;
}

std::string escape_piece(const std::string& s) {
  std::string out;
  const size_t n = s.size();
  auto hex = [&](unsigned char c) {
    char b[8];
    std::snprintf(b, sizeof b, "\\x%02x", c);
    out += b;
  };
  for (size_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else if (c == '\\') out += "\\\\";
      else if (c == '\'') out += "\\'";
      else if (c < 0x20 || c == 0x7f) hex(c);
      else out += char(c);
      ++i;
      continue;
    }
    // A complete, valid UTF-8 sequence (no overlongs, surrogates or > U+10FFFF) as it is.
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && len >= 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      if (c == 0xe0 && c1 < 0xa0) ok = false;
      if (c == 0xed && c1 >= 0xa0) ok = false;
      if (c == 0xf0 && c1 < 0x90) ok = false;
      if (c == 0xf4 && c1 >= 0x90) ok = false;
    }
    if (ok) {
      // C1 controls (U+0080..U+009F) escaped too.
      if (len == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
        hex(c);
        hex(static_cast<unsigned char>(s[i + 1]));
      } else {
        out.append(s, i, len);
      }
      i += len;
    } else {
      hex(c);
      ++i;
    }
  }
  return out;
}

// ---- qsp tokenize -----------------------------------------------------------------------
int cmd_tokenize(const std::vector<std::string>& argv) {
  const ParsedArgs a = parse_args("tokenize", argv,
                                  {{"--prompt-file", nullptr, true},
                                   {"--no-special", nullptr, false},
                                   {"--parse-special", nullptr, false},
                                   {"--ids-only", nullptr, false},
                                   {"--help", "-h", false}});
  if (a.has("--help")) {
    std::printf(
        "usage: qsp tokenize MODEL TEXT [options]\n"
        "       qsp tokenize MODEL --prompt-file F [options]\n"
        "Tokenizes TEXT with the tokenizer MODEL carries and prints one line per token:\n"
        "its id and its piece in quotes (\\n \\t \\r \\\\ \\' and \\xNN for control bytes and\n"
        "bytes that are not complete UTF-8 on their own). Works on any GGUF with a\n"
        "tokenizer, vocabulary-only files (no tensors) included.\n"
        "  --prompt-file F    tokenize the contents of F instead of TEXT\n"
        "  --no-special       do not add the model's BOS / EOS\n"
        "  --parse-special    text spelling a control token (<|im_start|>) becomes that token\n"
        "                     (default: tokenized as plain text, as llama-tokenize does)\n"
        "  --ids-only         print only the ids, comma-separated on one line (for --tokens)\n"
        "  -h, --help         show this help\n");
    return 0;
  }
  const size_t want = a.has("--prompt-file") ? 1 : 2;
  if (a.positional.size() != want)
    throw UsageError(std::string("'qsp tokenize' takes MODEL and ") + (want == 1 ? "--prompt-file F" : "TEXT") +
                     ", got " + std::to_string(a.positional.size()) + " arguments (see 'qsp tokenize --help')");
  if (a.positional[0].empty()) throw UsageError("'qsp tokenize' needs a MODEL file");
  const std::string text = want == 1 ? read_file(a.get("--prompt-file")) : a.positional[1];
  // qsp_gguf_open + qsp_tokenizer_create only: the model need not be runnable.
  std::unique_ptr<Model> m = Model::open(a.positional[0]);
  std::unique_ptr<Tokenizer> t = Tokenizer::open(*m, "");
  uint32_t flags = 0;
  if (!a.has("--no-special")) flags |= QSP_TOKENIZE_ADD_SPECIAL;
  if (a.has("--parse-special")) flags |= QSP_TOKENIZE_PARSE_SPECIAL;
  const std::vector<int32_t> ids = t->tokenize(text, flags);
  if (a.has("--ids-only")) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
    return 0;
  }
  for (int32_t id : ids) std::printf("%6d '%s'\n", id, escape_piece(t->piece(id)).c_str());
  return 0;
}

}  // namespace qsp_cli
