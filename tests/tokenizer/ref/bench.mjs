// The reference tokenizer's speed on English prose, to put next to qsp's
// bench (bench/bench_tokenize.cpp) on the same text:
//   node bench.mjs [NAME] [FILE...]
// NAME: qwen3 (default) | llama3 | a directory. FILE: the prose (default
// /usr/share/common-licenses/GPL-3 and Apache-2.0, present on every Debian
// system). Prints MB/s of encode(text, {add_special_tokens: false}) over the
// whole text at once (after one warm-up run) and line by line.
import { readFileSync } from "node:fs";
import { loadTokenizer } from "./load.mjs";

const args = process.argv.slice(2);
const name = args[0] ?? "qwen3";
const files = args.length > 1 ? args.slice(1) : ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"];
const { tokenizer } = loadTokenizer(name);
const text = files.map((f) => readFileSync(f, "utf8")).join("\n");
const bytes = Buffer.byteLength(text, "utf8");

function run(fn, minSeconds = 2) {
  fn();  // warm-up (JIT, BPE cache)
  let n = 0;
  const t0 = process.hrtime.bigint();
  let dt = 0;
  while (dt < minSeconds) {
    fn();
    ++n;
    dt = Number(process.hrtime.bigint() - t0) / 1e9;
  }
  return (n * bytes) / dt / 1e6;
}
let nTokens = 0;
const whole = run(() => { nTokens = tokenizer.encode(text, { add_special_tokens: false }).length; });
const lineList = text.split(/(?<=\n)/);
const perLine = run(() => { for (const l of lineList) tokenizer.encode(l, { add_special_tokens: false }); });
console.log(`reference ${name} (@lenml/tokenizers, node ${process.version}): ${files.join(" + ")}: ` +
  `${(bytes / 1e3).toFixed(1)} kB, ${nTokens} tokens`);
console.log(`  whole text: ${whole.toFixed(2)} MB/s; line by line (${lineList.length} lines): ${perLine.toFixed(2)} MB/s`);
