// The reference tokenizer's speed on English prose, side by side with qsp's
// bench/bench_tokenize.cpp (same default text, same measure):
//   node bench.mjs [--model qwen3|llama3|DIR] [--text FILE]... [--mb 4]
// The text: the given files, by default the repository's Markdown
// documentation (README.md and docs/*.md, the list bench_tokenize uses),
// repeated up to --mb MB; encode(text, {add_special_tokens: false}) of the
// whole text at once, one warm-up run, then the best of 3. Prints seconds,
// MB/s and tokens/s.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadTokenizer } from "./load.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
let model = "qwen3", mb = 4;
const texts = [];
const args = process.argv.slice(2);
for (let i = 0; i < args.length; ++i) {
  const a = args[i], v = args[i + 1];
  if (v === undefined) throw new Error(`${a} needs a value`);
  if (a === "--model") model = v;
  else if (a === "--text") texts.push(v);
  else if (a === "--mb") mb = Number(v);
  else throw new Error(`unknown argument ${a} (see the comment at the top of bench.mjs)`);
  ++i;
}
if (!texts.length)
  for (const f of ["README.md", "docs/ARCHITECTURE.md", "docs/API.md", "docs/GGUF.md", "docs/RELIABILITY.md",
                   "docs/PACKAGING.md", "docs/CLI.md", "docs/ABI.md"])
    texts.push(join(root, f));
const corpus = texts.map((f) => readFileSync(f, "utf8") + "\n").join("");
let text = "";
while (Buffer.byteLength(text, "utf8") < mb * 1e6) text += corpus;
const bytes = Buffer.byteLength(text, "utf8");

const { tokenizer } = loadTokenizer(model);
let n = tokenizer.encode(text, { add_special_tokens: false }).length;  // warm-up
let best = Infinity;
for (let r = 0; r < 3; ++r) {
  const t0 = process.hrtime.bigint();
  n = tokenizer.encode(text, { add_special_tokens: false }).length;
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(`text: ${(bytes / 1e6).toFixed(2)} MB (${texts.length} files, repeated), ${n} tokens ` +
  `(${(bytes / n).toFixed(2)} bytes/token)`);
console.log(`reference ${model} (@lenml/tokenizers, node ${process.version}), one thread, best of 3: ` +
  `${best.toFixed(3)} s, ${(bytes / 1e6 / best).toFixed(2)} MB/s, ${(n / best).toFixed(0)} tokens/s`);
