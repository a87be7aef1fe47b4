#!/usr/bin/env node
// The second oracle: transformers.js (npm @lenml/tokenizers 3.7.2, a tokenizers-only fork) and its
// Jinja engine (npm @huggingface/jinja 0.5.11). It writes no fixture; it reports where it agrees
// with the committed ones (HF tokenizers ids, Python Jinja2 renders).
//
//   node tools/tokenizer/oracle_transformersjs.js compare    ids on the corpus and the variants it implements
//   node tools/tokenizer/oracle_transformersjs.js templates  the conversations, rendered by @huggingface/jinja
//   node tools/tokenizer/oracle_transformersjs.js bench      encode throughput on the corpus (MB/s)
//
// Needs scripts/fetch-tokenizer and
// `npm install --prefix .cache/node @lenml/tokenizers@3.7.2 @huggingface/jinja@0.5.11`.
"use strict";
const fs = require("fs");
const path = require("path");
const F = require("./fixtures.js");

const { TokenizerLoader } = require(path.join(F.NODE_MODULES, "@lenml", "tokenizers"));

function loadTokenizer(json) {
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: json || JSON.parse(fs.readFileSync(path.join(F.TOKENIZER_DIR, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(F.TOKENIZER_DIR, "tokenizer_config.json"), "utf8")),
  });
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

function compare() {
  const corpus = F.loadCorpus();
  const expected = F.readJsonl("corpus_expected.jsonl");
  const tok = loadTokenizer();
  const differ = [];
  corpus.forEach((text, i) => {
    if (!same(tok.encode(text, { add_special_tokens: true }), expected[i].ids)) differ.push(i + 1);
  });
  console.log(`corpus: transformers.js agrees with HF tokenizers on ${corpus.length - differ.length} of ${corpus.length}` +
              (differ.length ? `; differs on lines ${differ.join(", ")}` : ""));
  for (const l of differ.slice(0, 5)) console.log(`  line ${l}: ${JSON.stringify(corpus[l - 1]).slice(0, 100)}`);
  const base = JSON.parse(fs.readFileSync(path.join(F.TOKENIZER_DIR, "tokenizer.json"), "utf8"));
  const variants = JSON.parse(fs.readFileSync(path.join(F.FIXTURES, "variants_expected.json"), "utf8"));
  const sample = corpus.filter((_, i) => i % variants[0].stride === 0);
  for (const v of variants.slice(1)) {
    if (!F.VARIANTS.find((d) => d.name === v.name && d.transformersjs)) continue;
    const vt = loadTokenizer(F.applyPatch(base, v.patch));
    const n = sample.filter((s, i) => !same(vt.encode(s, { add_special_tokens: true }), v.ids[i])).length;
    console.log(`variant ${v.name}: transformers.js differs from HF on ${n} of ${sample.length}`);
  }
}

function templates() {
  const { Template } = require(path.join(F.NODE_MODULES, "@huggingface", "jinja"));
  const config = JSON.parse(fs.readFileSync(path.join(F.TOKENIZER_DIR, "tokenizer_config.json"), "utf8"));
  const template = new Template(config.chat_template);
  const cases = JSON.parse(fs.readFileSync(path.join(F.FIXTURES, "conversations.json"), "utf8"));
  const expected = F.readJsonl("chat_template_expected.jsonl");
  let agree = 0;
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
    if (ok) { agree++; return; }
    let where;
    if (got.rendered !== undefined && want.rendered !== undefined) {
      let k = 0;
      while (k < got.rendered.length && got.rendered[k] === want.rendered[k]) k++;
      where = `at char ${k}: js ${JSON.stringify(got.rendered.slice(k, k + 30))} vs python ${JSON.stringify(want.rendered.slice(k, k + 30))}`;
    } else {
      where = `js ${JSON.stringify(got).slice(0, 100)} vs python ${JSON.stringify(want).slice(0, 100)}`;
    }
    differ.push(`${c.name}: ${where}`);
  });
  console.log(`@huggingface/jinja agrees with Python Jinja2 on ${agree} of ${cases.length} conversations`);
  for (const d of differ) console.log("  " + d);
}

function bench() {
  const tok = loadTokenizer();
  const corpus = F.loadCorpus();
  const bytes = corpus.reduce((n, s) => n + Buffer.byteLength(s, "utf8"), 0);
  for (const s of corpus) tok.encode(s);  // warm-up (JIT, caches)
  const rounds = Number(process.env.ROUNDS || 5);
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < rounds; r++) for (const s of corpus) tok.encode(s);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ peer: "transformers.js (@lenml/tokenizers 3.7.2)", threads: 1, corpus_bytes: bytes,
                               rounds, seconds, mb_per_s: (bytes * rounds) / seconds / 1e6 }));
}

const modes = { compare, templates, bench };
const mode = modes[process.argv[2]];
if (!mode) {
  console.error("usage: oracle_transformersjs.js compare|templates|bench");
  process.exit(2);
}
mode();
