// Writes GGUF files carrying a tokenizer for the CLI tests (tests/cli/cli_test.sh):
// the built-in tiny model (preset "tiny", q4_0, seed 1: the weights of `qsp`
// without MODEL) plus a small byte-level BPE vocabulary of the same size
// (2048), or that vocabulary alone (no tensors). Synthesized models carry no
// tokenizer; the vocabulary comes from the tokenizer unit tests' helpers
// (tests/tokenizer/tokenizer_test_util.h).
//
//   qsp_cli_tok_gguf OUT.gguf [--vocab-only] [--template chatml|llama3|unknown|none] [--eos ID]
//
// The vocabulary: ids 0..255 the bytes; merges spelling "hello", " world",
// "ing"; the control tokens <|endoftext|> (BOS and EOS, BOS not added),
// <|im_start|>, <|im_end|>, <|begin_of_text|>, <|start_header_id|>,
// <|end_header_id|>, <|eot_id|>; then plain tokens "tokN" up to 2048. With
// --template llama3 the BOS is added (add_bos_token), as Llama 3's is.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf_write/gguf_synth.h"
#include "qsp/qsp.h"
#include "tokenizer/tokenizer_vocab.h"

namespace {

const char* kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
const char* kUnknown = "{% for message in messages %}[{{ message['role'] }}] {{ message['content'] }}{% endfor %}";

int usage() {
  std::fprintf(stderr,
               "usage: qsp_cli_tok_gguf OUT.gguf [--vocab-only] [--template chatml|llama3|unknown|none] [--eos ID]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string out = argv[1];
  bool vocab_only = false;
  std::string tmpl = "chatml";
  long eos = -1;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--vocab-only") vocab_only = true;
    else if (a == "--template" && i + 1 < argc) tmpl = argv[++i];
    else if (a == "--eos" && i + 1 < argc) eos = std::strtol(argv[++i], nullptr, 10);
    else return usage();
  }
  const qsp::gguf::SynthPreset* p = qsp::gguf::find_synth_preset("tiny");

  tok_test::Vocab v = tok_test::bpe_vocab({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"},
                                           {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"}, {"i", "n"},
                                           {"in", "g"}});
  const int32_t eot = v.add("<|endoftext|>", 3);
  v.add("<|im_start|>", 3);
  const int32_t im_end = v.add("<|im_end|>", 3);
  v.add("<|begin_of_text|>", 3);
  v.add("<|start_header_id|>", 3);
  v.add("<|end_header_id|>", 3);
  v.add("<|eot_id|>", 3);
  while (v.tokens.size() < p->vocab) v.add("tok" + std::to_string(v.tokens.size()));
  v.bos = eot;
  v.eos = eos >= 0 ? eos : eot;
  v.eot = im_end;
  v.add_bos = 0;
  if (tmpl == "chatml") v.chat_template = kChatML;
  else if (tmpl == "llama3") {
    v.chat_template = kLlama3;
    v.add_bos = 1;  // as Llama 3 does
  }
  else if (tmpl == "unknown") v.chat_template = kUnknown;
  else if (tmpl != "none") return usage();

  // The model's metadata as qsp::gguf::synth_writer writes it, with the
  // tokenizer instead of tokenizer.ggml.model = "none".
  qsp::gguf::Writer w;
  const std::string a = p->arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", vocab_only ? "qsp test vocabulary" : "qsp test tiny model with a tokenizer");
  if (!vocab_only) {
    w.add_u32("general.alignment", 32);
    w.add_u32("general.quantization_version", 2);
    w.add_u32(a + ".block_count", p->n_layers);
    w.add_u32(a + ".context_length", p->context_length);
    w.add_u32(a + ".embedding_length", p->hidden);
    w.add_u32(a + ".feed_forward_length", p->ffn);
    w.add_u32(a + ".attention.head_count", p->n_heads);
    w.add_u32(a + ".attention.head_count_kv", p->n_kv_heads);
    w.add_u32(a + ".attention.key_length", p->head_dim);
    w.add_u32(a + ".attention.value_length", p->head_dim);
    w.add_u32(a + ".rope.dimension_count", p->head_dim);
    w.add_f32(a + ".rope.freq_base", p->rope_theta);
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", p->rms_eps);
    w.add_u32(a + ".vocab_size", p->vocab);
  }
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_raw("tokenizer.ggml.token_type", qsp::gguf::kArray, tok_test::i32_array(v.types));
  w.add_string_array("tokenizer.ggml.merges", v.merges);
  w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
  w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
  w.add_u32("tokenizer.ggml.eot_token_id", uint32_t(v.eot));
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos != 0);
  if (!v.chat_template.empty()) w.add_string("tokenizer.chat_template", v.chat_template);

  std::vector<qsp::gguf::SynthTensor> ts;
  if (!vocab_only) {
    ts = qsp::gguf::synth_tensors(*p, QSP_DTYPE_Q4_0, 1);
    for (const auto& t : ts) {
      if (t.vector) w.add_tensor(t.name, t.type, {t.cols});
      else w.add_tensor(t.name, t.type, {t.cols, t.rows});
    }
  }
  try {
    w.write_file(out, [&](size_t i, uint64_t r0, uint64_t r1, uint8_t* dst) { qsp::gguf::synth_rows(ts[i], r0, r1, dst); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsp_cli_tok_gguf: %s\n", e.what());
    return 1;
  }
  return 0;
}
