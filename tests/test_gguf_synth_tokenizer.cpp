// qsp synth --tokenizer: a Hugging Face tokenizer.json's vocabulary in the
// tokenizer.ggml.* keys as llama.cpp's converter writes them (hf_tokenizer.h,
// docs/GGUF.md "Tokenizer keys"), on the small tokenizers of
// tests/data/tokenizer/ and on files written here for the edge and error cases;
// the library's tokenizer reads what synth wrote.
#include <catch2/catch.hpp>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf_test_util.h"
#include "gguf_write/gguf_synth.h"
#include "gguf_write/hf_tokenizer.h"

using namespace qsp::gguf;
using gguf_test::Bytes;

namespace {

const std::string kData = QSP_TEST_DATA_DIR "/tokenizer/";

// The metadata of a GGUF image, read with the library's parser.
struct Keys {
  Bytes bytes;
  std::unique_ptr<File> file;
  explicit Keys(Bytes b) : bytes(std::move(b)) { file = File::parse(bytes.data(), bytes.size(), 1); }
  bool has(const std::string& k) const { return file->find_kv(k) != nullptr; }
  std::string str(const std::string& k) const {
    std::string s;
    REQUIRE(file->get_string(k, &s));
    return s;
  }
  uint64_t u(const std::string& k) const {
    uint64_t v = 0;
    REQUIRE(file->get_uint(k, &v));
    return v;
  }
  bool boolean(const std::string& k) const {
    const KeyValue* kv = file->find_kv(k);
    REQUIRE(kv);
    REQUIRE(kv->type == kBool);
    return bytes[kv->offset] != 0;
  }
  std::vector<std::string> strings(const std::string& k) const {
    const KeyValue* kv = file->find_kv(k);
    REQUIRE(kv);
    REQUIRE(kv->type == kArray);
    REQUIRE(kv->array_type == kString);
    std::vector<std::string> out;
    uint64_t o = kv->offset + 12;  // element type (u32), count (u64)
    for (uint64_t i = 0; i < kv->array_count; ++i) {
      uint64_t n;
      std::memcpy(&n, &bytes[o], 8);
      out.emplace_back(reinterpret_cast<const char*>(&bytes[o + 8]), size_t(n));
      o += 8 + n;
    }
    return out;
  }
  std::vector<int32_t> ints(const std::string& k) const {
    const KeyValue* kv = file->find_kv(k);
    REQUIRE(kv);
    REQUIRE(kv->type == kArray);
    REQUIRE(kv->array_type == kInt32);
    std::vector<int32_t> out(size_t(kv->array_count));
    if (!out.empty()) std::memcpy(out.data(), &bytes[kv->offset + 12], out.size() * 4);
    return out;
  }
};

// A synthesized model of the `micro` preset carrying the tokenizer.
Bytes synth_with(const TokenizerKeys& k, bool vocab_only = false) {
  SynthPreset p = *find_synth_preset("micro");
  p.vocab = uint32_t(k.tokens.size());
  SynthExtras x;
  x.tokenizer = &k;
  x.vocab_only = vocab_only;
  return synth_memory(p, QSP_DTYPE_F32, 1, 1, x);
}

std::string write_dir(const std::string& name, const std::string& tokenizer_json, const char* config = nullptr) {
  const std::string dir = gguf_test::tmp().file("tok_" + name);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tokenizer.json";
  gguf_test::write_bytes(path, Bytes(tokenizer_json.begin(), tokenizer_json.end()));
  if (config) gguf_test::write_bytes(dir + "/tokenizer_config.json", Bytes(config, config + std::strlen(config)));
  return path;
}

std::string load_error(const std::string& path) {
  try {
    load_hf_tokenizer(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

const char* const kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";

// A minimal byte-level BPE tokenizer.json with the given pre_tokenizer, model
// and extra top-level members.
std::string tokenizer_json(const std::string& pre, const std::string& model_extra = "",
                           const std::string& merges = R"([["h", "e"]])", const std::string& extra = "") {
  return R"({"version": "1.0", "added_tokens": [{"id": 3, "content": "<|x|>", "special": true}],)"
         R"("normalizer": null, "pre_tokenizer": )" +
         pre + R"(, "decoder": {"type": "ByteLevel"}, )" + extra +
         R"("model": {"type": "BPE", "vocab": {"h": 0, "e": 1, "he": 2}, "merges": )" + merges + model_extra + "}}";
}
std::string qwen_pre() {
  return std::string(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ")") +
         kQwenRegex +
         R"("}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
}

}  // namespace

TEST_CASE("synth tokenizer: a Qwen3-like tokenizer.json with tokenizer_config.json") {
  const TokenizerKeys k = load_hf_tokenizer(kData + "qwen3-mini/tokenizer.json");
  CHECK(k.model == "gpt2");
  CHECK(k.pre == "qwen2");
  CHECK(k.had_config);
  REQUIRE(k.tokens.size() == 26);  // ids 0..25: 19 base, a hole, 6 added
  CHECK(k.n_added == 6);

  const Keys f(synth_with(k));
  CHECK(f.str("general.architecture") == "qwen3");
  CHECK(f.u("qwen3.vocab_size") == 26);
  const TensorInfo* emb = f.file->find_tensor("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->rows() == 26);
  CHECK(f.str("tokenizer.ggml.model") == "gpt2");
  CHECK(f.str("tokenizer.ggml.pre") == "qwen2");
  const std::vector<std::string> tokens = f.strings("tokenizer.ggml.tokens");
  const std::vector<int32_t> types = f.ints("tokenizer.ggml.token_type");
  REQUIRE(tokens.size() == 26);
  REQUIRE(types.size() == 26);
  CHECK(tokens[0] == "h");
  CHECK(tokens[4] == "\xC4\xA0");  // Ġ
  CHECK(tokens[13] == "hello");
  CHECK(tokens[18] == "\xC4\xA0world");
  for (int i = 0; i < 19; ++i) CHECK(types[i] == kTokenNormal);
  CHECK(tokens[19] == "[PAD19]");  // the hole, as the converter fills it
  CHECK(types[19] == kTokenUnused);
  CHECK(tokens[20] == "<|endoftext|>");
  CHECK(types[20] == kTokenControl);
  CHECK(tokens[22] == "<|im_end|>");
  CHECK(types[22] == kTokenControl);
  CHECK(tokens[23] == "<|fim_prefix|>");
  CHECK(types[23] == kTokenControl);  // not special, but looks special (<|...|>)
  CHECK(tokens[24] == "<think>");
  CHECK(types[24] == kTokenUserDefined);
  CHECK(types[25] == kTokenUserDefined);
  const std::vector<std::string> merges = f.strings("tokenizer.ggml.merges");
  REQUIRE(merges.size() == 9);
  CHECK(merges[0] == "h e");
  CHECK(merges[8] == "\xC4\xA0wor ld");
  CHECK_FALSE(f.has("tokenizer.ggml.bos_token_id"));  // bos_token null
  CHECK(f.u("tokenizer.ggml.eos_token_id") == 22);
  CHECK(f.u("tokenizer.ggml.padding_token_id") == 20);
  CHECK(f.u("tokenizer.ggml.eot_token_id") == 22);
  CHECK_FALSE(f.boolean("tokenizer.ggml.add_bos_token"));
  CHECK_FALSE(f.has("tokenizer.ggml.add_eos_token"));
  CHECK(f.str("tokenizer.chat_template").find("<|im_start|>{{ m.role }}") != std::string::npos);

  // The library opens it as any model file.
  auto o = gguf_test::open_mem(f.bytes);
  REQUIRE(o->st == QSP_OK);
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  REQUIRE(qsp_gguf_get_info(o->g, &info) == QSP_OK);
  CHECK(info.vocab_size == 26);
}

TEST_CASE("synth tokenizer: a Llama-3-like tokenizer.json without tokenizer_config.json") {
  const TokenizerKeys k = load_hf_tokenizer(kData + "llama3-mini/tokenizer.json");
  CHECK(k.pre == "llama-bpe");
  CHECK_FALSE(k.had_config);
  REQUIRE(k.tokens.size() == 22);
  const Keys f(synth_with(k));
  CHECK(f.str("tokenizer.ggml.pre") == "llama-bpe");
  const std::vector<int32_t> types = f.ints("tokenizer.ggml.token_type");
  CHECK(types[19] == kTokenControl);
  CHECK(types[21] == kTokenControl);
  CHECK(f.strings("tokenizer.ggml.merges")[8] == "\xC4\xA0wor ld");
  // TemplateProcessing puts <|begin_of_text|> first: BOS, added.
  CHECK(f.u("tokenizer.ggml.bos_token_id") == 19);
  CHECK(f.boolean("tokenizer.ggml.add_bos_token"));
  CHECK_FALSE(f.has("tokenizer.ggml.eos_token_id"));  // nothing names one
  CHECK(f.u("tokenizer.ggml.eot_token_id") == 21);    // <|eot_id|>
  CHECK_FALSE(f.has("tokenizer.chat_template"));
}

TEST_CASE("synth tokenizer: vocabulary-only files and --vocab-size padding") {
  const TokenizerKeys k = load_hf_tokenizer(kData + "qwen3-mini/tokenizer.json");
  const Keys f(synth_with(k, true));
  CHECK(f.file->tensors().empty());
  CHECK(f.strings("tokenizer.ggml.tokens").size() == 26);
  CHECK(f.u("qwen3.vocab_size") == 26);
  CHECK_FALSE(f.has("general.file_type"));
  auto o = gguf_test::open_mem(f.bytes);
  REQUIRE(o->st == QSP_OK);
  CHECK(qsp_gguf_tensor_count(o->g) == 0);

  const TokenizerKeys padded = load_hf_tokenizer(kData + "qwen3-mini/tokenizer.json", 32);
  REQUIRE(padded.tokens.size() == 32);
  for (int i = 26; i < 32; ++i) {
    CHECK(padded.tokens[i] == "[PAD" + std::to_string(i) + "]");
    CHECK(padded.token_type[i] == kTokenUnused);
  }
  CHECK_THROWS_WITH(load_hf_tokenizer(kData + "qwen3-mini/tokenizer.json", 20),
                    Catch::Contains("more than --vocab-size 20"));
  // The preset's vocabulary must be the tokenizer's.
  SynthPreset p = *find_synth_preset("micro");
  SynthExtras x;
  x.tokenizer = &k;
  CHECK_THROWS_AS(synth_writer(p, QSP_DTYPE_F32, 1, nullptr, x), std::invalid_argument);
}

TEST_CASE("synth tokenizer: pre-tokenizer names") {
  CHECK(hf_pre_tokenizer_name(qwen_pre()) == "qwen2");
  CHECK(hf_pre_tokenizer_name(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})") == "gpt-2");
  std::string llama = qwen_pre();
  llama.replace(llama.find("\\\\p{N}|"), 7, "\\\\p{N}{1,3}|");
  CHECK(hf_pre_tokenizer_name(llama) == "llama-bpe");
  std::string other = qwen_pre();
  other.replace(other.find("\\\\p{N}|"), 7, "\\\\p{N}+|");
  CHECK_THROWS_WITH(hf_pre_tokenizer_name(other), Catch::Contains("unknown pre-tokenizer Split regex") &&
                                                      Catch::Contains("qwen2") && Catch::Contains("llama-bpe"));
  CHECK_THROWS_WITH(hf_pre_tokenizer_name(R"({"type": "Metaspace", "replacement": "_"})"),
                    Catch::Contains("not one qsp knows"));
  CHECK_THROWS_WITH(hf_pre_tokenizer_name(R"({"type": "ByteLevel", "add_prefix_space": true})"),
                    Catch::Contains("add_prefix_space"));
  CHECK_THROWS_WITH(hf_pre_tokenizer_name("null"), Catch::Contains("ByteLevel"));
}

TEST_CASE("synth tokenizer: merges in the [a, b] form keep their spaces as U+0120") {
  const std::string p = write_dir("spaced", tokenizer_json(qwen_pre(), "", R"([["h", "e"], ["a b", "c"]])"));
  const TokenizerKeys k = load_hf_tokenizer(p);
  REQUIRE(k.merges.size() == 2);
  CHECK(k.merges[1] == "a\xC4\xA0" "b c");
  CHECK(k.token_type[3] == kTokenControl);
  CHECK(k.add_bos == -1);      // no config, no post-processor: nothing said
  CHECK(k.bos_id == -1);
}

TEST_CASE("synth tokenizer: errors name the file and the problem") {
  CHECK_THAT(load_error(gguf_test::tmp().file("no_such_dir/tokenizer.json")), Catch::Contains("cannot open"));
  CHECK_THAT(load_error(write_dir("badjson", "{\"model\": {")), Catch::Contains("not valid JSON"));
  CHECK_THAT(load_error(write_dir("array", "[1, 2]")), Catch::Contains("not a tokenizer.json"));
  std::string regex = tokenizer_json(qwen_pre());
  regex.replace(regex.find("\\\\p{N}|"), 7, "\\\\d+|");
  const std::string unknown = load_error(write_dir("unknownpre", regex));
  CHECK_THAT(unknown, Catch::Contains("unknown pre-tokenizer") && Catch::Contains("tokenizer.json"));
  CHECK_THAT(load_error(write_dir("wordpiece", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})")),
             Catch::Contains("model type \"WordPiece\" is not supported"));
  CHECK_THAT(load_error(write_dir("fallback", tokenizer_json(qwen_pre(), R"(, "byte_fallback": true)"))),
             Catch::Contains("byte_fallback"));
  CHECK_THAT(load_error(write_dir("nomerges", tokenizer_json(qwen_pre(), "", "[]"))),
             Catch::Contains("merges is empty"));
  CHECK_THAT(load_error(write_dir("badmerge", tokenizer_json(qwen_pre(), "", "[[1, 2]]"))),
             Catch::Contains("neither"));
  std::string lower = tokenizer_json(qwen_pre());
  lower.replace(lower.find("\"normalizer\": null"), 18, "\"normalizer\": {\"type\": \"Lowercase\"}");
  CHECK_THAT(load_error(write_dir("lowercase", lower)), Catch::Contains("normalizer"));
  CHECK_THAT(load_error(write_dir("badtype", R"({"model": {"type": 5}})")),
             Catch::Contains("unexpected structure") && Catch::Contains("tokenizer.json"));
  CHECK_THAT(load_error(write_dir("badvocab", tokenizer_json(qwen_pre()).replace(
                                                  tokenizer_json(qwen_pre()).find("\"h\": 0"), 6, "\"h\": \"x\""))),
             Catch::Contains("not an integer"));
  CHECK_THROWS_WITH(hf_pre_tokenizer_name(R"({"type": "Split", "pattern": {"Regex": 1}})"), Catch::Contains("Regex"));
  CHECK_THAT(load_error(write_dir("badconfig", tokenizer_json(qwen_pre()), "{nope")),
             Catch::Contains("tokenizer_config.json") && Catch::Contains("not valid JSON"));
}

TEST_CASE("synth tokenizer: the library tokenizes with what synth wrote") {
  struct Tok {
    qsp_tokenizer* t = nullptr;
    ~Tok() { qsp_tokenizer_destroy(t); }
  };
  auto tokenize = [](const qsp_tokenizer* t, const std::string& s, uint32_t flags) {
    std::vector<int32_t> ids(s.size() + 4);
    uint64_t n = 0;
    REQUIRE(qsp_tokenize(t, s.data(), s.size(), flags, ids.data(), ids.size(), &n) == QSP_OK);
    ids.resize(size_t(n));
    return ids;
  };
  {
    const Bytes b = synth_with(load_hf_tokenizer(kData + "qwen3-mini/tokenizer.json"), true);
    auto o = gguf_test::open_mem(b);
    REQUIRE(o->st == QSP_OK);
    Tok t;
    REQUIRE(qsp_tokenizer_create(o->g, &t.t) == QSP_OK);
    qsp_tokenizer_info info;
    qsp_tokenizer_info_init(&info);
    REQUIRE(qsp_tokenizer_get_info(t.t, &info) == QSP_OK);
    CHECK(info.kind == QSP_TOKENIZER_BPE);
    CHECK(info.n_vocab == 26);
    CHECK(std::string(info.pre) == "qwen2");
    CHECK(info.bos_id == -1);
    CHECK(info.eos_id == 22);
    CHECK(info.eot_id == 22);
    CHECK(info.add_bos == 0);
    CHECK(std::string(info.chat_template).find("<|im_start|>") != std::string::npos);
    CHECK(tokenize(t.t, "hello world", 0) == std::vector<int32_t>{13, 18});
    CHECK(tokenize(t.t, "hello world", QSP_TOKENIZE_ADD_SPECIAL) == std::vector<int32_t>{13, 18});
    CHECK(tokenize(t.t, "<|im_start|>hello<|im_end|>", QSP_TOKENIZE_PARSE_SPECIAL) ==
          std::vector<int32_t>{21, 13, 22});
    CHECK(tokenize(t.t, "<think>hello</think>", 0) == std::vector<int32_t>{24, 13, 25});  // user-defined: always
    const int32_t ids[] = {13, 18};
    char buf[32];
    uint64_t len = 0;
    REQUIRE(qsp_detokenize(t.t, ids, 2, 0, buf, sizeof buf, &len) == QSP_OK);
    CHECK(std::string(buf, size_t(len)) == "hello world");
  }
  {
    const Bytes b = synth_with(load_hf_tokenizer(kData + "llama3-mini/tokenizer.json"), true);
    auto o = gguf_test::open_mem(b);
    REQUIRE(o->st == QSP_OK);
    Tok t;
    REQUIRE(qsp_tokenizer_create(o->g, &t.t) == QSP_OK);
    qsp_tokenizer_info info;
    qsp_tokenizer_info_init(&info);
    REQUIRE(qsp_tokenizer_get_info(t.t, &info) == QSP_OK);
    CHECK(std::string(info.pre) == "llama-bpe");
    CHECK(info.bos_id == 19);
    CHECK(info.add_bos == 1);
    CHECK(info.eot_id == 21);
    CHECK(tokenize(t.t, "hello world", QSP_TOKENIZE_ADD_SPECIAL) == std::vector<int32_t>{19, 13, 18});
  }
}
