// The `qsp` command-line tool: shared pieces of the subcommands (argument
// parsing, model loading through the public API, output helpers).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

namespace qsp_cli {

// Exit code 2: the command line is wrong.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Exit code 1: the command failed (missing file, bad model, library error).
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- arguments -------------------------------------------------------------
struct OptionSpec {
  const char* name;   // "--tokens"
  const char* alias;  // "-n" or nullptr
  bool takes_value;
};

struct ParsedArgs {
  std::map<std::string, std::string> values;  // by long name; flags map to ""; the last one given
  std::map<std::string, std::vector<std::string>> all;  // by long name: every value, in order
  std::vector<std::string> positional;
  bool has(const std::string& name) const { return values.count(name) != 0; }
  std::string get(const std::string& name, const std::string& def = "") const;
  // Every value of an option that may be repeated (--tokens A --tokens B).
  std::vector<std::string> get_all(const std::string& name) const;
};

// Parses argv (after the subcommand) against `specs`; `--name=value` and
// `--name value` both work; "--" ends the options. Throws UsageError.
ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& argv,
                      const std::vector<OptionSpec>& specs);

uint64_t parse_uint(const std::string& flag, const std::string& s, uint64_t min, uint64_t max);
std::vector<int32_t> parse_token_list(const std::string& flag, const std::string& s);
std::vector<uint64_t> parse_uint_list(const std::string& flag, const std::string& s, uint64_t min, uint64_t max);

// Where the model runs, from --device / --devices LIST / --shards N (also
// `qsp info`): the qsp_context_params fields n_devices, device_mask and
// device_index (qsp.h, tensor parallelism). UsageError for a malformed list
// (not numbers, an ordinal outside [0, 31], one given twice), --device with
// --devices, or --shards with a device list of another length.
struct DeviceSplit {
  int32_t device_index = 0;      // --device N, or the one entry of --devices
  uint32_t n_devices = 0;        // 0: unsplit
  uint32_t device_mask = 0;      // the CUDA devices, bit i = ordinal i
  std::vector<int32_t> devices;  // the device of each shard (one entry: unsplit)
  bool one_device = false;       // --shards N: every shard in turn on one device
  uint32_t shards() const { return uint32_t(devices.size()); }
  // "unsplit on device 0", "2 shards, one per CUDA device (0, 1)", "2 shards in turn on device 0"
  std::string describe() const;
};
extern const std::vector<OptionSpec> kDeviceOptions;  // --devices, --shards
extern const char* const kDeviceHelp;
DeviceSplit device_split(const ParsedArgs& a);

// Options of every command that runs a model.
extern const std::vector<OptionSpec> kExecOptions;
struct ExecOptions {
  int32_t backend = QSP_BACKEND_AUTO;
  DeviceSplit split;  // device_index / n_devices / device_mask of the context
  int32_t threads = 0;
  uint32_t ctx = 0;  // 0: what the command needs
  bool verbose = false;
};
ExecOptions exec_options(const ParsedArgs& a);

// ---- models ----------------------------------------------------------------
class Model {
 public:
  // Opens `path`, or the built-in tiny model (synthesized in memory) when path is empty.
  static std::unique_ptr<Model> open(const std::string& path);
  ~Model();

  const qsp_gguf* gguf() const { return g_; }
  const qsp_gguf_info& info() const { return info_; }
  const std::string& label() const { return label_; }
  bool builtin() const { return builtin_; }
  std::string summary() const;  // one line: arch, shape, types, size
  // Throws RuntimeError naming the reason when qsp cannot run the model.
  void check_runnable() const;

  // Creates a context on the chosen backend with room for `needed` tokens and
  // uploads the weights (with a progress bar on a TTY). Prints nothing.
  qsp_context* create_context(const ExecOptions& e, uint32_t needed, double* upload_seconds) const;

 private:
  Model() = default;
  qsp_gguf* g_ = nullptr;
  std::vector<uint8_t> bytes_;  // the built-in model's file image
  qsp_gguf_info info_{};
  std::string label_;
  bool builtin_ = false;
};

// Destroys the context on scope exit.
struct ContextGuard {
  qsp_context* ctx;
  explicit ContextGuard(qsp_context* c) : ctx(c) {}
  ~ContextGuard() { qsp_context_destroy(ctx); }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;
};

// Throws RuntimeError("<what>: <message>") when st is not QSP_OK.
void check(qsp_status st, qsp_context* ctx, const std::string& what);

// ---- tensor types ------------------------------------------------------------
// Whether the library computes a GGML type id: the library's own answer
// (qsp_dtype_name knows exactly the formats of its registry).
bool computable(int32_t type);
// Every type id the library computes, in id order.
std::vector<int32_t> computable_types();

// ---- output ----------------------------------------------------------------
double now_seconds();
std::string human_bytes(uint64_t n);
// tokens/s with a precision that suits the magnitude ("12345", "42.5", "0.386").
std::string rate(double tokens, double seconds);
std::string backend_line(qsp_context* ctx);
std::vector<int32_t> random_tokens(uint32_t n, uint32_t vocab, uint64_t seed);
// Top k ids by logit (descending, lowest id first on ties; NaN last).
std::vector<uint32_t> top_k(const float* logits, uint32_t n, uint32_t k);
class Tokenizer;
// With a tokenizer, each line ends with the token's piece (escape_piece).
void print_top_k(const float* logits, uint32_t n, uint32_t k, const Tokenizer* t = nullptr);

// A progress bar on stderr, drawn only when stderr is a terminal.
class ProgressBar {
 public:
  ProgressBar(const std::string& label, uint64_t min_total);
  ~ProgressBar();
  void update(uint64_t done, uint64_t total);
  void finish();

 private:
  std::string label_;
  uint64_t min_total_;
  bool tty_;
  bool drawn_ = false;
  int last_permille_ = -1;
  double t0_;
};

// ---- Shared by the subcommands (tools/qsp/commands.cpp) ------------------------
// The options of commands that create a context (kExecOptions + --help), and their help.
std::vector<OptionSpec> with_exec(std::vector<OptionSpec> v);
// with_exec(v) plus the prompt's sources: --tokens, --random [--seed] and
// kTextPromptOptions (prefill, generate).
std::vector<OptionSpec> with_prompt_exec(std::vector<OptionSpec> v);
extern const char* const kExecHelp;
// The MODEL argument ("" for the built-in model); UsageError for more than one.
std::string model_arg(const ParsedArgs& a, const std::string& command);
// The prompt of --tokens / --random [--seed].
std::vector<int32_t> prompt_tokens(const ParsedArgs& a, const Model& m, uint32_t default_random);
void print_model(const Model& m);
void print_backend(qsp_context* ctx, const ExecOptions& e);
// Runs the prompt through qsp_prefill, `chunk` tokens per call (0: all at once); seconds.
double run_prefill(qsp_context* ctx, const std::vector<int32_t>& t, uint32_t chunk);

// ---- text (tools/qsp/tokenize_command.cpp) ------------------------------------
// The tokenizer a GGUF file carries (qsp_tokenizer_* of qsp_gguf.h).
class Tokenizer {
 public:
  // The model's tokenizer; throws RuntimeError naming the file and the reason
  // (e.g. "carries no tokenizer") followed by `hint` when it has none qsp can use.
  static std::unique_ptr<Tokenizer> open(const Model& m, const std::string& hint);
  // The tokenizer, or nullptr when the model has none qsp can use.
  static std::unique_ptr<Tokenizer> try_open(const Model& m);
  ~Tokenizer();
  const qsp_tokenizer* get() const { return t_; }
  const qsp_tokenizer_info& info() const { return info_; }
  std::vector<int32_t> tokenize(const std::string& text, uint32_t flags) const;
  std::string piece(int32_t id) const;  // control tokens included
  std::string detokenize(const std::vector<int32_t>& ids, uint32_t flags) const;

 private:
  Tokenizer() = default;
  qsp_tokenizer* t_ = nullptr;
  qsp_tokenizer_info info_{};
};

// Streams generated text to stdout (qsp_text_stream; control tokens skipped).
class TextPrinter {
 public:
  explicit TextPrinter(const Tokenizer& t);
  ~TextPrinter();
  void push(int32_t id);  // prints the text that became complete, flushes stdout
  void finish();          // prints what was held back
 private:
  qsp_text_stream* s_ = nullptr;
  std::vector<char> buf_;
};

// The chat formats recognised from tokenizer.chat_template.
enum class ChatFormat { kChatML, kLlama3 };
// Throws RuntimeError when the template is absent or not one qsp recognises.
ChatFormat chat_format(const Tokenizer& t, const std::string& label);
// One user turn and the start of the assistant's, in `f`. BOS is left to
// QSP_TOKENIZE_ADD_SPECIAL unless the tokenizer does not add one (Llama 3).
std::string chat_wrap(ChatFormat f, const Tokenizer& t, const std::string& prompt);
const char* chat_format_name(ChatFormat f);

// The options --prompt TEXT, --prompt-file F, --chat, and their help.
extern const std::vector<OptionSpec> kTextPromptOptions;
extern const char* const kTextPromptHelp;
bool has_text_prompt(const ParsedArgs& a);
// The ids of --prompt / --prompt-file (with --chat: wrapped), tokenized with
// QSP_TOKENIZE_ADD_SPECIAL | QSP_TOKENIZE_PARSE_SPECIAL. UsageError for --chat
// without a text prompt or both text options.
std::vector<int32_t> text_prompt_tokens(const ParsedArgs& a, const Model& m);
// A piece as a terminal-safe string: printable UTF-8 as it is, \n \t \r \\ \',
// other control bytes and invalid UTF-8 as \xNN.
std::string escape_piece(const std::string& s);

// ---- subcommands -------------------------------------------------------------
int cmd_tokenize(const std::vector<std::string>& argv);
int cmd_info(const std::vector<std::string>& argv);
int cmd_prefill(const std::vector<std::string>& argv, bool demo);
int cmd_generate(const std::vector<std::string>& argv);
int cmd_bench(const std::vector<std::string>& argv);
int cmd_synth(const std::vector<std::string>& argv);

}  // namespace qsp_cli
