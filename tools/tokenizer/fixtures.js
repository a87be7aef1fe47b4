// Shared by the node oracles: where the tokenizer, corpus and fixtures live, and the tokenizer.json
// variants that tests/tokenizer/tokenizer_variants_test.cc applies the same way (applyPatch).
"use strict";
const fs = require("fs");
const path = require("path");

const ROOT = path.resolve(__dirname, "..", "..");
const TOKENIZER_DIR = process.env.KILN_TOKENIZER_DIR || path.join(ROOT, ".cache", "tokenizers", "qwen3");
const FIXTURES = path.join(ROOT, "tests", "fixtures", "tokenizer");
const NODE_MODULES = path.join(ROOT, ".cache", "node", "node_modules");

// Corpus entries as JS strings; "hex" entries decode with U+FFFD per maximal subpart (WHATWG,
// the same rule as Python's errors="replace" and Rust's from_utf8_lossy).
function loadCorpus() {
  const lines = fs.readFileSync(path.join(FIXTURES, "corpus.jsonl"), "utf8").split("\n").filter((l) => l.length);
  return lines.map((l) => {
    const e = JSON.parse(l);
    return e.hex !== undefined ? Buffer.from(e.hex, "hex").toString("utf8") : e.text;
  });
}

function readJsonl(name) {
  return fs.readFileSync(path.join(FIXTURES, name), "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
}

const BYTE_LEVEL = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
const split = (regex, behavior, invert = false) => ({ type: "Split", pattern: { Regex: regex }, behavior, invert });

// transformersjs: whether transformers.js implements the variant's components as HF does (the
// others are checked against HF tokenizers only).
const VARIANTS = [
  { name: "nfkc", transformersjs: true, patch: { normalizer: { type: "NFKC" } } },
  { name: "nfkc_then_nfc", transformersjs: true,
    patch: { normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "NFC" }] } } },
  { name: "nfd", transformersjs: true, patch: { normalizer: { type: "NFD" } } },
  { name: "no_normalizer", transformersjs: true, patch: { normalizer: null } },
  { name: "gpt2_byte_level_with_prefix_space", transformersjs: true,
    patch: { pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } } },
  { name: "split_whitespace_removed", transformersjs: true,
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [split("\\s+", "Removed"), BYTE_LEVEL] } } },
  { name: "split_letters_digits_inverted", transformersjs: true,
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [split("\\p{L}+|\\p{N}+", "Removed", true), BYTE_LEVEL] } } },
  { name: "split_merged_with_previous", transformersjs: false,
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [split("[.,!?;:]", "MergedWithPrevious"), BYTE_LEVEL] } } },
  { name: "split_merged_with_next", transformersjs: false,
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [split("\\s+", "MergedWithNext"), BYTE_LEVEL] } } },
  { name: "split_contiguous_digits", transformersjs: false,
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [split("\\p{N}", "Contiguous"), BYTE_LEVEL] } } },
  { name: "split_string_pattern_isolated", transformersjs: false,
    patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { String: "the" }, behavior: "Isolated", invert: false }, BYTE_LEVEL] } } },
  { name: "ignore_merges", transformersjs: true, patch: { model: { ignore_merges: true } } },
  { name: "merges_as_strings", transformersjs: true, patch: { merges_as_strings: true } },
  { name: "added_tokens_lstrip_rstrip", transformersjs: true,
    patch: { added_tokens: { "<|im_start|>": { lstrip: true }, "<|im_end|>": { rstrip: true },
                             "<think>": { lstrip: true, rstrip: true } } } },
  { name: "added_tokens_single_word", transformersjs: false,
    patch: { added_tokens: { "<think>": { single_word: true }, "</think>": { single_word: true, lstrip: true } } } },
  { name: "added_tokens_normalized_under_nfkc", transformersjs: false,
    patch: { normalizer: { type: "NFKC" }, added_tokens: { "<tool_call>": { normalized: true }, "<|im_end|>": { normalized: true } } } },
  // An added token whose content NFKC changes ("\ufb01le" -> "file") matches the normalised text.
  { name: "added_token_normalized_content", transformersjs: false,
    patch: { normalizer: { type: "NFKC" },
             added_tokens: { "<|fim_pad|>": { content: "\ufb01le", normalized: true }, "<|repo_name|>": { content: "the", normalized: false } } } },
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

// Every VARIANT_STRIDE-th corpus string is encoded under each variant.
const VARIANT_STRIDE = 10;

module.exports = { ROOT, TOKENIZER_DIR, FIXTURES, NODE_MODULES, loadCorpus, readJsonl, VARIANTS, applyPatch, VARIANT_STRIDE };
