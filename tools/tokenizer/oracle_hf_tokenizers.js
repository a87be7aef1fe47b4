#!/usr/bin/env node
// The ids oracle: Hugging Face `tokenizers` 0.23.2 itself (the Rust library, through its npm
// bindings, which ship a prebuilt linux-x64 binary).
//
//   node tools/tokenizer/oracle_hf_tokenizers.js ids       writes tests/fixtures/tokenizer/corpus_expected.jsonl
//                                                          ({"ids": [...], "normalized": NFC of the text} per line)
//   node tools/tokenizer/oracle_hf_tokenizers.js variants  writes tests/fixtures/tokenizer/variants_expected.json
//   node tools/tokenizer/oracle_hf_tokenizers.js bench     HF encode throughput on the corpus (MB/s)
//
// Needs scripts/fetch-tokenizer and `npm install --prefix .cache/node tokenizers@0.23.2`.
"use strict";
const fs = require("fs");
const path = require("path");
const F = require("./fixtures.js");

const { Tokenizer } = require(path.join(F.NODE_MODULES, "tokenizers"));

function load(json) {
  return Tokenizer.fromString(typeof json === "string" ? json : JSON.stringify(json));
}

async function encodeAll(tok, texts) {
  const encodings = await tok.encodeBatch(texts, { addSpecialTokens: true });
  return encodings.map((e) => e.getIds());
}

async function writeIds() {
  const tok = load(fs.readFileSync(path.join(F.TOKENIZER_DIR, "tokenizer.json"), "utf8"));
  const corpus = F.loadCorpus();
  const ids = await encodeAll(tok, corpus);
  let decodeMismatches = 0;
  const rows = [];
  for (let i = 0; i < corpus.length; i++) {
    const normalized = corpus[i].normalize("NFC");
    if ((await tok.decode(ids[i], false)) !== normalized) decodeMismatches++;
    rows.push(JSON.stringify({ ids: ids[i], normalized }));
  }
  fs.writeFileSync(path.join(F.FIXTURES, "corpus_expected.jsonl"), rows.join("\n") + "\n");
  console.log(`wrote HF ids for ${corpus.length} strings; HF decode != NFC(text) for ${decodeMismatches}`);
}

async function writeVariants() {
  const base = JSON.parse(fs.readFileSync(path.join(F.TOKENIZER_DIR, "tokenizer.json"), "utf8"));
  const sample = F.loadCorpus().filter((_, i) => i % F.VARIANT_STRIDE === 0);
  const out = [{ stride: F.VARIANT_STRIDE }];
  for (const v of F.VARIANTS) {
    out.push({ name: v.name, patch: v.patch, ids: await encodeAll(load(F.applyPatch(base, v.patch)), sample) });
  }
  fs.writeFileSync(path.join(F.FIXTURES, "variants_expected.json"), "[\n" + out.map((v) => JSON.stringify(v)).join(",\n") + "\n]\n");
  console.log(`wrote ${F.VARIANTS.length} variants x ${sample.length} strings`);
}

async function bench() {
  const tok = load(fs.readFileSync(path.join(F.TOKENIZER_DIR, "tokenizer.json"), "utf8"));
  const corpus = F.loadCorpus();
  const bytes = corpus.reduce((n, s) => n + Buffer.byteLength(s, "utf8"), 0);
  const rounds = Number(process.env.ROUNDS || 10);
  const result = { peer: "HF tokenizers 0.23.2 (npm bindings)", corpus_bytes: bytes, rounds };
  // One encodeBatch call per round: the per-call binding overhead is paid once per corpus pass.
  for (const [label, parallel] of [["single_thread", "false"], ["all_threads", "true"]]) {
    process.env.TOKENIZERS_PARALLELISM = parallel;
    await tok.encodeBatch(corpus);  // warm-up (BPE cache)
    const t0 = process.hrtime.bigint();
    for (let r = 0; r < rounds; r++) await tok.encodeBatch(corpus);
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    result[label] = { seconds, mb_per_s: (bytes * rounds) / seconds / 1e6 };
  }
  console.log(JSON.stringify(result));
}

const modes = { ids: writeIds, variants: writeVariants, bench };
const mode = modes[process.argv[2]];
if (!mode) {
  console.error("usage: oracle_hf_tokenizers.js ids|variants|bench");
  process.exit(2);
}
mode().catch((e) => {
  console.error(e);
  process.exit(1);
});
