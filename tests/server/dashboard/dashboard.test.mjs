// The /ui/ dashboard in headless Chromium (playwright-core driving Debian's chromium) against a
// running `kiln serve` of the tiny-chat model with an API key (run.sh starts it, and a second one
// without a key). The page asks for the key and keeps it in the tab; then each test drives one
// panel the way a person would and asserts what the page shows against what the server's API
// answers; every panel is saved as a screenshot under KILN_SCREENSHOTS. The tests share one page
// and run in order (the adapter test needs the adapter the training test made).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { chromium } from "playwright-core";

const BASE = process.env.KILN_UI_URL;
const OPEN_BASE = process.env.KILN_OPEN_UI_URL;  // a server without a key
const KEY = process.env.KILN_API_KEY;
const MODEL_ID = process.env.KILN_MODEL_ID;
const SHOTS = process.env.KILN_SCREENSHOTS;
assert.ok(BASE && OPEN_BASE && KEY && MODEL_ID && SHOTS && process.env.KILN_CHROMIUM,
          "run.sh sets KILN_UI_URL, KILN_OPEN_UI_URL, KILN_API_KEY, KILN_MODEL_ID, KILN_SCREENSHOTS, KILN_CHROMIUM");
const AUTH = { Authorization: `Bearer ${KEY}` };
const KEY_ITEM = "kiln-api-key";  // the page's sessionStorage item

let browser, page;
const consoleErrors = [];
// Until the page holds the right key, its calls are answered 401 (Chromium logs each as a
// console error): expected then, an error after.
let keyAccepted = false;
const unauthorizedBeforeKey = [];
const requestedUrls = [];
let evalAvailable = false;
let grpoRefusalProvoked = false;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function shot(name) {
  const file = path.join(SHOTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`screenshot: ${file}`);
}
async function openTab(name) {
  await page.click(`nav a[data-tab="${name}"]`);
  await page.waitForSelector(`#panel-${name}.active`);
}
async function getJson(p) {
  const r = await fetch(BASE + p, { headers: AUTH });
  return { status: r.status, body: await r.json() };
}
const pollCount = (text) => Number((/poll (\d+)/.exec(text) || [0, 0])[1]);
async function waitForPolls(p, n) {
  await p.waitForFunction((k) => Number((/poll (\d+)/.exec(document.querySelector("#status-updated").textContent) || [0, 0])[1]) >= k, n);
}

// What a chart plots: its dots' step, value (data-value), height and tooltip, in step order.
async function chartPoints(key) {
  return page.$$eval(`#train-charts svg[data-curve="${key}"] circle.point`, (cs) => cs.map((c) => ({
    step: Number(c.dataset.step), value: Number(c.dataset.value), y: Number(c.getAttribute("cy")),
    tooltip: c.querySelector("title") ? c.querySelector("title").textContent : null })));
}
const hiddenCharts = () => page.$$eval("#train-charts figure[hidden]", (fs) => fs.map((f) => f.dataset.curve));
// Each chart of `charts` ({chart: status field}) plots exactly the job's curve from its status, one
// dot a step, and draws a larger value no lower than a smaller one, the largest at the top and the
// smallest at the bottom.
async function assertChartsShow(job, charts) {
  for (const [key, field] of Object.entries(charts)) {
    const values = job[field];
    assert.equal(values.length, job.total_steps, `${field}: ${JSON.stringify(values)}`);
    await page.waitForFunction(([k, n]) => Number(document.querySelector(`#train-charts svg[data-curve="${k}"]`).dataset.points) === n,
                               [key, values.length]);
    assert.equal(await page.isVisible(`#train-charts figure[data-curve="${key}"]`), true, `${key} chart shown`);
    const pts = await chartPoints(key);
    assert.deepEqual(pts.map((p) => p.step), values.map((_, i) => i + 1), key);
    assert.deepEqual(pts.map((p) => p.value), values, key);
    assert.deepEqual(pts.map((p) => p.tooltip), values.map((v, i) => `step ${i + 1}: ${v}`), key);
    for (const a of pts) for (const b of pts) if (a.value > b.value) assert.ok(a.y <= b.y, `${key}: ${JSON.stringify([a, b])}`);
    const ys = pts.map((p) => p.y);
    assert.equal(pts[values.indexOf(Math.max(...values))].y, Math.min(...ys), `${key}: the largest value is at the top`);
    assert.equal(pts[values.indexOf(Math.min(...values))].y, Math.max(...ys), `${key}: the smallest value is at the bottom`);
  }
}
// Waits for the job the form just started (the detail shows a job other than `previous`) to end.
async function waitForNewJob(previous) {
  await page.waitForFunction((p) => document.querySelector("#train-detail-id").textContent !== p, previous, { timeout: 10000 });
  const id = await page.textContent("#train-detail-id");
  await page.waitForFunction(() => ["completed", "failed", "cancelled"].includes(document.querySelector("#train-detail-state").dataset.state),
                             null, { timeout: 60000 });
  const job = (await getJson(`/v1/train/status/${id}`)).body;
  assert.equal(job.state, "completed", job.error);
  return job;
}
async function postJson(p, body) {
  const r = await fetch(BASE + p, { method: "POST", headers: { "Content-Type": "application/json", ...AUTH }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}
const ONLINE = (name) => `#online-form [name="${name}"]`;

before(async () => {
  evalAvailable = (await fetch(`${BASE}/v1/eval/suites`, { headers: AUTH })).status !== 404;
  browser = await chromium.launch({ executablePath: process.env.KILN_CHROMIUM, headless: true,
                                    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("request", (req) => requestedUrls.push(req.url()));
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    if (!keyAccepted && msg.text().includes("status of 401")) return unauthorizedBeforeKey.push(msg.location().url || "?");
    // Without the eval routes the panel's probe of /v1/eval/* is an expected 404.
    if (!evalAvailable && (msg.location().url || "").includes("/v1/eval/")) return;
    // The one refusal the GRPO test provokes (a pattern that does not compile).
    if (grpoRefusalProvoked && msg.text().includes("status of 400") && (msg.location().url || "").endsWith("/v1/train/grpo")) return;
    consoleErrors.push(`${msg.text()} (${msg.location().url || "?"})`);
  });
  page.on("pageerror", (err) => consoleErrors.push(`uncaught: ${err.message}`));
});

after(async () => {
  if (browser) await browser.close();
});

test("/ redirects to the dashboard and the files come from the binary with their content types", async () => {
  const root = await fetch(`${BASE}/`, { redirect: "manual" });
  assert.equal(root.status, 302);
  assert.equal(root.headers.get("location"), "/ui/");
  const expect = { "/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css" };
  for (const [p, type] of Object.entries(expect)) {
    const r = await fetch(BASE + p);
    assert.equal(r.status, 200, p);
    assert.ok(r.headers.get("content-type").startsWith(type), `${p}: ${r.headers.get("content-type")}`);
  }
  assert.equal((await fetch(`${BASE}/ui/missing.js`)).status, 404);
  assert.equal((await fetch(`${BASE}/ui/..%2Fconfig.json`)).status, 404);
});

test("on a server without a key the page asks for none and shows its status", async () => {
  const open = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const unauthorized = [];
  open.on("response", (res) => { if (res.status() === 401) unauthorized.push(res.url()); });
  try {
    await open.goto(`${OPEN_BASE}/ui/`);
    await waitForPolls(open, 2);
    const health = await (await fetch(`${OPEN_BASE}/health`)).json();
    assert.equal(await open.textContent('.card[data-key="model"] .value'), health.model);
    assert.equal(await open.isHidden("#key-form"), true);
    assert.deepEqual(unauthorized, []);
    assert.equal(await open.evaluate((item) => sessionStorage.getItem(item), KEY_ITEM), null);
  } finally {
    await open.close();
  }
});

test("the page asks for the key, refuses a wrong one with the server's message, keeps the right one in the tab only", async () => {
  // The API is closed without the key; the page and /health are open.
  assert.equal((await fetch(`${BASE}/v1/models`)).status, 401);
  await page.goto(`${BASE}/ui/`);
  await page.waitForSelector("#key-form:not([hidden])");
  assert.match(await page.textContent("#key-form"), /This server needs an API key/);
  assert.equal(await page.getAttribute("#key-input", "type"), "password");
  assert.equal(await page.textContent("#status-updated"), "", "no status shown before the key");
  await shot("key-prompt");

  await page.fill("#key-input", `${KEY}-wrong`);
  await page.click('#key-form button[type="submit"]');
  await page.waitForSelector("#key-error:not([hidden])");
  assert.match(await page.textContent("#key-error"), /not this server's/);
  assert.equal(await page.isVisible("#key-form"), true, "asked again");
  assert.equal(await page.evaluate((item) => sessionStorage.getItem(item), KEY_ITEM), null, "a refused key is not kept");
  await shot("key-refused");

  await page.fill("#key-input", KEY);
  await page.click('#key-form button[type="submit"]');
  await waitForPolls(page, 2);
  assert.equal(await page.isHidden("#key-form"), true);
  assert.equal(await page.textContent('.card[data-key="model"] .value'), MODEL_ID);
  const stored = await page.evaluate(() => ({
    session: sessionStorage.getItem("kiln-api-key"), href: location.href,
    local: Object.keys(localStorage).map((k) => `${k}=${localStorage.getItem(k)}`).join(";"), cookie: document.cookie,
  }));
  assert.equal(stored.session, KEY);
  assert.ok(!stored.href.includes(KEY), stored.href);
  assert.ok(!stored.local.includes(KEY), "the key is in localStorage");
  assert.ok(!stored.cookie.includes(KEY), "the key is in a cookie");
  assert.deepEqual(await page.context().cookies(), []);
  // Calls sent without the key before it was entered have all been answered by now.
  await waitForPolls(page, pollCount(await page.textContent("#status-updated")) + 1);
  keyAccepted = true;
  assert.ok(unauthorizedBeforeKey.length > 0, "the page met the server's 401 before it asked");
});

test("the dashboard loads and the status panel shows live values from /health and /metrics", async () => {
  // A reload keeps the key: the same tab's sessionStorage.
  await page.goto(`${BASE}/ui/`);
  await page.waitForFunction(() => /poll \d+/.test(document.querySelector("#status-updated").textContent));
  assert.equal(await page.isHidden("#key-form"), true);
  const card = (key) => page.textContent(`.card[data-key="${key}"] .value`);
  const health = (await getJson("/health")).body;
  assert.equal(await card("model"), MODEL_ID);
  assert.equal(await card("backend"), health.backend);
  // Memory as /health reports it ("used / total", in binary units).
  assert.ok(health.memory && health.memory.device_total_bytes > 0, JSON.stringify(health.memory));
  assert.match(await card("memory"), /^[0-9.]+ (KiB|MiB|GiB|TiB) \/ [0-9.]+ (MiB|GiB|TiB)$/);
  // K/V blocks "used / free": free as /health reports it (nothing runs now, so it is stable).
  const kv = (await card("kv_blocks")).split("/").map((s) => Number(s.trim().replace(/,/g, "")));
  assert.equal(kv[1], health.engine.kv_blocks_free);
  assert.equal(kv[0], health.engine.kv_blocks_total - health.engine.kv_blocks_free - health.engine.kv_blocks_cached);
  // Live: the poll counter and the uptime move on their own.
  const poll = (t) => Number(/poll (\d+)/.exec(t)[1]);
  const first = poll(await page.textContent("#status-updated"));
  const uptime0 = await card("uptime");
  await page.waitForFunction((n) => Number(/poll (\d+)/.exec(document.querySelector("#status-updated").textContent)[1]) >= n + 2, first);
  assert.notEqual(await card("uptime"), uptime0);
  assert.equal(await page.textContent("#header-status"), "ready");
  await shot("status");
});

test("a playground message streams a reply that grows across DOM updates", async () => {
  await openTab("playground");
  // A request that names no adapter (the server's default) unless the user picks one.
  assert.equal(await page.inputValue("#chat-adapter"), "@default");
  await page.fill("#chat-max-tokens", "24");
  // Every value the reply's text takes, in order: each record's added text node holds the text
  // as the page set it then (records of one task arrive together, so the live text would not).
  await page.evaluate(() => {
    window.__replyValues = [];
    window.__replyCallbacks = 0;
    new MutationObserver((records) => {
      ++window.__replyCallbacks;
      for (const r of records) {
        if (!(r.target.matches && r.target.matches(".msg.assistant .content"))) continue;
        for (const n of r.addedNodes) if (n.nodeType === Node.TEXT_NODE) window.__replyValues.push(n.data);
      }
    }).observe(document.querySelector("#chat-log"), { subtree: true, childList: true });
  });
  await page.fill("#chat-input", "Tell me a story about a kiln.");
  await page.click("#chat-send");
  await page.waitForSelector(".msg.assistant[data-done]", { timeout: 30000 });
  const values = await page.evaluate(() => window.__replyValues.filter((v) => v.length > 0));
  const final = await page.textContent(".msg.assistant .content");
  assert.ok(values.length >= 2, `the reply was set ${values.length} time(s): ${JSON.stringify(values)}`);
  for (let i = 1; i < values.length; ++i)
    assert.ok(values[i].startsWith(values[i - 1]) && values[i].length > values[i - 1].length,
              `update ${i} does not extend the previous text: ${JSON.stringify(values.slice(i - 1, i + 1))}`);
  assert.equal(values[values.length - 1], final);
  assert.equal(await page.isHidden("#chat-error"), true, await page.textContent("#chat-error"));
  console.log(`playground: ${values.length} text updates in ${await page.evaluate(() => window.__replyCallbacks)} observer callbacks, ${final.length} chars`);
  await shot("playground");
});

test("a training job started from the page draws a growing loss curve and completes", async () => {
  await openTab("training");
  await page.fill('#train-form input[name="output_name"]', "ui-sft");
  // 90 steps: long enough to be seen running on a fast machine too.
  await page.fill('#train-form input[name="epochs"]', "30");
  await page.fill('#train-form input[name="lora_rank"]', "2");
  await page.click('#train-form button[type="submit"]');
  // Sample the chart while the job runs: the number of plotted points must grow.
  const seen = [];
  let midShot = false;
  const deadline = Date.now() + 45000;
  let state = "";
  while (Date.now() < deadline) {
    state = await page.evaluate(() => document.querySelector("#train-detail-state").dataset.state || "");
    const points = Number(await page.evaluate(() => document.querySelector('#train-charts svg[data-curve="loss"]').dataset.points || "0"));
    if (state === "running" && (seen.length === 0 || seen[seen.length - 1] !== points)) seen.push(points);
    if (state === "running" && points >= 3 && !midShot) { await shot("training-running"); midShot = true; }
    if (["completed", "failed", "cancelled"].includes(state)) break;
    await sleep(150);
  }
  assert.equal(state, "completed", await page.textContent("#train-detail-error"));
  assert.ok(seen.filter((n) => n > 0).length >= 2, `point counts seen while running: ${JSON.stringify(seen)}`);
  for (let i = 1; i < seen.length; ++i) assert.ok(seen[i] > seen[i - 1], `points went ${JSON.stringify(seen)}`);
  // The finished chart has one point per step of the job, as the API reports it.
  const id = await page.textContent("#train-detail-id");
  const job = (await getJson(`/v1/train/status/${id}`)).body;
  await page.waitForFunction((n) => Number(document.querySelector('#train-charts svg[data-curve="loss"]').dataset.points) === n, job.loss_curve.length);
  assert.equal(job.loss_curve.length, job.total_steps);
  await assertChartsShow(job, { loss: "loss_curve", lr: "lr_curve", grad_norm: "grad_norm_curve" });
  assert.deepEqual(await hiddenCharts(), ["reward", "reverse_kl"], "an SFT job has no reward or KL curve");
  console.log(`training: ${job.total_steps} steps in ${job.timings.running_seconds.toFixed(1)} s; points seen while running ${JSON.stringify(seen)}`);
  await shot("training");
});

test("the adapters panel lists the trained adapter as default and opens its receipt", async () => {
  await openTab("adapters");
  await page.waitForSelector('#adapters-table tr[data-name="ui-sft"]');
  const row = await page.$$eval('#adapters-table tr[data-name="ui-sft"] td', (tds) => tds.map((t) => t.textContent));
  assert.equal(row[4], "yes");  // auto_load made it the default
  await page.click('#adapters-table tr[data-name="ui-sft"] button:has-text("provenance")');
  await page.waitForSelector("#provenance-summary table");
  const summary = await page.textContent("#provenance-summary");
  const receipt = (await getJson("/v1/adapters/ui-sft/receipt")).body;
  assert.equal(receipt.job_type, "sft");
  assert.ok(summary.includes(receipt.data_sha256), summary);
  assert.ok(summary.includes(`(${receipt.loss_curve.length} steps)`), summary);
  assert.equal((await getJson("/v1/adapters/nope/receipt")).status, 404);
  await shot("adapters");
});

test("an eval job's per-example results show, with drill-down and an A/B comparison", async (t) => {
  await openTab("evals");
  if (!evalAvailable) {
    await page.waitForSelector("#evals-unavailable:not([hidden])");
    await shot("evals");
    t.skip("SKIPPED: this server has no /v1/eval routes (404); the panel says evaluation is not available");
    return;
  }
  const suite = { name: "ui-suite", overwrite: true, scorer: "contains", examples: [
    { messages: [{ role: "user", content: "What is the capital of France?" }], expected: "Paris" },
    { messages: [{ role: "user", content: "How many legs does a spider have?" }], expected: "Eight" },
  ] };
  const reg = await fetch(`${BASE}/v1/eval/suites`, { method: "POST", headers: { "Content-Type": "application/json", ...AUTH },
                                                       body: JSON.stringify(suite) });
  assert.equal(reg.status, 200, await reg.text());
  await page.waitForSelector('#eval-run-form select[name="suite"] option[value="ui-suite"]', { state: "attached", timeout: 10000 });
  await page.selectOption('#eval-run-form select[name="suite"]', "ui-suite");
  await page.selectOption('#eval-run-form select[name="adapter"]', "ui-sft");
  await page.click('#eval-run-form button[type="submit"]');
  await page.waitForFunction(() => document.querySelector("#eval-detail-state").dataset.state === "completed", null, { timeout: 30000 });
  await page.waitForFunction(() => document.querySelectorAll("#eval-outcomes tr.outcome").length === 2);
  const id = await page.textContent("#eval-detail-id");
  const job = (await getJson(`/v1/eval/jobs/${id}`)).body;
  const results = await page.$$eval("#eval-outcomes tr.outcome td:last-child", (tds) => tds.map((t) => t.textContent));
  assert.deepEqual(results, job.outcomes.map((o) => (o.passed ? "pass" : "fail")));
  await page.click('#eval-outcomes tr.outcome[data-index="0"]');
  await page.waitForSelector("#eval-outcomes tr.drill");
  const drill = await page.textContent("#eval-outcomes tr.drill");
  assert.ok(drill.includes("What is the capital of France?") && drill.includes(job.outcomes[0].detail), drill);
  // The job list polls separately: let it catch up before the screenshot.
  await page.waitForFunction((jid) => (document.querySelector(`#eval-jobs tr[data-job="${jid}"]`) || {}).textContent?.includes("completed"), id);
  await shot("evals");

  await page.selectOption('#eval-compare-form select[name="suite"]', "ui-suite");
  await page.selectOption('#eval-compare-form select[name="adapter_a"]', "");
  await page.selectOption('#eval-compare-form select[name="adapter_b"]', "ui-sft");
  await page.click('#eval-compare-form button[type="submit"]');
  await page.waitForFunction((prev) => document.querySelector("#eval-detail-id").textContent !== prev
    && document.querySelector("#eval-detail-state").dataset.state === "completed", id, { timeout: 30000 });
  await page.waitForFunction(() => document.querySelectorAll("#eval-outcomes tr.outcome").length === 2);
  const cmp = (await getJson(`/v1/eval/jobs/${await page.textContent("#eval-detail-id")}`)).body;
  const summary = await page.textContent("#eval-detail-summary");
  assert.ok(summary.includes(`B only ${cmp.flips.b_only}`) && summary.includes(`both fail ${cmp.flips.both_fail}`), summary);
  await shot("evals-compare");
});

test("a GRPO job from the form: the server's 400s are shown, then its curves are charted with its adapter's evals", async () => {
  await openTab("training");
  await page.click('#job-kinds button[data-kind="grpo"]');
  await page.waitForSelector("#online-form:not([hidden])");
  assert.equal(await page.isHidden("#train-form"), true);
  assert.equal(await page.isHidden('#online-form div[data-for="kind:opd"]'), true, "no teacher for GRPO");
  // Prompts from an eval suite where the server has them (the previous test registered
  // ui-suite), else from a file; the reward is a regex scorer with its pattern.
  const prompts = [{ messages: [{ role: "user", content: "Name a colour." }], reference: "red" },
                   { messages: [{ role: "user", content: "Name a fruit." }], reference: "apple" }];
  if (evalAvailable) {
    await page.check('#online-form input[name="source"][value="suite"]');
    await page.selectOption(ONLINE("suite"), "ui-suite");
  } else {
    await page.setInputFiles("#prompts-file", { name: "prompts.jsonl", mimeType: "application/x-ndjson",
                                                buffer: Buffer.from(prompts.map((p) => JSON.stringify(p)).join("\n")) });
  }
  await page.fill(ONLINE("output_name"), "ui-grpo");
  for (const [k, v] of Object.entries({ steps: "3", group_size: "2", max_tokens: "8", lora_rank: "2" })) await page.fill(ONLINE(k), v);
  grpoRefusalProvoked = true;
  const before = await page.textContent("#train-detail-id");
  // Submits the form, which the server must refuse: the page shows exactly the message and field
  // the server answers the same body with. Returns that body.
  const refusedSubmit = async (param) => {
    const shown = await page.textContent("#online-form-error");
    const [req] = await Promise.all([page.waitForRequest((r) => r.url().endsWith("/v1/train/grpo")),
                                     page.click('#online-form button[type="submit"]')]);
    await page.waitForFunction((t) => { const e = document.querySelector("#online-form-error"); return !e.hidden && e.textContent !== t; }, shown);
    const body = req.postDataJSON();
    const refused = await postJson("/v1/train/grpo", body);
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.equal(refused.body.error.param, param);
    assert.equal(await page.textContent("#online-form-error"), `${refused.body.error.message} (${param})`);
    return body;
  };
  if (evalAvailable) {
    // The suite's prompts and its own scorer, with a temperature the server refuses.
    await page.selectOption(ONLINE("scorer"), "suite");
    await page.fill(ONLINE("temperature"), "0");
    const body = await refusedSubmit("config.temperature");
    const suite = (await getJson("/v1/eval/suites/ui-suite")).body;
    assert.deepEqual(body.prompts, suite.examples.map((e) => ({ messages: e.messages, reference: e.expected })));
    assert.deepEqual(body.reward, { scorer: suite.examples[0].scorer });
    await page.fill(ONLINE("temperature"), "1");
  }
  // A regex whose pattern does not compile.
  await page.selectOption(ONLINE("scorer"), "regex");
  assert.equal(await page.isVisible(ONLINE("pattern")), true);
  assert.equal(await page.isHidden(ONLINE("tolerance")), true);
  await page.fill(ONLINE("pattern"), "(");
  assert.deepEqual((await refusedSubmit("reward.scorer.pattern")).reward, { scorer: { type: "regex", pattern: "(" } });
  await shot("training-grpo-error");

  await page.fill(ONLINE("pattern"), "^\\s*[a-z]");
  await page.click('#online-form button[type="submit"]');
  const job = await waitForNewJob(before);
  assert.equal(job.job_type, "grpo");
  assert.equal(await page.isHidden("#online-form-error"), true);
  await assertChartsShow(job, { loss: "loss_curve", reward: "reward_curve", lr: "lr_curve", grad_norm: "grad_norm_curve" });
  assert.deepEqual(await hiddenCharts(), ["reverse_kl"], "a GRPO job has no KL curve");
  console.log(`grpo: ${job.total_steps} steps in ${job.timings.running_seconds.toFixed(1)} s, rewards ${JSON.stringify(job.reward_curve)}`);

  if (evalAvailable) {
    // An eval of the new adapter appears under its charts, as the eval job reports it.
    const run = await postJson("/v1/eval/run", { suite: "ui-suite", adapter: "ui-grpo" });
    assert.equal(run.status, 200, JSON.stringify(run.body));
    const row = `#train-evals tr[data-eval="${run.body.job_id}"]`;
    await page.waitForFunction((sel) => (document.querySelector(sel) || {}).textContent?.includes("completed"), row, { timeout: 30000 });
    const ev = (await getJson(`/v1/eval/jobs/${run.body.job_id}`)).body;
    const cells = await page.$$eval(`${row} td`, (tds) => tds.map((t) => t.textContent));
    assert.equal(await page.textContent("#train-evals-adapter"), "ui-grpo");
    assert.deepEqual(cells.slice(1, 5), ["ui-suite", `r${ev.adapter.revision}`, "completed", `${ev.passed}/${ev.total}`]);
    assert.ok(cells[5].startsWith(`${(100 * ev.accuracy).toFixed(1)}%`), cells[5]);
  }
  await shot("training-grpo");
});

test("an OPD job from the form with prompts from a file charts its reverse KL to the teacher", async () => {
  await page.click('#job-kinds button[data-kind="opd"]');
  await page.waitForSelector('#online-form div[data-for="kind:opd"]:not([hidden])');
  await page.check('#online-form input[name="source"][value="file"]');
  const text = [{ messages: [{ role: "user", content: "Say hello." }] }, { messages: [{ role: "user", content: "Count to three." }] }]
    .map((p) => JSON.stringify(p)).join("\n") + "\n";
  await page.setInputFiles("#prompts-file", { name: "prompts.jsonl", mimeType: "application/x-ndjson", buffer: Buffer.from(text) });
  await page.waitForFunction((t) => document.querySelector('#online-form textarea[name="prompts"]').value === t, text);
  await page.selectOption(ONLINE("scorer"), "none");
  assert.equal(await page.inputValue(ONLINE("teacher")), "", "the teacher defaults to the base model");
  await page.fill(ONLINE("system_prompt"), "Answer in French.");
  await page.fill(ONLINE("output_name"), "ui-opd");
  const before = await page.textContent("#train-detail-id");
  await page.click('#online-form button[type="submit"]');
  const job = await waitForNewJob(before);
  assert.equal(job.job_type, "opd");
  assert.deepEqual(job.reward_curve, []);
  await assertChartsShow(job, { loss: "loss_curve", reverse_kl: "reverse_kl_curve", lr: "lr_curve", grad_norm: "grad_norm_curve" });
  assert.deepEqual(await hiddenCharts(), ["reward"], "an OPD job without a reward has no reward curve");
  console.log(`opd: ${job.total_steps} steps in ${job.timings.running_seconds.toFixed(1)} s (${JSON.stringify(job.timings)}), reverse KL ${JSON.stringify(job.reverse_kl_curve)}`);
  await shot("training-opd");
});

test("no console errors or uncaught exceptions on the page, and no URL carried the key", () => {
  assert.deepEqual(consoleErrors, []);
  assert.ok(requestedUrls.length > 0);
  assert.deepEqual(requestedUrls.filter((u) => u.includes(KEY)), []);
});
