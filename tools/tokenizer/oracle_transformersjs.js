#!/usr/bin/env node
// The transformers.js oracle (npm @lenml/tokenizers, a tokenizers-only fork of transformers.js).
//
//   node tools/tokenizer/oracle_transformersjs.js ids      writes tests/fixtures/tokenizer/corpus_expected.jsonl
//                                                          (per corpus line: {"ids": [...], "normalized": NFC text})
//   node tools/tokenizer/oracle_transformersjs.js bench    encode throughput on the corpus (MB/s)
//   node tools/tokenizer/oracle_transformersjs.js variants writes tests/fixtures/tokenizer/variants_expected.json:
//        ids for every VARIANT_STRIDE-th corpus string under modified copies of the Qwen3
//        tokenizer.json (other normalizers, pre-tokenizers, merges format, ignore_merges,
//        lstrip/rstrip added tokens), restricted to components transformers.js implements as HF does
//   node tools/tokenizer/oracle_transformersjs.js templates
//        renders tests/fixtures/tokenizer/conversations.json with @huggingface/jinja (transformers.js's
//        Jinja engine; the copy bundled in @lenml/tokenizers 3.7.2 cannot parse Qwen3's template) and
//        reports where it differs from chat_template_expected.jsonl (Python Jinja2, as HF renders).
//
// Needs: scripts/fetch-tokenizer (the Qwen3 tokenizer in .cache/tokenizers/qwen3) and
// `npm install --prefix .cache/node @lenml/tokenizers@3.7.2 @huggingface/jinja@0.5.11`.
"use strict";
const fs = require("fs");
const path = require("path");

const ROOT = path.resolve(__dirname, "..", "..");
const TOKENIZER_DIR = process.env.KILN_TOKENIZER_DIR || path.join(ROOT, ".cache", "tokenizers", "qwen3");
const FIXTURES = path.join(ROOT, "tests", "fixtures", "tokenizer");
const { TokenizerLoader } = require(path.join(ROOT, ".cache", "node", "node_modules", "@lenml", "tokenizers"));

function loadTokenizer() {
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(TOKENIZER_DIR, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(TOKENIZER_DIR, "tokenizer_config.json"), "utf8")),
  });
}

// Corpus entries as JS strings; "hex" entries decode with U+FFFD per maximal subpart (WHATWG).
function loadCorpus() {
  const lines = fs.readFileSync(path.join(FIXTURES, "corpus.jsonl"), "utf8").split("\n").filter((l) => l.length);
  return lines.map((l) => {
    const e = JSON.parse(l);
    return e.hex !== undefined ? Buffer.from(e.hex, "hex").toString("utf8") : e.text;
  });
}

function writeIds() {
  const tok = loadTokenizer();
  const corpus = loadCorpus();
  const out = [];
  let roundTripMismatches = 0;
  for (const text of corpus) {
    const ids = tok.encode(text, { add_special_tokens: true });
    const normalized = text.normalize("NFC");
    out.push(JSON.stringify({ ids, normalized }));
    if ((ids.length ? tok.decode(ids) : "") !== normalized) roundTripMismatches++;
  }
  fs.writeFileSync(path.join(FIXTURES, "corpus_expected.jsonl"), out.join("\n") + "\n");
  console.log(`wrote ids for ${corpus.length} strings; transformers.js decode != NFC(text) for ${roundTripMismatches}`);
}

const VARIANT_STRIDE = 10;

// Each variant patches the Qwen3 tokenizer.json; tests/tokenizer/tokenizer_variants_test.cc
// applies the same patches (see applyPatch) before comparing ids.
const VARIANTS = [
  { name: "nfkc", patch: { normalizer: { type: "NFKC" } } },
  { name: "nfkc_then_nfc", patch: { normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "NFC" }] } } },
  { name: "no_normalizer", patch: { normalizer: null } },
  { name: "gpt2_byte_level_with_prefix_space",
    patch: { pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } } },
  { name: "split_whitespace_removed",
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: "\\s+" }, behavior: "Removed", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }] } } },
  { name: "split_letters_digits_inverted",
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: "\\p{L}+|\\p{N}+" }, behavior: "Removed", invert: true },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }] } } },
  { name: "ignore_merges", patch: { model: { ignore_merges: true } } },
  { name: "merges_as_strings", patch: { merges_as_strings: true } },
  { name: "added_tokens_lstrip_rstrip",
    patch: { added_tokens: { "<|im_start|>": { lstrip: true }, "<|im_end|>": { rstrip: true },
                             "<think>": { lstrip: true, rstrip: true } } } },
];

function applyPatch(json, patch) {
  const out = { ...json, model: { ...json.model }, added_tokens: json.added_tokens.map((t) => ({ ...t })) };
  for (const key of ["normalizer", "pre_tokenizer"]) if (key in patch) out[key] = patch[key];
  if (patch.model) Object.assign(out.model, patch.model);
  if (patch.merges_as_strings) out.model.merges = out.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
  for (const [content, flags] of Object.entries(patch.added_tokens || {})) {
    Object.assign(out.added_tokens.find((t) => t.content === content), flags);
  }
  return out;
}

function writeVariants() {
  const base = JSON.parse(fs.readFileSync(path.join(TOKENIZER_DIR, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(TOKENIZER_DIR, "tokenizer_config.json"), "utf8"));
  const corpus = loadCorpus().filter((_, i) => i % VARIANT_STRIDE === 0);
  const out = [{ stride: VARIANT_STRIDE }];
  for (const v of VARIANTS) {
    const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: applyPatch(base, v.patch), tokenizerConfig: config });
    out.push({ name: v.name, patch: v.patch, ids: corpus.map((s) => tok.encode(s, { add_special_tokens: true })) });
  }
  const text = "[\n" + out.map((v) => JSON.stringify(v)).join(",\n") + "\n]\n";
  fs.writeFileSync(path.join(FIXTURES, "variants_expected.json"), text);
  console.log(`wrote ${out.length - 1} variants x ${corpus.length} strings`);
}

function bench() {
  const tok = loadTokenizer();
  const corpus = loadCorpus();
  const bytes = corpus.reduce((n, s) => n + Buffer.byteLength(s, "utf8"), 0);
  for (const s of corpus) tok.encode(s);  // warm-up (JIT, caches)
  const rounds = Number(process.env.ROUNDS || 5);
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  for (let r = 0; r < rounds; r++) for (const s of corpus) tokens += tok.encode(s).length;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({
    peer: "transformers.js (@lenml/tokenizers 3.7.2)", node: process.version, threads: 1,
    corpus_bytes: bytes, rounds, seconds, mb_per_s: (bytes * rounds) / seconds / 1e6, tokens_per_s: tokens / seconds,
  }));
}

function templates() {
  const { Template } = require(path.join(ROOT, ".cache", "node", "node_modules", "@huggingface", "jinja"));
  const config = JSON.parse(fs.readFileSync(path.join(TOKENIZER_DIR, "tokenizer_config.json"), "utf8"));
  const template = new Template(config.chat_template);
  const cases = JSON.parse(fs.readFileSync(path.join(FIXTURES, "conversations.json"), "utf8"));
  const expected = fs.readFileSync(path.join(FIXTURES, "chat_template_expected.jsonl"), "utf8")
    .split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
  let same = 0;
  const differ = [];
  cases.forEach((c, i) => {
    const vars = { messages: c.messages, tools: c.tools ?? null, documents: null,
                   add_generation_prompt: c.add_generation_prompt, eos_token: config.eos_token,
                   pad_token: config.pad_token, additional_special_tokens: config.additional_special_tokens };
    if ("enable_thinking" in c) vars.enable_thinking = c.enable_thinking;
    let got;
    try { got = { rendered: template.render(vars) }; } catch (e) { got = { error: String(e.message || e) }; }
    const want = expected[i];
    const ok = want.error !== undefined ? got.error !== undefined : got.rendered === want.rendered;
    if (ok) { same++; return; }
    let where = "";
    if (got.rendered !== undefined && want.rendered !== undefined) {
      let k = 0;
      while (k < got.rendered.length && got.rendered[k] === want.rendered[k]) k++;
      where = ` first difference at char ${k}: js ${JSON.stringify(got.rendered.slice(k, k + 40))}` +
              ` vs python ${JSON.stringify(want.rendered.slice(k, k + 40))}`;
    } else {
      where = ` js ${JSON.stringify(got).slice(0, 120)} vs python ${JSON.stringify(want).slice(0, 120)}`;
    }
    differ.push(`${c.name}:${where}`);
  });
  console.log(`@huggingface/jinja agrees with Python Jinja2 on ${same} of ${cases.length} conversations`);
  for (const d of differ) console.log("  " + d);
}

const mode = process.argv[2];
if (mode === "ids") writeIds();
else if (mode === "variants") writeVariants();
else if (mode === "bench") bench();
else if (mode === "templates") templates();
else {
  console.error("usage: oracle_transformersjs.js ids|variants|bench|templates");
  process.exit(2);
}
