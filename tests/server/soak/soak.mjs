// Soak test for `kiln serve`: CLIENTS concurrent clients loop streaming chat requests for SECONDS,
// with plain fetch (no npm packages). Fails on any request error, on an engine that is not idle
// and whole afterwards (/health), and on resident-memory growth after warm-up.
//
// node soak.mjs --url http://127.0.0.1:PORT --pid SERVER_PID [--seconds 60] [--clients 64]
//               [--model ID] [--seed 1]
//
// Prints one JSON summary on stdout; exit status 0 when every check passed, 1 otherwise.

import { readFileSync, readdirSync } from 'node:fs';

function parseArgs(argv) {
  const a = { seconds: 60, clients: 64, seed: 1, model: null, url: null, pid: null };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    switch (k) {
      case '--url': a.url = v.replace(/\/+$/, ''); i++; break;
      case '--pid': a.pid = Number(v); i++; break;
      case '--seconds': a.seconds = Number(v); i++; break;
      case '--clients': a.clients = Number(v); i++; break;
      case '--model': a.model = v; i++; break;
      case '--seed': a.seed = Number(v); i++; break;
      default: throw new Error(`soak.mjs: unknown argument ${k}`);
    }
  }
  if (!a.url || !Number.isInteger(a.pid) || a.pid <= 0) {
    throw new Error('usage: node soak.mjs --url http://HOST:PORT --pid SERVER_PID [--seconds N] [--clients N]');
  }
  if (!(a.seconds > 0) || !(Number.isInteger(a.clients) && a.clients > 0)) {
    throw new Error('soak.mjs: --seconds and --clients must be positive');
  }
  return a;
}

const args = parseArgs(process.argv.slice(2));
const MAX_TOKENS = 32;
const REQUEST_TIMEOUT_MS = 120_000;
const MIB = 1024 * 1024;

// mulberry32: a small seeded PRNG, so that a run's prompts and seeds can be replayed.
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ('kiln clay fire glaze pottery heat bowl wheel ash oven brick tell me about why how ' +
  'what is the a story poem short quick explain describe slow cool crack color blue red stone ' +
  'river mountain cat dog summer winter 你好 café naïve').split(' ');

function prompt(rand) {
  const n = 2 + Math.floor(rand() * 9);
  const w = [];
  for (let i = 0; i < n; i++) w.push(WORDS[Math.floor(rand() * WORDS.length)]);
  return w.join(' ');
}

// --- server process sampling -----------------------------------------------------------------

function procStatus(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key) => {
      const m = text.match(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm'));
      return m ? Number(m[1]) * 1024 : null;
    };
    const threads = text.match(/^Threads:\s+(\d+)/m);
    let fds = null;
    try { fds = readdirSync(`/proc/${pid}/fd`).length; } catch { /* not ours to read */ }
    return { rss: kb('VmRSS'), threads: threads ? Number(threads[1]) : null, fds };
  } catch {
    return null; // the process is gone
  }
}

// --- one streamed request --------------------------------------------------------------------

const stats = {
  requests: 0, ok: 0, errors: 0, tokens: 0, finish: {}, errorKinds: {}, errorSamples: [],
  latencies: [], ttfts: [],
};

function fail(kind, detail) {
  stats.errors++;
  stats.errorKinds[kind] = (stats.errorKinds[kind] ?? 0) + 1;
  if (stats.errorSamples.length < 10) stats.errorSamples.push({ kind, detail: String(detail).slice(0, 300) });
}

async function oneRequest(body) {
  const t0 = performance.now();
  let res;
  try {
    res = await fetch(`${args.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (e) {
    return fail('network', `${e.name}: ${e.message}${e.cause ? ` (${e.cause.code ?? e.cause.message})` : ''}`);
  }
  if (res.status !== 200) {
    let text = '';
    try { text = await res.text(); } catch { /* ignore */ }
    return fail(`http_${res.status}`, text);
  }
  if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    await res.text().catch(() => {});
    return fail('bad_sse', `content-type ${res.headers.get('content-type')}`);
  }

  const decoder = new TextDecoder();
  let buf = '';
  let done = false;
  let finish = null;
  let usage = null;
  let id = null;
  let ttft = null;
  let problem = null;
  const onLine = (line) => {
    if (line === '' || line.startsWith(':')) return;
    if (!line.startsWith('data: ')) { problem ??= ['bad_sse', `line ${JSON.stringify(line)}`]; return; }
    const data = line.slice(6);
    if (done) { problem ??= ['bad_sse', `data after [DONE]: ${data}`]; return; }
    if (data === '[DONE]') { done = true; return; }
    let chunk;
    try { chunk = JSON.parse(data); } catch { problem ??= ['bad_sse', `not JSON: ${data}`]; return; }
    if (chunk.error) { problem ??= ['stream_error', JSON.stringify(chunk.error)]; return; }
    if (chunk.object !== 'chat.completion.chunk' || !Array.isArray(chunk.choices)) {
      problem ??= ['bad_sse', `not a chunk: ${data}`];
      return;
    }
    id ??= chunk.id;
    if (chunk.id !== id) problem ??= ['bad_sse', `id changed ${id} -> ${chunk.id}`];
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content && ttft === null) ttft = performance.now() - t0;
      if (c.finish_reason) {
        if (finish !== null) problem ??= ['bad_sse', 'two finish_reasons'];
        finish = c.finish_reason;
      }
    }
  };
  try {
    for await (const bytes of res.body) {
      buf += decoder.decode(bytes, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        onLine(buf.slice(0, nl).replace(/\r$/, ''));
        buf = buf.slice(nl + 1);
      }
    }
    buf += decoder.decode();
    if (buf !== '') onLine(buf);
  } catch (e) {
    return fail('stream_read', `${e.name}: ${e.message}${e.cause ? ` (${e.cause.code ?? e.cause.message})` : ''}`);
  }
  if (problem) return fail(problem[0], problem[1]);
  if (!done) return fail('missing_done', `finish_reason ${finish}`);
  if (finish === null) return fail('missing_finish_reason', '');
  if (!usage) return fail('missing_usage', '');
  const n = usage.completion_tokens;
  if (!(Number.isInteger(n) && n >= 0 && n <= MAX_TOKENS) || (finish === 'length' && n !== MAX_TOKENS)) {
    return fail('bad_usage', `${JSON.stringify(usage)} finish_reason ${finish}`);
  }
  stats.ok++;
  stats.tokens += n;
  stats.finish[finish] = (stats.finish[finish] ?? 0) + 1;
  stats.latencies.push(performance.now() - t0);
  if (ttft !== null) stats.ttfts.push(ttft);
}

async function client(index, deadline) {
  const rand = rng(args.seed * 100_003 + index);
  while (performance.now() < deadline) {
    stats.requests++;
    const body = {
      messages: [{ role: 'user', content: prompt(rand) }],
      max_tokens: MAX_TOKENS,
      temperature: 0.7,
      seed: Math.floor(rand() * 2 ** 31),
      stream: true,
      stream_options: { include_usage: true },
    };
    if (args.model) body.model = args.model;
    await oneRequest(body);
  }
}

async function health() {
  const r = await fetch(`${args.url}/health`, { signal: AbortSignal.timeout(10_000) });
  return r.json();
}

function healthProblems(h) {
  const e = h?.engine;
  if (!e) return ['/health has no engine object'];
  const p = [];
  if (e.running !== 0) p.push(`engine.running ${e.running} != 0`);
  if (e.waiting !== 0) p.push(`engine.waiting ${e.waiting} != 0`);
  if (e.kv_blocks_free + e.kv_blocks_cached !== e.kv_blocks_total) {
    p.push(`kv_blocks_free ${e.kv_blocks_free} + kv_blocks_cached ${e.kv_blocks_cached} != kv_blocks_total ${e.kv_blocks_total}`);
  }
  if (e.gdn_slots_free + e.gdn_slots_cached !== e.gdn_slots_total) {
    p.push(`gdn_slots_free ${e.gdn_slots_free} + gdn_slots_cached ${e.gdn_slots_cached} != gdn_slots_total ${e.gdn_slots_total}`);
  }
  return p;
}

function percentile(xs, q) {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))]);
}

const round1 = (x) => (x === null ? null : Math.round(x * 10) / 10);

// --- the run ---------------------------------------------------------------------------------

const failures = [];
{
  // Wait for the server to be ready.
  const until = performance.now() + 60_000;
  for (;;) {
    try { if ((await health()).status === 'ready') break; } catch { /* not listening yet */ }
    if (performance.now() > until) {
      console.error(`soak.mjs: ${args.url}/health not ready within 60 s`);
      process.exit(1);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
const before = procStatus(args.pid);
if (!before) {
  console.error(`soak.mjs: no process ${args.pid}`);
  process.exit(1);
}

const start = performance.now();
const deadline = start + args.seconds * 1000;
const samples = []; // { t (s), rss, threads, fds }
let died = false;
const sampler = setInterval(() => {
  const s = procStatus(args.pid);
  if (!s) { died = true; return; }
  samples.push({ t: (performance.now() - start) / 1000, ...s });
}, 1000);

await Promise.all(Array.from({ length: args.clients }, (_, i) => client(i, deadline)));
const elapsed = (performance.now() - start) / 1000;
clearInterval(sampler);

// Requests are retired at the engine's next cycle boundary: give it a moment to become idle.
let h = null;
let problems = ['/health not read'];
let firstHealthProblems = null;
let healthPolls = 0;
const settleStart = performance.now();
while (performance.now() - settleStart < 5000) {
  try { h = await health(); problems = healthProblems(h); } catch (e) { problems = [`/health: ${e.message}`]; }
  healthPolls++;
  firstHealthProblems ??= problems;
  if (problems.length === 0) break;
  await new Promise((r) => setTimeout(r, 100));
}
const settleMs = Math.round(performance.now() - settleStart);
failures.push(...problems);

const end = procStatus(args.pid);
if (died || !end) failures.push(`the server (pid ${args.pid}) exited during the soak`);
if (stats.errors > 0) failures.push(`${stats.errors} request errors: ${JSON.stringify(stats.errorKinds)}`);
if (stats.ok === 0) failures.push('no request completed');

// RSS after warm-up: the first sample at or after 25% of the run.
const warm = samples.find((s) => s.t >= args.seconds * 0.25) ?? samples[samples.length - 1] ?? before;
const rssWarm = warm.rss / MIB;
const rssEnd = end ? end.rss / MIB : null;
const rssLimit = rssWarm * 1.10 + 20;
if (rssEnd !== null && rssEnd > rssLimit) {
  failures.push(`RSS grew from ${rssWarm.toFixed(1)} MiB (warm) to ${rssEnd.toFixed(1)} MiB (end), more than 10% + 20 MiB`);
}

const summary = {
  pass: failures.length === 0,
  seconds: args.seconds,
  clients: args.clients,
  elapsed_s: round1(elapsed),
  requests: stats.requests,
  completed: stats.ok,
  errors: stats.errors,
  error_kinds: stats.errorKinds,
  tokens: stats.tokens,
  tokens_per_s: round1(stats.tokens / elapsed),
  requests_per_s: round1(stats.ok / elapsed),
  finish_reasons: stats.finish,
  latency_ms: { p50: percentile(stats.latencies, 0.5), p99: percentile(stats.latencies, 0.99),
                max: percentile(stats.latencies, 1) },
  ttft_ms: { p50: percentile(stats.ttfts, 0.5), p99: percentile(stats.ttfts, 0.99) },
  rss_start_mib: round1(before.rss / MIB),
  rss_warm_mib: round1(rssWarm),
  rss_end_mib: round1(rssEnd),
  rss_max_mib: round1(Math.max(...samples.map((s) => s.rss), before.rss) / MIB),
  rss_limit_mib: round1(rssLimit),
  threads_warm: warm.threads, threads_end: end?.threads ?? null,
  fds_warm: warm.fds, fds_end: end?.fds ?? null,
  health_settle_ms: settleMs,
  health_polls: healthPolls,
  health_first_problems: firstHealthProblems,
  health_end: h?.engine ?? null,
  failures,
  error_samples: stats.errorSamples,
};
console.log(JSON.stringify(summary, null, 2));
process.exit(summary.pass ? 0 : 1);
