#include "gguf_write/hf_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace qsp {
namespace gguf {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::runtime_error(file + ": " + what);
}

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(path, "read error");
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail(path, std::string("not valid JSON: ") + e.what());
  }
}

// The pre-tokenizers' Split regexes, as tokenizer.json spells them.
// Qwen2 / Qwen2.5 / Qwen3: single digits.
const char* const kQwen2Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Llama 3 / 3.1 / 3.2: digit groups of up to three.
const char* const kLlama3Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// GPT-2's own (what ByteLevel with use_regex applies).
const char* const kGpt2Regex = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

std::string brief(const json& j) {
  std::string s = j.dump();
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

// tokenizer.ggml.pre from a pre_tokenizer object; "" with *why set when unknown.
std::string pre_name(const json& pt, std::string* why) {
  if (!pt.is_object()) {
    *why = "pre_tokenizer is " + brief(pt) + " (byte-level BPE needs a ByteLevel pre-tokenizer)";
    return "";
  }
  std::vector<json> steps;
  if (pt.value("type", "") == "Sequence") {
    const json& list = pt.contains("pretokenizers") ? pt["pretokenizers"] : json();
    if (!list.is_array()) {
      *why = "pre_tokenizer Sequence without a pretokenizers list";
      return "";
    }
    for (const json& s : list) steps.push_back(s);
  } else {
    steps.push_back(pt);
  }
  std::string split_regex;
  bool have_split = false, have_bytelevel = false, bytelevel_regex = false;
  for (const json& s : steps) {
    const std::string type = s.is_object() ? s.value("type", "") : "";
    if (type == "Split") {
      if (have_split) {
        *why = "more than one Split in the pre_tokenizer";
        return "";
      }
      have_split = true;
      const json pat = s.value("pattern", json::object());
      if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string()) {
        *why = "a Split pre-tokenizer without a Regex pattern: " + brief(s);
        return "";
      }
      if (s.value("behavior", "") != "Isolated" || s.value("invert", false)) {
        *why = "a Split pre-tokenizer that is not behavior Isolated, invert false: " + brief(s);
        return "";
      }
      split_regex = pat["Regex"].get<std::string>();
    } else if (type == "ByteLevel") {
      if (have_bytelevel) {
        *why = "more than one ByteLevel in the pre_tokenizer";
        return "";
      }
      have_bytelevel = true;
      if (s.value("add_prefix_space", false)) {
        *why = "ByteLevel with add_prefix_space true (no GGUF BPE pre-tokenizer adds a space)";
        return "";
      }
      bytelevel_regex = s.value("use_regex", true);
    } else {
      *why = "pre-tokenizer step " + brief(s) + " is not one qsp knows";
      return "";
    }
  }
  if (!have_bytelevel) {
    *why = "no ByteLevel step in the pre_tokenizer (not a byte-level BPE tokenizer)";
    return "";
  }
  if (have_split && bytelevel_regex) {
    *why = "a Split followed by a ByteLevel that applies GPT-2's regex as well";
    return "";
  }
  if (!have_split) return "gpt-2";  // ByteLevel use_regex: GPT-2's split
  if (split_regex == kQwen2Regex) return "qwen2";
  if (split_regex == kLlama3Regex) return "llama-bpe";
  if (split_regex == kGpt2Regex) return "gpt-2";
  *why = "unknown pre-tokenizer Split regex " + json(split_regex).dump();
  return "";
}

std::string pre_or_fail(const json& pt, const std::string& file) {
  std::string why;
  std::string name = pre_name(pt, &why);
  if (name.empty())
    fail(file, why +
                   "; qsp synth knows the pre-tokenizers qwen2 (the Split regex of Qwen2/Qwen3), "
                   "llama-bpe (Llama 3's) and gpt-2 (ByteLevel with use_regex)");
  return name;
}

// llama.cpp's does_token_look_special (convert_hf_to_gguf.py).
bool looks_special(const std::string& t) {
  auto starts = [&](const char* p) { return t.compare(0, std::strlen(p), p) == 0; };
  auto ends = [&](const char* p) {
    const size_t n = std::strlen(p);
    return t.size() >= n && t.compare(t.size() - n, n, p) == 0;
  };
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts("<|") && ends("|>")) return true;
  if (starts("<\xEF\xBD\x9C") && ends("\xEF\xBD\x9C>")) return true;  // <｜ ... ｜> (deepseek)
  if (starts("<unused") && ends(">")) return true;
  return false;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// A tokenizer_config.json special token entry: "text" or {"content": "text"}.
bool entry_content(const json& e, std::string* out) {
  if (e.is_string()) {
    *out = e.get<std::string>();
    return true;
  }
  if (e.is_object() && e.contains("content") && e["content"].is_string()) {
    *out = e["content"].get<std::string>();
    return true;
  }
  return false;
}

}  // namespace

std::string hf_pre_tokenizer_name(const std::string& pre_tokenizer_json) {
  json pt;
  try {
    pt = json::parse(pre_tokenizer_json);
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("pre_tokenizer: not valid JSON: ") + e.what());
  }
  try {
    return pre_or_fail(pt, "pre_tokenizer");
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("pre_tokenizer: unexpected structure: ") + e.what());
  }
}

namespace {
TokenizerKeys load(const std::string& path, uint32_t vocab_size);
}

TokenizerKeys load_hf_tokenizer(const std::string& path, uint32_t vocab_size) {
  try {
    return load(path, vocab_size);
  } catch (const json::exception& e) {  // a member of an unexpected JSON type
    fail(path, std::string("unexpected structure: ") + e.what());
  }
}

namespace {

TokenizerKeys load(const std::string& path, uint32_t vocab_size) {
  const json tj = read_json(path);
  if (!tj.is_object()) fail(path, "not a tokenizer.json (the top level is not an object)");
  TokenizerKeys k;
  k.source = path;

  // ---- the model: byte-level BPE only ----
  if (!tj.contains("model") || !tj["model"].is_object()) fail(path, "no \"model\" object");
  const json& model = tj["model"];
  const std::string mtype = model.value("type", "");
  if (mtype != "BPE")
    fail(path, "model type \"" + mtype + "\" is not supported (qsp synth writes byte-level BPE vocabularies only)");
  if (model.value("byte_fallback", false))
    fail(path, "a BPE model with byte_fallback (SentencePiece-style) is not supported (only byte-level BPE)");
  if (tj.contains("decoder") && tj["decoder"].is_object() && tj["decoder"].value("type", "") != "ByteLevel")
    fail(path, "decoder " + brief(tj["decoder"]) + " is not ByteLevel (only byte-level BPE is supported)");
  if (tj.contains("normalizer") && !tj["normalizer"].is_null()) {
    const json& n = tj["normalizer"];
    if (!n.is_object() || n.value("type", "") != "NFC")
      fail(path, "normalizer " + brief(n) + " is not supported (none, or NFC as in Qwen)");
  }
  k.pre = pre_or_fail(tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json(), path);

  // ---- the vocabulary: model.vocab, then the added tokens ----
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(path, "model.vocab is not an object");
  std::map<int64_t, std::string> by_id;
  int64_t max_id = -1;
  auto id_of = [&](const json& v, const std::string& what) -> int64_t {
    if (!v.is_number_integer()) fail(path, what + ": the id is not an integer");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= int64_t(INT32_MAX)) fail(path, what + ": id " + std::to_string(id) + " out of range");
    max_id = std::max(max_id, id);
    return id;
  };
  for (const auto& it : model["vocab"].items()) by_id[id_of(it.value(), "vocab entry " + json(it.key()).dump())] = it.key();
  struct Added {
    std::string content;
    bool special;
  };
  std::map<int64_t, Added> added;             // by id
  std::map<std::string, int64_t> added_by_text;  // first id of each content
  if (tj.contains("added_tokens") && !tj["added_tokens"].is_null()) {
    if (!tj["added_tokens"].is_array()) fail(path, "added_tokens is not a list");
    for (const json& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
        fail(path, "added token " + brief(a) + " has no content or id");
      const std::string content = a["content"].get<std::string>();
      const int64_t id = id_of(a["id"], "added token " + json(content).dump());
      by_id[id] = content;
      added[id] = {content, a.value("special", false)};
      added_by_text.emplace(content, id);
    }
  }
  if (max_id < 0) fail(path, "the vocabulary is empty");
  uint64_t n = uint64_t(max_id) + 1;
  if (vocab_size) {
    if (vocab_size < n)
      fail(path, "the vocabulary has ids up to " + std::to_string(max_id) + ", more than --vocab-size " +
                     std::to_string(vocab_size));
    n = vocab_size;
  }
  k.tokens.resize(n);
  k.token_type.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    auto it = by_id.find(int64_t(i));
    if (it == by_id.end()) {  // a hole: the converter's filler
      k.tokens[i] = "[PAD" + std::to_string(i) + "]";
      k.token_type[i] = kTokenUnused;
      continue;
    }
    std::string tok = it->second;
    // get_vocab_base: a token whose text is an added token's is CONTROL when
    // special or when it looks special, USER_DEFINED otherwise (with
    // SentencePiece's U+2581 turned into a space).
    if (added_by_text.count(tok)) {
      auto a = added.find(int64_t(i));
      const bool special = a != added.end() ? a->second.special : added[added_by_text[tok]].special;
      if (special || looks_special(tok)) {
        k.token_type[i] = kTokenControl;
      } else {
        tok = replace_all(tok, "\xE2\x96\x81", " ");
        k.token_type[i] = kTokenUserDefined;
      }
      ++k.n_added;
    } else {
      k.token_type[i] = kTokenNormal;
    }
    k.tokens[i] = std::move(tok);
  }

  // ---- merges: "a b", or [a, b] (transformers >= 4.45) with spaces as U+0120 ----
  if (model.contains("merges") && !model["merges"].is_null()) {
    const json& m = model["merges"];
    if (!m.is_array()) fail(path, "model.merges is not a list");
    k.merges.reserve(m.size());
    for (const json& e : m) {
      if (e.is_string()) {
        k.merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        k.merges.push_back(replace_all(e[0].get<std::string>(), " ", "\xC4\xA0") + " " +
                           replace_all(e[1].get<std::string>(), " ", "\xC4\xA0"));
      } else {
        fail(path, "merge " + brief(e) + " is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  if (k.merges.empty()) fail(path, "model.merges is empty (a BPE vocabulary needs its merges)");

  // ---- special tokens: gguf-py's SpecialVocab ----
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::string config_path = (dir / "tokenizer_config.json").string();
  json cfg;
  std::error_code ec;
  if (std::filesystem::is_regular_file(config_path, ec)) {
    cfg = read_json(config_path);
    if (!cfg.is_object()) fail(config_path, "the top level is not an object");
    k.had_config = true;
  }
  std::string s_bos, s_eos, s_cls, s_sep;
  if (k.had_config) {
    entry_content(cfg.value("bos_token", json()), &s_bos);
    entry_content(cfg.value("eos_token", json()), &s_eos);
    entry_content(cfg.value("cls_token", json()), &s_cls);
    entry_content(cfg.value("sep_token", json()), &s_sep);
    if (s_bos.empty() && !s_cls.empty()) s_bos = s_cls;
    if (s_eos.empty() && !s_sep.empty()) s_eos = s_sep;
  }
  // The post-processor: which specials a plain encode adds around the text.
  bool template_seen = false;
  if (tj.contains("post_processor") && tj["post_processor"].is_object()) {
    const json& pp = tj["post_processor"];
    std::vector<json> procs;
    if (pp.contains("processors") && pp["processors"].is_array())
      for (const json& p : pp["processors"]) procs.push_back(p);
    else
      procs.push_back(pp);
    for (const json& p : procs) {
      if (!p.is_object()) continue;
      const std::string type = p.value("type", "");
      if (type == "RobertaProcessing") {
        k.add_bos = k.add_eos = 1;
        template_seen = true;
      } else if (type == "TemplateProcessing") {
        template_seen = true;
        const json single = p.value("single", json::array());
        if (!single.is_array() || single.size() < 2) continue;
        auto special_id = [](const json& item) -> std::string {
          if (item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].is_object())
            return item["SpecialToken"].value("id", "");
          return "";
        };
        const std::string first = special_id(single.front()), last = special_id(single.back());
        if (!first.empty()) {
          if (!k.had_config) s_bos = first;
          k.add_bos = (first == s_bos || first == s_cls) ? 1 : 0;
        }
        if (!last.empty()) {
          if (!k.had_config) s_eos = last;
          k.add_eos = last == s_eos ? 1 : 0;
        }
      }
    }
  }
  auto added_id = [&](const std::string& text) -> int64_t {
    if (text.empty()) return -1;
    auto it = added_by_text.find(text);
    return it == added_by_text.end() || it->second >= int64_t(n) ? -1 : it->second;
  };
  if (k.had_config) {
    struct Typ {
      const char* name;
      int64_t* id;
      int* add;
    };
    const Typ typs[] = {{"bos", &k.bos_id, &k.add_bos}, {"eos", &k.eos_id, &k.add_eos}, {"unk", &k.unk_id, nullptr},
                        {"sep", &k.sep_id, nullptr},    {"pad", &k.pad_id, nullptr},    {"cls", &k.cls_id, nullptr},
                        {"mask", &k.mask_id, nullptr}};
    for (const Typ& t : typs) {
      const std::string add_key = std::string("add_") + t.name + "_token";
      if (t.add && cfg.contains(add_key) && cfg[add_key].is_boolean()) *t.add = cfg[add_key].get<bool>() ? 1 : 0;
      std::string text;
      const std::string key = std::string(t.name) + "_token";
      if (std::string(t.name) == "bos" && !s_bos.empty())
        text = s_bos;
      else if (std::string(t.name) == "eos" && !s_eos.empty())
        text = s_eos;
      else if (!cfg.contains(key) || !entry_content(cfg[key], &text))
        continue;
      *t.id = added_id(text);
    }
    // The chat template: tokenizer_config.json's, else chat_template.jinja.
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
      k.chat_template = cfg["chat_template"].get<std::string>();
      k.has_chat_template = true;
    } else if (cfg.contains("chat_template") && cfg["chat_template"].is_array()) {
      for (const json& t : cfg["chat_template"])  // named templates: the default one
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
          k.chat_template = t["template"].get<std::string>();
          k.has_chat_template = true;
        }
    }
  } else {
    // No tokenizer_config.json: the converter sets no ids; qsp takes BOS /
    // EOS from the post-processor's template (docs/GGUF.md).
    k.bos_id = added_id(s_bos);
    k.eos_id = added_id(s_eos);
  }
  if (!k.has_chat_template) {
    const std::filesystem::path jinja = dir / "chat_template.jinja";
    if (std::filesystem::is_regular_file(jinja, ec)) {
      std::ifstream in(jinja, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      k.chat_template = ss.str();
      k.has_chat_template = true;
    }
  }
  // Nothing says a BOS is added: the Hugging Face tokenizer adds none, and
  // the file says so (the converter would leave the key out; docs/GGUF.md).
  if (k.add_bos < 0 && (k.had_config || template_seen || tj.contains("post_processor"))) k.add_bos = 0;
  // The end of a turn of the chat formats qsp knows (ChatML, Llama 3).
  k.eot_id = added_id("<|im_end|>");
  if (k.eot_id < 0) k.eot_id = added_id("<|eot_id|>");
  return k;
}

}  // namespace

void add_tokenizer_keys(Writer& w, const TokenizerKeys& k) {
  w.add_string("tokenizer.ggml.model", k.model);
  w.add_string("tokenizer.ggml.pre", k.pre);
  w.add_string_array("tokenizer.ggml.tokens", k.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", k.token_type);
  w.add_string_array("tokenizer.ggml.merges", k.merges);
  const std::pair<const char*, int64_t> ids[] = {
      {"tokenizer.ggml.bos_token_id", k.bos_id},     {"tokenizer.ggml.eos_token_id", k.eos_id},
      {"tokenizer.ggml.unknown_token_id", k.unk_id}, {"tokenizer.ggml.seperator_token_id", k.sep_id},
      {"tokenizer.ggml.padding_token_id", k.pad_id}, {"tokenizer.ggml.cls_token_id", k.cls_id},
      {"tokenizer.ggml.mask_token_id", k.mask_id},   {"tokenizer.ggml.eot_token_id", k.eot_id},
  };
  for (const auto& id : ids)
    if (id.second >= 0) w.add_u32(id.first, uint32_t(id.second));
  if (k.add_bos >= 0) w.add_bool("tokenizer.ggml.add_bos_token", k.add_bos != 0);
  if (k.add_eos >= 0) w.add_bool("tokenizer.ggml.add_eos_token", k.add_eos != 0);
  if (k.has_chat_template) w.add_string("tokenizer.chat_template", k.chat_template);
}

}  // namespace gguf
}  // namespace qsp
