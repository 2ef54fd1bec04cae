// qsp — the command-line tool: GGUF models through the public C API.
//
//   qsp                      the demo: prefill 128 random tokens on the built-in tiny model
//   qsp info|prefill|generate|bench|synth|tokenize ...   (qsp COMMAND --help)
//
// Exit codes: 0 success, 1 runtime failure (missing file, bad model, library
// error), 2 usage error. Errors are one line on stderr: "qsp: error: ...".
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: qsp [COMMAND] [ARGS]\n"
               "Prompt prefill of quantized Qwen3 / Llama GGUF models (qsp %s).\n"
               "\n"
               "commands:\n"
               "  info     [MODEL] [--devices LIST]  architecture, shapes, tensor types, memory needed (per device)\n"
               "  prefill  [MODEL] --prompt TEXT | --tokens 1,2,3 | --random N   run a prompt: time, tokens/s, top-K\n"
               "  generate [MODEL] --prompt TEXT [--chat] | --tokens ... [-n N] [--parallel P]  greedy continuation\n"
               "  tokenize MODEL TEXT                            token ids and pieces of TEXT\n"
               "  bench    [MODEL] [-p 512,2048] [--batch N]      prefill throughput table (batched: --batch)\n"
               "  synth    --preset NAME --type q4_0|q8_0 OUT.gguf  write a synthetic model\n"
               "  help [COMMAND]                                 show help\n"
               "\n"
               "Without MODEL, commands run on a built-in tiny model (no file needed).\n"
               "prefill, generate and bench take --devices 0,1 (the model split over those\n"
               "CUDA devices: tensor parallelism) or --shards N (N shards in turn on one device).\n"
               "With no command at all, qsp runs the demo: prefill 128 random tokens on the\n"
               "built-in model and print the backend, time, tokens/s and top-5 tokens.\n"
               "'qsp COMMAND --help' describes each command; --version prints the version.\n",
               qsp_version_string());
}

int dispatch(const std::string& cmd, const std::vector<std::string>& rest) {
  using namespace qsp_cli;
  if (cmd == "info") return cmd_info(rest);
  if (cmd == "prefill") return cmd_prefill(rest, false);
  if (cmd == "generate") return cmd_generate(rest);
  if (cmd == "bench") return cmd_bench(rest);
  if (cmd == "synth") return cmd_synth(rest);
  if (cmd == "tokenize") return cmd_tokenize(rest);
  throw UsageError("unknown command '" + cmd + "' (see 'qsp --help')");
}

int run(int argc, char** argv) {
  using namespace qsp_cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return cmd_prefill({}, true);
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "--help" || cmd == "-h") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") {
    std::printf("qsp %s (ABI %u)\n", qsp_version_string(), qsp_abi_version());
    return 0;
  }
  if (cmd == "help") {
    if (rest.empty()) {
      usage(stdout);
      return 0;
    }
    return dispatch(rest[0], {"--help"});
  }
  if (cmd == "demo") return cmd_prefill(rest, true);
  if (!cmd.empty() && cmd[0] == '-') {
    // Options without a command: the demo with these options (e.g. qsp --backend cpu).
    return cmd_prefill(args, true);
  }
  return dispatch(cmd, rest);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const qsp_cli::UsageError& e) {
    std::fprintf(stderr, "qsp: error: %s\n", e.what());
    return 2;
  } catch (const qsp_cli::RuntimeError& e) {
    std::fprintf(stderr, "qsp: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "qsp: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsp: error: %s\n", e.what());
    return 1;
  }
}
