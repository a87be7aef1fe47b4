// The dashboard's behaviour (docs/dashboard.md): the API key, tabs, polling of the server's
// routes, the forms, a training job's curves and the streaming playground. No framework and no
// outside requests.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

// An element with attributes and children; strings become text nodes (never HTML).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick") e.addEventListener("click", v);
    else if (k === "className") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function showError(id, err) {
  const p = document.getElementById(id);
  if (!p) return;
  p.hidden = !err;
  p.textContent = err ? String(err.message || err) : "";
}

// ---------------------------------------------------------------------------------------------
// The API key: asked for when the server answers 401, kept in this tab's sessionStorage (never in
// a URL, localStorage or a cookie), sent as "Authorization: Bearer <key>" on every API call.

const KEY_ITEM = "kiln-api-key";
const keyPrompt = { waiting: null, done: null };

function withKey(init) {
  const key = sessionStorage.getItem(KEY_ITEM);
  return key ? { ...init, headers: { ...(init.headers || {}), Authorization: `Bearer ${key}` } } : init;
}

// Shows the key form and resolves once a key is entered; every call that meets a 401 meanwhile
// waits on the same prompt. `refusal`: the server's words about a key it refused.
function askForKey(refusal) {
  if (refusal) showError("key-error", `The server refused that key: ${refusal}`);
  if (!keyPrompt.waiting) {
    if (!refusal) showError("key-error", null);
    keyPrompt.waiting = new Promise((resolve) => { keyPrompt.done = resolve; });
    $("#key-form").hidden = false;
    $("#key-input").focus();
  }
  return keyPrompt.waiting;
}

// The input has no name, so that even a submit the script does not catch sends no key anywhere.
$("#key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const key = $("#key-input").value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY_ITEM, key);
  $("#key-input").value = "";
  $("#key-form").hidden = true;
  const done = keyPrompt.done;
  keyPrompt.waiting = keyPrompt.done = null;
  done();
});

// fetch with the key. A 401 asks for a key (again, with the server's message, when the one sent
// was refused) and sends the request once more: the server refused it before any route ran it.
async function authFetch(path, init = {}) {
  for (;;) {
    const sent = sessionStorage.getItem(KEY_ITEM);
    const res = await fetch(path, withKey(init));
    if (res.status !== 401) return res;
    if (sessionStorage.getItem(KEY_ITEM) !== sent) continue;  // a key entered meanwhile: try it
    let refusal = null;
    if (sent) {
      const body = await res.json().catch(() => ({}));
      refusal = (body.error && body.error.message) || "HTTP 401";
      sessionStorage.removeItem(KEY_ITEM);
    }
    await askForKey(refusal);
  }
}

// fetch + JSON; throws an Error carrying the API's message, param and HTTP status.
async function api(path, options = {}) {
  const init = { ...options };
  if (init.body !== undefined && typeof init.body !== "string") {
    init.body = JSON.stringify(init.body);
    init.headers = { "Content-Type": "application/json", ...(init.headers || {}) };
  }
  const res = await authFetch(path, init);
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = text; }
  if (!res.ok) {
    const e = body && body.error ? body.error : {};
    const err = new Error((e.message || `HTTP ${res.status}`) + (e.param ? ` (${e.param})` : ""));
    err.status = res.status;
    throw err;
  }
  return body;
}

const fmt = {
  num(v, digits = 2) { return v === null || v === undefined || Number.isNaN(v) ? "-" : Number(v).toFixed(digits); },
  int(v) { return v === null || v === undefined ? "-" : Number(v).toLocaleString("en-US"); },
  bytes(v) {
    if (v === null || v === undefined) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; ++i; }
    return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
  },
  duration(s) {
    if (s === null || s === undefined) return "-";
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
    return h ? `${h}h ${m}m ${sec}s` : m ? `${m}m ${sec}s` : `${s.toFixed(1)} s`;
  },
  pct(v) { return v === null || v === undefined ? "-" : `${(100 * v).toFixed(1)}%`; },
  // A Wilson interval {low, high} as " [low%, high%]"; "" without one.
  interval(w) { return w ? ` [${fmt.pct(w.low)}, ${fmt.pct(w.high)}]` : ""; },
};

// ---------------------------------------------------------------------------------------------
// Tabs: the URL's hash names the visible panel, so a reload (or a test) can open one directly.

const TABS = ["status", "adapters", "training", "evals", "playground"];
function showTab() {
  const name = TABS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "status";
  for (const t of TABS) {
    document.getElementById(`panel-${t}`).classList.toggle("active", t === name);
    $(`nav a[data-tab="${t}"]`).classList.toggle("active", t === name);
  }
}
window.addEventListener("hashchange", showTab);

// ---------------------------------------------------------------------------------------------
// Live status: /health and /metrics (with the key) every second. Tokens/s is the change of
// kiln_generated_tokens_total between two polls over the time between them.

// Prometheus text -> {"name{labels}": value}.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

const status = { polls: 0, lastTokens: null, lastTime: null, tokensPerSecond: null, health: null };

function card(label, value, key) {
  return el("div", { className: "card", "data-key": key }, el("div", { className: "label" }, label),
            el("div", { className: "value" }, value));
}

async function pollStatus() {
  try {
    const [healthRes, metricsRes] = await Promise.all([fetch("/health"), authFetch("/metrics")]);
    // 503 still carries the body (maintenance, stopping).
    const h = await healthRes.json();
    const m = parseMetrics(await metricsRes.text());
    const now = performance.now();
    const tokens = m["kiln_generated_tokens_total"];
    if (status.lastTokens !== null && now > status.lastTime)
      status.tokensPerSecond = (tokens - status.lastTokens) / ((now - status.lastTime) / 1000);
    status.lastTokens = tokens;
    status.lastTime = now;
    status.health = h;
    ++status.polls;
    const e = h.engine || {};
    const used = e.kv_blocks_total - e.kv_blocks_free - e.kv_blocks_cached;
    // Device memory is shown where the server reports it (a "memory" object on /health).
    const mem = h.memory && (h.memory.device_used_bytes !== undefined || h.memory.device_total_bytes !== undefined)
      ? `${fmt.bytes(h.memory.device_used_bytes)} / ${fmt.bytes(h.memory.device_total_bytes)}` : "not reported";
    const cards = [
      card("model", h.model, "model"),
      card("backend", h.backend, "backend"),
      card("status", h.status, "status"),
      card("uptime", fmt.duration(h.uptime_seconds), "uptime"),
      card("device memory", mem, "memory"),
      card("K/V blocks used / free", `${fmt.int(used)} / ${fmt.int(e.kv_blocks_free)}`, "kv_blocks"),
      card("K/V blocks cached / total", `${fmt.int(e.kv_blocks_cached)} / ${fmt.int(e.kv_blocks_total)}`, "kv_cached"),
      card("GDN slots free / total", `${fmt.int(e.gdn_slots_free)} / ${fmt.int(e.gdn_slots_total)}`, "gdn_slots"),
      card("sequences running / waiting", `${fmt.int(e.running)} / ${fmt.int(e.waiting)}`, "sequences"),
      card("active requests", fmt.int(m["kiln_requests_active"]), "active_requests"),
      card("tokens/s (generated)", fmt.num(status.tokensPerSecond, 1), "tokens_per_second"),
      card("tokens generated", fmt.int(tokens), "tokens_total"),
      card("default adapter", h.default_adapter || "(none)", "default_adapter"),
      card("training running / queued",
           h.training ? `${h.training.running || "-"} / ${h.training.queued}` : "not available", "training"),
    ];
    $("#status-cards").replaceChildren(...cards);
    $("#status-updated").textContent = `updated ${new Date().toLocaleTimeString()} (poll ${status.polls})`;
    $("#header-model").textContent = `${h.model} on ${h.backend}`;
    const pill = $("#header-status");
    pill.textContent = h.status;
    pill.className = `pill ${h.status}`;
    showError("status-error", null);
  } catch (err) {
    $("#header-status").textContent = "down";
    $("#header-status").className = "pill down";
    showError("status-error", `the server does not answer: ${err.message}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Adapters: the list, load / unload / make default, and provenance (train_receipt.json, with the
// post-training eval when the job ran one).

let adapterNames = [];

async function refreshAdapters() {
  let list;
  try { list = await api("/v1/adapters"); } catch (err) { return showError("adapters-error", err); }
  adapterNames = list.data.map((a) => a.name);
  const rows = list.data.map((a) => el("tr", { "data-name": a.name },
    el("td", {}, a.name), el("td", {}, a.revision), el("td", {}, a.rank), el("td", {}, a.alpha),
    el("td", {}, a.default ? "yes" : ""), el("td", { className: "muted" }, a.path),
    el("td", {},
      el("button", { className: "secondary", onclick: () => showProvenance(a.name) }, "provenance"), " ",
      a.default ? null : el("button", { className: "secondary", onclick: () => loadAdapter(a.name, a.path, true) }, "make default"), " ",
      el("button", { className: "secondary", onclick: () => unloadAdapter(a.name) }, "unload"))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 7, className: "muted" }, "no adapter loaded")));
  $("#adapters-table tbody").replaceChildren(...rows);
  fillAdapterPickers();
}

// Every adapter <select>: "(default adapter)" where data-default (the request names none),
// "(base model)" where data-base, then the loaded adapters. The current choice is kept.
function fillAdapterPickers() {
  for (const sel of $$("select.adapter-picker")) {
    // Keep the current choice; a select not yet filled has none (its "" is not "(base model)").
    const keep = sel.options.length ? sel.value : null;
    const opts = [];
    if (sel.dataset.default) opts.push(el("option", { value: "@default" }, "(default adapter)"));
    if (sel.dataset.base) opts.push(el("option", { value: "" }, "(base model)"));
    for (const n of adapterNames) opts.push(el("option", { value: n }, n));
    sel.replaceChildren(...opts);
    if (keep !== null && [...sel.options].some((o) => o.value === keep)) sel.value = keep;
  }
}

async function loadAdapter(name, path, makeDefault) {
  try {
    const body = { name, default: !!makeDefault };
    if (path) body.path = path;
    await api("/v1/adapters/load", { method: "POST", body });
    showError("adapters-error", null);
  } catch (err) { showError("adapters-error", err); }
  refreshAdapters();
}

async function unloadAdapter(name) {
  try {
    await api("/v1/adapters/unload", { method: "POST", body: { name } });
    showError("adapters-error", null);
  } catch (err) { showError("adapters-error", err); }
  refreshAdapters();
}

async function showProvenance(name) {
  $("#adapter-provenance").hidden = false;
  $("#provenance-name").textContent = name;
  const summary = $("#provenance-summary");
  try {
    const r = await api(`/v1/adapters/${encodeURIComponent(name)}/receipt`);
    const h = r.hyperparameters || {};
    const curve = r.loss_curve || [];
    const items = [
      ["job type", r.job_type], ["data sha256", r.data_sha256], ["sequences", r.sequences], ["seed", r.seed],
      ["LoRA rank / alpha", `${h.lora_rank} / ${h.lora_alpha}`], ["learning rate", h.learning_rate === undefined ? "-" : +Number(h.learning_rate).toPrecision(6)], ["epochs", h.epochs],
      ["loss first -> last", curve.length ? `${fmt.num(curve[0], 4)} -> ${fmt.num(curve[curve.length - 1], 4)} (${curve.length} steps)` : "-"],
      ["base model", r.base_model ? `${r.base_model.model_id} (${r.base_model.backend})` : "-"],
      ["finished", r.finished_at ? new Date(r.finished_at * 1000).toLocaleString() : "-"],
    ];
    if (r.post_eval) {
      const pe = r.post_eval;
      items.push(["eval", `${pe.suite}: ${pe.passed}/${pe.total} = ${fmt.pct(pe.accuracy)}` +
        fmt.interval(pe.wilson) +
        (pe.auto_load_skipped ? ` (not auto-loaded: ${pe.reason})` : "")]);
    } else {
      items.push(["eval", "no post-training eval recorded"]);
    }
    summary.replaceChildren(el("table", {}, el("tbody", {}, items.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v ?? "-"))))));
    $("#provenance-receipt").textContent = JSON.stringify(r, null, 2);
  } catch (err) {
    summary.replaceChildren(el("p", { className: "muted" }, err.status === 404 ? `no training receipt: ${err.message}` : err.message));
    $("#provenance-receipt").textContent = "";
  }
}

$("#adapter-load-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target;
  loadAdapter(f.name.value.trim(), f.path.value.trim(), f.default.checked);
});

// ---------------------------------------------------------------------------------------------
// Training: the queue (every half second), the selected job's curves (redrawn on every poll
// while it runs) and its adapter's eval results, the SFT form and the GRPO / OPD form.

let selectedJob = null;

async function refreshQueue() {
  let q;
  try { q = await api("/v1/train/queue"); } catch (err) { return showError("train-detail-error", err); }
  const rows = q.data.map((j) => el("tr", { className: `clickable${j.job_id === selectedJob ? " selected" : ""}`, "data-job": j.job_id,
                                         onclick: () => { selectedJob = j.job_id; refreshQueue(); } },
    el("td", {}, j.job_id), el("td", {}, j.job_type), el("td", { "data-state": j.state }, j.state),
    el("td", {}, `${j.step}/${j.total_steps}`), el("td", {}, fmt.num(j.loss, 4)), el("td", {}, j.adapter_name || "-"),
    el("td", {}, j.state === "queued" || j.state === "running"
      ? el("button", { className: "secondary", onclick: (ev) => { ev.stopPropagation(); cancelJob(j.job_id); } }, "cancel") : null)));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 7, className: "muted" }, "no training jobs")));
  $("#train-queue tbody").replaceChildren(...rows);
  if (!selectedJob && q.data.length) selectedJob = q.data[0].job_id;
  if (selectedJob) await refreshJob(selectedJob);
}

async function refreshJob(id) {
  let j;
  try { j = await api(`/v1/train/status/${encodeURIComponent(id)}`); } catch (err) { return showError("train-detail-error", err); }
  $("#train-detail").hidden = false;
  $("#train-detail-id").textContent = j.job_id;
  const st = $("#train-detail-state");
  st.textContent = j.state;
  st.dataset.state = j.state;
  $("#train-detail-progress").textContent =
    `step ${j.step}/${j.total_steps}, loss ${fmt.num(j.loss, 4)}` +
    (j.eval_loss !== null && j.eval_loss !== undefined ? `, eval loss ${fmt.num(j.eval_loss, 4)}` : "") +
    `, grad norm ${fmt.num(j.grad_norm, 3)}, lr ${j.lr ? j.lr.toExponential(2) : "-"}, ${fmt.num(j.tokens_per_second, 1)} tok/s, ` +
    `running ${fmt.duration(j.timings ? j.timings.running_seconds : null)}` +
    (j.adapter_name ? `, adapter ${j.adapter_name}${j.adapter_revision ? " r" + j.adapter_revision : ""}` : "") +
    (j.post_eval ? `, eval ${fmt.pct(j.post_eval.accuracy)}` : "");
  showError("train-detail-error", j.error ? `job failed: ${j.error}` : null);
  drawCharts(j);
  drawAdapterEvals(j);
}

// The selected job's curves, one chart each (docs/dashboard.md, "Training"): the loss (with the
// held-out loss at its eval points), the rollouts' mean reward and reverse KL to the teacher
// (online jobs), the learning rate and the gradient norm, as the status reports them per step.
// A chart whose curve the job does not have stays hidden, except the three every job has.
const CHARTS = [
  { key: "loss", title: "loss", curve: "loss_curve", always: true },
  { key: "reward", title: "mean reward of the rollout", curve: "reward_curve" },
  { key: "reverse_kl", title: "reverse KL to the teacher", curve: "reverse_kl_curve" },
  { key: "lr", title: "learning rate", curve: "lr_curve", always: true },
  { key: "grad_norm", title: "gradient norm (before clipping)", curve: "grad_norm_curve", always: true },
];
const SVG_NS = "http://www.w3.org/2000/svg";
// An SVG element; `content` is its text or a child element.
function svgEl(tag, attrs, content) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (content instanceof Node) e.append(content);
  else if (content !== undefined) e.textContent = content;
  return e;
}
$("#train-charts").replaceChildren(...CHARTS.map((c) => el("figure", { "data-curve": c.key },
  el("figcaption", {}, c.title),
  svgEl("svg", { "data-curve": c.key, viewBox: "0 0 360 180", role: "img", "aria-label": c.title }))));

function drawCharts(j) {
  for (const c of CHARTS) {
    const values = j[c.curve] || [];
    const fig = $(`#train-charts figure[data-curve="${c.key}"]`);
    fig.hidden = !c.always && !values.length;
    drawCurve($("svg", fig), values, j.total_steps, c.key === "loss" ? j.eval_loss_curve || [] : []);
  }
}

// An axis label: 4 significant digits, exponent form for very small or large magnitudes.
const tick = (v) => (v !== 0 && (Math.abs(v) < 1e-2 || Math.abs(v) >= 1e4) ? v.toExponential(2) : String(+v.toPrecision(4)));

// One value per step as an SVG polyline with a dot per step (its value in data-value and a
// tooltip), `dots` ([{step, loss}]) as grey dots on the same scale; the x axis spans the job's
// total steps, so the curve grows to the right while the job runs.
function drawCurve(svg, values, totalSteps, dots) {
  const W = 360, H = 180, L = 56, R = 8, T = 10, B = 24;
  const n = Math.max(totalSteps || 0, values.length, 2);
  const finite = values.concat(dots.map((e) => e.loss)).filter(Number.isFinite);
  let lo = finite.length ? Math.min(...finite) : 0, hi = finite.length ? Math.max(...finite) : 1;
  if (hi - lo < 1e-12 * Math.max(1, Math.abs(hi))) { hi += 0.5; lo -= 0.5; }
  const x = (step) => (L + ((step - 1) / (n - 1)) * (W - L - R)).toFixed(1);
  const y = (v) => (T + (1 - (v - lo) / (hi - lo)) * (H - T - B)).toFixed(1);
  const parts = [
    svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }),
    svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
    svgEl("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, tick(hi)),
    svgEl("text", { x: L - 4, y: H - B, "text-anchor": "end" }, tick(lo)),
    svgEl("text", { x: L, y: H - 6 }, "step 1"),
    svgEl("text", { x: W - R, y: H - 6, "text-anchor": "end" }, `step ${n}`),
  ];
  const pts = [];
  values.forEach((v, i) => { if (Number.isFinite(v)) pts.push([i + 1, v]); });
  parts.push(svgEl("polyline", { points: pts.map(([s, v]) => `${x(s)},${y(v)}`).join(" "), class: "curve" }));
  for (const [s, v] of pts)
    parts.push(svgEl("circle", { cx: x(s), cy: y(v), r: 2, class: "point", "data-step": s, "data-value": String(v) },
                     svgEl("title", {}, `step ${s}: ${v}`)));
  for (const e of dots)
    if (Number.isFinite(e.loss))
      parts.push(svgEl("circle", { cx: x(e.step), cy: y(e.loss), r: 3, class: "held-out", "data-step": e.step, "data-value": String(e.loss) },
                       svgEl("title", {}, `step ${e.step}: held-out ${e.loss}`)));
  if (!pts.length) parts.push(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no steps yet"));
  svg.replaceChildren(...parts);
  svg.dataset.points = String(pts.length);
}

// The selected job's adapter's eval results: the post-training eval the job ran, and every eval
// job (run or either side of a comparison) on an adapter of that name; a row opens the eval job.
function drawAdapterEvals(j) {
  const name = j.adapter_name;
  $("#train-evals-adapter").textContent = name || "the adapter";
  const note = (text) => [el("tr", {}, el("td", { colspan: 6, className: "muted" }, text))];
  const passed = (s) => (s && s.total !== undefined ? `${s.passed}/${s.total}` : "-");
  const acc = (s) => (s && s.accuracy !== null && s.accuracy !== undefined
    ? fmt.pct(s.accuracy) + fmt.interval(s.wilson) : "-");
  let rows;
  if (!name) rows = note(j.finished_at ? "the job published no adapter" : "the adapter is published when the job completes");
  else {
    rows = [];
    if (j.post_eval) rows.push(el("tr", { "data-eval": "post" }, el("td", {}, "post-training"), el("td", {}, j.post_eval.suite),
      el("td", {}, j.adapter_revision ? `r${j.adapter_revision}` : "-"), el("td", {}, "completed"), el("td", {}, passed(j.post_eval)), el("td", {}, acc(j.post_eval))));
    for (const e of evals.jobs || []) {
      const sides = e.kind === "compare" ? [[e.adapter_a, e.a], [e.adapter_b, e.b]] : [[e.adapter, e]];
      for (const [who, stats] of sides) {
        if (!who || who.name !== name) continue;
        rows.push(el("tr", { className: "clickable", "data-eval": e.job_id,
                             onclick: () => { evals.selected = e.job_id; evals.open.clear(); location.hash = "#evals"; refreshEvals(); } },
          el("td", {}, e.kind === "compare" ? `${e.job_id} (A/B)` : e.job_id), el("td", {}, e.suite), el("td", {}, `r${who.revision}`),
          el("td", {}, e.state), el("td", {}, passed(stats)), el("td", {}, acc(stats))));
      }
    }
    if (!rows.length) rows = note(evals.available === false ? "evaluation is not available on this server"
                                                            : `no eval of ${name} yet (Evals panel, or config.post_eval)`);
  }
  $("#train-evals tbody").replaceChildren(...rows);
}

async function cancelJob(id) {
  try { await api(`/v1/train/queue/${encodeURIComponent(id)}`, { method: "DELETE" }); } catch (err) { showError("train-detail-error", err); }
  refreshQueue();
}

const EXAMPLE_CONVERSATIONS = [
  [{ role: "user", content: "What is the capital of France?" }, { role: "assistant", content: "Paris." }],
  [{ role: "user", content: "What colour is the sky on a clear day?" }, { role: "assistant", content: "Blue." }],
  [{ role: "user", content: "How many legs does a spider have?" }, { role: "assistant", content: "Eight." }],
];
$("#train-form").examples.value = EXAMPLE_CONVERSATIONS.map((m) => JSON.stringify({ messages: m })).join("\n");

$("#train-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const examples = [];
  const lines = f.examples.value.split("\n").map((l) => l.trim()).filter(Boolean);
  for (let i = 0; i < lines.length; ++i) {
    try { examples.push(JSON.parse(lines[i])); } catch (err) { return showError("train-form-error", `examples line ${i + 1}: ${err.message}`); }
  }
  const config = {
    epochs: Number(f.epochs.value), learning_rate: Number(f.learning_rate.value),
    lora_rank: Number(f.lora_rank.value), seed: Number(f.seed.value), auto_load: f.auto_load.checked,
  };
  if (f.output_name.value.trim()) config.output_name = f.output_name.value.trim();
  try {
    const job = await api("/v1/train/sft", { method: "POST", body: { examples, config } });
    selectedJob = job.job_id;
    showError("train-form-error", null);
    refreshQueue();
  } catch (err) { showError("train-form-error", err); }
});

// The GRPO / OPD form (POST /v1/train/grpo or /v1/train/opd with prompts; docs/training-api.md,
// "Online jobs"). A field with data-for="key:a,b" shows only while the form's kind, prompt source
// or scorer is one of those.

function showJobKind(kind) {
  for (const b of $$("#job-kinds button")) {
    b.classList.toggle("active", b.dataset.kind === kind);
    b.classList.toggle("secondary", b.dataset.kind !== kind);
  }
  const f = $("#online-form");
  $("#train-form").hidden = kind !== "sft";
  f.hidden = kind === "sft";
  if (kind !== "sft") {
    f.dataset.kind = kind;
    $("#online-kind").textContent = kind.toUpperCase();
    f.output_name.placeholder = `${kind}-<hex>`;
    updateOnlineForm();
  }
}
for (const b of $$("#job-kinds button")) b.addEventListener("click", () => showJobKind(b.dataset.kind));

function updateOnlineForm() {
  const f = $("#online-form");
  const state = { kind: f.dataset.kind, source: f.source.value };
  const shown = (node) => {
    const [key, list] = node.dataset.for.split(":");
    return list.split(",").includes(state[key]);
  };
  for (const o of f.scorer.options) if (o.dataset.for) o.hidden = o.disabled = !shown(o);
  if (f.scorer.selectedOptions[0].disabled) f.scorer.value = [...f.scorer.options].find((o) => !o.disabled).value;
  state.scorer = f.scorer.value;
  for (const node of $$("[data-for]", f)) if (node.tagName !== "OPTION") node.hidden = !shown(node);
}
$("#online-form").addEventListener("change", (ev) => { if (["source", "scorer"].includes(ev.target.name)) updateOnlineForm(); });

const EXAMPLE_PROMPTS = [
  { messages: [{ role: "user", content: "What is 2 + 2?" }], reference: "4" },
  { messages: [{ role: "user", content: "What is the capital of France?" }], reference: "Paris" },
];
$("#online-form").prompts.value = EXAMPLE_PROMPTS.map((p) => JSON.stringify(p)).join("\n");
updateOnlineForm();

// A prompts file fills the box, where it can be read and edited before it is sent.
const MAX_PROMPTS_FILE = 8 << 20;
$("#prompts-file").addEventListener("change", async (ev) => {
  const file = ev.target.files[0];
  if (!file) return;
  if (file.size > MAX_PROMPTS_FILE)
    return showError("online-form-error", `${file.name} is ${fmt.bytes(file.size)}; the form reads at most ${fmt.bytes(MAX_PROMPTS_FILE)}`);
  $("#online-form").prompts.value = await file.text();
  showError("online-form-error", null);
});

// JSON typed into a field; an error names the field.
function jsonField(f, name) {
  try { return JSON.parse(f[name].value); } catch (err) { throw new Error(`${name}: not JSON: ${err.message}`); }
}
// A number field's value, or undefined (the server's default) when it is empty.
const numberField = (f, name) => (f[name].value.trim() === "" ? undefined : Number(f[name].value));

// The prompts, from the box (one JSON object a line) or from an eval suite's examples; with a
// suite, `scorer` is the one its examples share (null when they differ) and `scorers` their types.
async function onlinePrompts(f) {
  if (f.source.value === "file") {
    const lines = f.prompts.value.split("\n").map((l) => l.trim()).filter(Boolean);
    if (!lines.length) throw new Error("prompts: choose a JSONL file or write one prompt a line");
    return { prompts: lines.map((l, i) => { try { return JSON.parse(l); } catch (err) { throw new Error(`prompts line ${i + 1}: ${err.message}`); } }) };
  }
  if (!f.suite.value) throw new Error("suite: no eval suite is registered (POST /v1/eval/suites)");
  const suite = await api(`/v1/eval/suites/${encodeURIComponent(f.suite.value)}`);
  const prompts = suite.examples.map((e) => (e.expected === null || e.expected === undefined
    ? { messages: e.messages } : { messages: e.messages, reference: e.expected }));
  const distinct = [...new Set(suite.examples.map((e) => JSON.stringify(e.scorer)))];
  return { prompts, scorer: distinct.length === 1 ? JSON.parse(distinct[0]) : null,
           scorers: [...new Set(suite.examples.map((e) => e.scorer.type))] };
}

// The reward: none (OPD), the server's reward, the suite's scorer, or a scorer with the
// parameters shown for it (an empty parameter is the scorer's default).
function onlineReward(f, source) {
  const kind = f.scorer.value;
  if (kind === "none") return undefined;
  if (kind === "server") return { server: true };
  if (kind === "suite") {
    if (!source.scorer) throw new Error(`reward: the suite's examples use different scorers (${source.scorers.join(", ")}); pick one`);
    return { scorer: source.scorer };
  }
  const spec = { type: kind };
  const given = (name) => !f[name].closest("[data-for]").hidden && f[name].value.trim() !== "";
  if (given("case_sensitive")) spec.case_sensitive = f.case_sensitive.value === "true";
  if (given("pattern")) spec.pattern = f.pattern.value;
  for (const k of ["tolerance", "relative"]) if (given(k)) spec[k] = Number(f[k].value);
  if (given("choices")) spec.choices = f.choices.value.trim();
  if (given("require_match")) spec.require_match = f.require_match.value === "true";
  if (given("schema")) spec.schema = jsonField(f, "schema");
  if (given("of")) spec.of = jsonField(f, "of");
  return { scorer: spec };
}

$("#online-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const kind = f.dataset.kind;
  try {
    const source = await onlinePrompts(f);
    const body = { prompts: source.prompts, reward: onlineReward(f, source), config: {
      steps: numberField(f, "steps"), group_size: numberField(f, "group_size"), max_tokens: numberField(f, "max_tokens"),
      temperature: numberField(f, "temperature"), learning_rate: numberField(f, "learning_rate"),
      lora_rank: numberField(f, "lora_rank"), seed: numberField(f, "seed"), auto_load: f.auto_load.checked,
    } };
    if (f.output_name.value.trim()) body.config.output_name = f.output_name.value.trim();
    if (kind === "opd") {
      body.teacher = {};
      if (f.teacher.value) body.teacher.adapter = f.teacher.value;
      if (f.system_prompt.value.trim()) body.teacher.system_prompt = f.system_prompt.value;
      const coeff = numberField(f, "reward_coeff");
      if (coeff) body.config.reward_coeff = coeff;
    }
    const job = await api(`/v1/train/${kind}`, { method: "POST", body });
    selectedJob = job.job_id;
    showError("online-form-error", null);
    refreshQueue();
  } catch (err) { showError("online-form-error", err); }
});

// ---------------------------------------------------------------------------------------------
// Evaluation (docs/evals.md): suites, jobs, a job's per-example outcomes (a row opens its
// prompt, expected answer, output and scorer detail), A/B comparison. A 404 from
// GET /v1/eval/suites means this server has no evaluation: the panel says so and stops polling.

const evals = { available: null, selected: null, open: new Set(), jobs: [] };

async function refreshEvals() {
  if (evals.available === false) return;
  let suites, jobs;
  try {
    suites = await api("/v1/eval/suites");
    jobs = await api("/v1/eval/jobs");
  } catch (err) {
    if (err.status === 404) {
      evals.available = false;
      $("#evals-unavailable").hidden = false;
      $("#evals-body").hidden = true;
      return;
    }
    return showError("evals-error", err);
  }
  evals.available = true;
  evals.jobs = jobs.data;
  $("#eval-suites tbody").replaceChildren(...(suites.data.length ? suites.data.map((s) => el("tr", { "data-suite": s.name },
    el("td", {}, s.name), el("td", {}, s.examples), el("td", { className: "muted" }, s.description || "")))
    : [el("tr", {}, el("td", { colspan: 3, className: "muted" }, "no suites registered (POST /v1/eval/suites)"))]));
  for (const sel of $$("select.suite-picker")) {
    const keep = sel.value;
    sel.replaceChildren(...suites.data.map((s) => el("option", { value: s.name }, s.name)));
    if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  }
  const who = (a) => (a ? `${a.name} r${a.revision}` : "(base)");
  $("#eval-jobs tbody").replaceChildren(...(jobs.data.length ? jobs.data.map((j) => el("tr", {
      className: `clickable${j.job_id === evals.selected ? " selected" : ""}`, "data-job": j.job_id,
      onclick: () => { evals.selected = j.job_id; evals.open.clear(); refreshEvals(); } },
    el("td", {}, j.job_id), el("td", {}, j.kind), el("td", {}, j.suite),
    el("td", {}, j.kind === "compare" ? `${who(j.adapter_a)} vs ${who(j.adapter_b)}` : who(j.adapter)),
    el("td", {}, j.state),
    el("td", {}, j.kind === "compare" ? `${fmt.pct(j.a && j.a.accuracy)} vs ${fmt.pct(j.b && j.b.accuracy)}` : fmt.pct(j.accuracy))))
    : [el("tr", {}, el("td", { colspan: 6, className: "muted" }, "no eval jobs"))]));
  if (evals.selected) await refreshEvalJob(evals.selected);
}

function drillRow(cols, entries) {
  return el("tr", { className: "drill" }, el("td", { colspan: cols },
    entries.map(([label, text]) => el("div", {}, el("strong", {}, label), el("pre", {}, text)))));
}

const show = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
const promptText = (msgs) => (msgs || []).map((m) => `${m.role}: ${m.content}`).join("\n");

async function refreshEvalJob(id) {
  let j;
  try { j = await api(`/v1/eval/jobs/${encodeURIComponent(id)}`); } catch (err) { return showError("evals-error", err); }
  $("#eval-detail").hidden = false;
  $("#eval-detail-id").textContent = j.job_id;
  const st = $("#eval-detail-state");
  st.textContent = j.state;
  st.dataset.state = j.state;
  const interval = (w) => (w ? `${fmt.interval(w)} (95% Wilson)` : "");
  const prog = j.progress ? `${j.progress.done}/${j.progress.total} done. ` : "";
  const head = $("#eval-outcomes thead"), body = $("#eval-outcomes tbody");
  const toggle = (i) => () => { evals.open.has(i) ? evals.open.delete(i) : evals.open.add(i); refreshEvalJob(id); };
  const rows = [];
  if (j.kind === "compare") {
    const f = j.flips || {};
    $("#eval-detail-summary").textContent = prog +
      `A: ${fmt.pct(j.a && j.a.accuracy)}${interval(j.a && j.a.wilson)}; B: ${fmt.pct(j.b && j.b.accuracy)}${interval(j.b && j.b.wilson)}. ` +
      `Flips: A only ${f.a_only ?? 0}, B only ${f.b_only ?? 0}, both pass ${f.both_pass ?? 0}, both fail ${f.both_fail ?? 0}.` +
      (j.error ? ` Error: ${j.error}` : "");
    head.replaceChildren(el("tr", {}, ["#", "expected", "A", "B", "flip"].map((h) => el("th", {}, h))));
    for (const p of j.pairs || []) {
      rows.push(el("tr", { className: "clickable outcome", "data-index": p.index, onclick: toggle(p.index) },
        el("td", {}, p.index), el("td", {}, show(p.expected)),
        el("td", { className: p.a && p.a.passed ? "pass" : "fail" }, p.a && p.a.passed ? "pass" : "fail"),
        el("td", { className: p.b && p.b.passed ? "pass" : "fail" }, p.b && p.b.passed ? "pass" : "fail"),
        el("td", {}, p.flip || "")));
      if (evals.open.has(p.index))
        rows.push(drillRow(5, [["prompt", promptText(p.prompt)], ["expected", show(p.expected)],
          ["A output", p.a ? p.a.output : ""], ["A detail", p.a ? p.a.detail : ""],
          ["B output", p.b ? p.b.output : ""], ["B detail", p.b ? p.b.detail : ""]]));
    }
  } else {
    $("#eval-detail-summary").textContent = prog +
      (j.accuracy === null || j.accuracy === undefined ? "no outcome yet" : `accuracy ${j.passed}/${j.total} = ${fmt.pct(j.accuracy)}${interval(j.wilson)}`) +
      (j.error ? `. Error: ${j.error}` : "");
    head.replaceChildren(el("tr", {}, ["#", "expected", "output", "scorer", "result"].map((h) => el("th", {}, h))));
    for (const o of j.outcomes || []) {
      rows.push(el("tr", { className: "clickable outcome", "data-index": o.index, onclick: toggle(o.index) },
        el("td", {}, o.index), el("td", {}, show(o.expected)), el("td", {}, (o.output || "").slice(0, 120)),
        el("td", {}, o.scorer), el("td", { className: o.passed ? "pass" : "fail" }, o.passed ? "pass" : "fail")));
      if (evals.open.has(o.index))
        rows.push(drillRow(5, [["prompt", promptText(o.prompt)], ["expected", show(o.expected)], ["output", o.output || ""],
          ["scorer", `${o.scorer}: ${o.detail}`], ["finish reason", o.finish_reason || "-"]]));
    }
  }
  body.replaceChildren(...rows);
}

async function submitEval(path, body) {
  try {
    const job = await api(path, { method: "POST", body });
    evals.selected = job.job_id;
    evals.open.clear();
    showError("evals-error", null);
    refreshEvals();
  } catch (err) { showError("evals-error", err); }
}

$("#eval-run-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target;
  submitEval("/v1/eval/run", { suite: f.suite.value, adapter: f.adapter.value || null, seed: Number(f.seed.value) });
});
$("#eval-compare-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target;
  submitEval("/v1/eval/compare", { suite: f.suite.value, adapter_a: f.adapter_a.value || null,
                                   adapter_b: f.adapter_b.value || null, seed: Number(f.seed.value) });
});

// ---------------------------------------------------------------------------------------------
// Playground: the conversation goes to /v1/chat/completions with stream: true and the reply is
// read from the response body as server-sent events, appended as each chunk arrives.

const chat = { messages: [], controller: null };

function addMessage(role, text) {
  const body = el("span", { className: "content" }, text);
  const reasoning = el("span", { className: "reasoning" });
  const div = el("div", { className: `msg ${role}` }, el("span", { className: "role" }, role), reasoning, body);
  $("#chat-log").append(div);
  return { div, body, reasoning };
}

async function sendChat(text) {
  chat.messages.push({ role: "user", content: text });
  addMessage("user", text);
  const out = addMessage("assistant", "");
  out.div.dataset.streaming = "1";
  const req = { model: status.health ? status.health.model : undefined, messages: chat.messages, stream: true,
                max_tokens: Number($("#chat-max-tokens").value), temperature: Number($("#chat-temperature").value) };
  const adapter = $("#chat-adapter").value;
  if (adapter === "") req.adapter = null;  // the base model
  else if (adapter !== "@default") req.adapter = adapter;
  chat.controller = new AbortController();
  $("#chat-send").disabled = true;
  $("#chat-stop").disabled = false;
  let content = "";
  try {
    const res = await authFetch("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
                                                          body: JSON.stringify(req), signal: chat.controller.signal });
    if (!res.ok) {
      const e = await res.json().catch(() => ({}));
      throw new Error((e.error && e.error.message) || `HTTP ${res.status}`);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", done = false;
    while (!done) {
      const r = await reader.read();
      if (r.done) break;
      buffer += decoder.decode(r.value, { stream: true });
      // Events end with a blank line; keep an unfinished one for the next read.
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") { done = true; break; }
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message);
          const delta = (chunk.choices && chunk.choices[0] && chunk.choices[0].delta) || {};
          if (delta.reasoning_content) out.reasoning.textContent += delta.reasoning_content;
          if (delta.content) { content += delta.content; out.body.textContent = content; }
        }
      }
      $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
    }
    showError("chat-error", null);
  } catch (err) {
    if (err.name !== "AbortError") showError("chat-error", err);
  } finally {
    chat.messages.push({ role: "assistant", content });
    delete out.div.dataset.streaming;
    out.div.dataset.done = "1";
    chat.controller = null;
    $("#chat-send").disabled = false;
    $("#chat-stop").disabled = true;
  }
}

$("#chat-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("#chat-input").value.trim();
  if (!text || chat.controller) return;
  $("#chat-input").value = "";
  sendChat(text);
});
$("#chat-input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("#chat-form").requestSubmit(); }
});
$("#chat-stop").addEventListener("click", () => chat.controller && chat.controller.abort());
$("#chat-clear").addEventListener("click", () => { chat.messages = []; $("#chat-log").replaceChildren(); });

// ---------------------------------------------------------------------------------------------
// Polling: status every second, the training queue every half second (the curves move
// with each step), adapters and evals every two seconds; a poll never overlaps the previous one
// of its kind.

function every(ms, fn) {
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try { await fn(); } finally { busy = false; }
  };
  tick();
  setInterval(tick, ms);
}

showTab();
every(1000, pollStatus);
every(500, refreshQueue);
every(2000, refreshAdapters);
every(2000, refreshEvals);
