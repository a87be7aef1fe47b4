// `kiln bench soak`: a long serving run against Kiln's own server (in-process, on a free port of
// 127.0.0.1). C streaming clients loop chat requests for a duration; every other request uses a
// LoRA adapter, every Nth closes its stream after its first token, and midway the adapter is
// reloaded as a new revision (a hot swap). It samples the process's resident memory (after
// malloc_trim, so that what the allocator keeps free is not read as growth; the bytes malloc has
// handed out are sampled beside it), the device memory /health reports and the decode recordings
// (CUDA graphs) the engine holds, and prints per-minute latency percentiles. It holds when no
// request failed, the swap answered 200, the engine is idle and whole afterwards (every K/V block
// and GDN slot free or cached), and neither memory grew by more than 2% + 32 MiB from a quarter
// of the run to its end. With KILN_QUALIFICATION_CASE_RESULT set it writes the case result `soak`.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <malloc.h>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "config/kiln_config.h"
#include "core/temp_dir.h"
#include "loadgen/latency_stats.h"
#include "loadgen/load_generator.h"
#include "loadgen/serving_case_result.h"
#include "model/config.h"
#include "model/host_lora_adapter.h"
#include "server/serving_stack.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr const char* kAdapter = "soak";

struct SoakOpts {
  std::string model, backend = "auto", prompt_set = "bench/prompts/serving-v1.jsonl", out;
  int64_t concurrency = 64, max_tokens = 64, disconnect_every = 10, adapter_rank = 8;
  double duration = 300, swap_at = 0.5, sample_every = 5;
  uint64_t seed = 0;
};

struct Sample {
  double t = 0;              // seconds from the start of the load
  double rss_mib = -1;       // this process's resident set, after malloc_trim
  double heap_mib = -1;      // bytes malloc has handed out and not had back (mallinfo2)
  double device_mib = -1;    // /health memory.device_used_bytes
  double recordings = -1;    // decode recordings (CUDA graphs) held: made minus dropped, from /metrics
};

double rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
  return -1;
}

// glibc keeps freed memory in its arenas, and after the first free of a large block it serves
// blocks up to that size from them instead of fresh mappings: a burst of transient host buffers
// (an adapter written and loaded) then stays resident, freed, for the rest of the run. Trimming
// first returns it, so that resident memory measures what the process holds.
Sample sample_memory(double t) {
  malloc_trim(0);
  const struct mallinfo2 m = mallinfo2();
  return {t, rss_mib(), static_cast<double>(m.uordblks + m.hblkhd) / kMiB, -1};
}

// The value of an unlabelled sample in Prometheus text; -1 when it is not there.
double prometheus_value(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::strtod(text.c_str() + at + key.size(), nullptr);
}

Result<nlohmann::json> get_json(httplib::Client& c, const std::string& path) {
  httplib::Result r = c.Get(path);
  if (!r) return failed_precondition("GET " + path + ": " + httplib::to_string(r.error()));
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return format_error("GET " + path + " answered HTTP " + std::to_string(r->status) + ", not JSON");
  return j;
}

// A random LoRA adapter of `rank` on every target, written as PEFT files into `dir`.
Status write_adapter(const std::string& model_dir, const std::string& dir, int64_t rank, uint64_t seed) {
  KILN_ASSIGN_OR_RETURN(ModelConfig mc, ModelConfig::load(model_dir));
  LoraConfig lc;
  lc.rank = rank;
  lc.alpha = 2.0 * static_cast<double>(rank);
  for (int t = 0; t < kLoraTargetCount; ++t) lc.targets.push_back(static_cast<LoraTarget>(t));
  KILN_ASSIGN_OR_RETURN(HostLoraAdapter ad, HostLoraAdapter::init(lc, mc, seed));
  return ad.write(dir);
}

// Memory growth from the first sample at or after a quarter of the run to the last, in MiB, and
// whether it stays within 2% + 32 MiB of the former. Negative values were not measured.
struct Growth {
  double from = -1, to = -1;
  double limit() const { return from * 1.02 + 32.0; }
  bool flat() const { return from < 0 || to <= limit(); }
  nlohmann::json json() const {
    return {{"after_warmup_mib", from}, {"end_mib", to}, {"growth_mib", from < 0 ? 0.0 : to - from},
            {"limit_mib", from < 0 ? 0.0 : limit()}, {"flat", flat()}};
  }
};
Growth growth(const std::vector<Sample>& s, double duration, double Sample::*field) {
  Growth g;
  for (const Sample& x : s) {
    if (x.*field < 0) continue;
    if (g.from < 0 && x.t >= duration / 4) g.from = x.*field;
    g.to = x.*field;
  }
  if (g.from < 0) g.to = -1;
  return g;
}

// Requests by the minute they started in: count, failures, disconnects, TTFT and inter-token
// percentiles of those that completed.
nlohmann::json per_minute(const std::vector<loadgen::RequestRecord>& records) {
  std::vector<std::vector<const loadgen::RequestRecord*>> minutes;
  for (const auto& r : records) {
    const size_t m = static_cast<size_t>(r.start_ms / 60000.0);
    if (minutes.size() <= m) minutes.resize(m + 1);
    minutes[m].push_back(&r);
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t m = 0; m < minutes.size(); ++m) {
    std::vector<double> ttft, itl;
    int64_t errors = 0, disconnected = 0;
    for (const auto* r : minutes[m]) {
      if (!r->ok()) ++errors;
      else if (r->disconnected) ++disconnected;
      else {
        if (r->ttft_ms >= 0) ttft.push_back(r->ttft_ms);
        itl.insert(itl.end(), r->inter_token_ms.begin(), r->inter_token_ms.end());
      }
    }
    out.push_back({{"minute", m},
                   {"requests", minutes[m].size()},
                   {"errors", errors},
                   {"disconnected", disconnected},
                   {"ttft_ms", loadgen::summary_json(loadgen::summarize(ttft))},
                   {"inter_token_latency_ms", loadgen::summary_json(loadgen::summarize(itl))}});
  }
  return out;
}

// The engine idle with every block and slot back; the problems otherwise.
std::vector<std::string> engine_problems(const nlohmann::json& h) {
  std::vector<std::string> p;
  if (!h.contains("engine")) return {"/health has no engine object"};
  const nlohmann::json& e = h["engine"];
  if (e.value("running", -1) != 0) p.push_back("engine.running " + e.value("running", nlohmann::json()).dump());
  if (e.value("waiting", -1) != 0) p.push_back("engine.waiting " + e.value("waiting", nlohmann::json()).dump());
  if (e.value("kv_blocks_free", 0) + e.value("kv_blocks_cached", 0) != e.value("kv_blocks_total", -1))
    p.push_back("K/V blocks: " + e.dump());
  if (e.value("gdn_slots_free", 0) + e.value("gdn_slots_cached", 0) != e.value("gdn_slots_total", -1))
    p.push_back("GDN slots: " + e.dump());
  return p;
}

Status run(const SoakOpts& o) {
  if (o.concurrency < 1 || o.concurrency > 4096) return invalid_argument("--concurrency must be in 1..4096");
  if (!(o.duration > 0 && o.duration <= 86400)) return invalid_argument("--duration must be in (0, 86400] seconds");
  if (!(o.swap_at > 0 && o.swap_at < 1)) return invalid_argument("--swap-at must be a fraction of the run in (0, 1)");
  if (!(o.sample_every > 0)) return invalid_argument("--sample-every must be positive");
  if (o.disconnect_every < 0) return invalid_argument("--disconnect-every must be >= 0 (0: none)");
  if (o.max_tokens < 2) return invalid_argument("--max-tokens must be at least 2 (a disconnect needs a token after the first)");
  KILN_ASSIGN_OR_RETURN(loadgen::PromptSet prompts, loadgen::load_prompt_set(o.prompt_set));
  std::string model_dir;
  if (o.model.empty()) {
    KILN_ASSIGN_OR_RETURN(model_dir, demo_model_dir());
  } else {
    KILN_ASSIGN_OR_RETURN(model_dir, resolve_model_dir(o.model));
  }
  KILN_ASSIGN_OR_RETURN(TempDir work_dir, TempDir::create("kiln-soak"));
  const std::string& work = work_dir.path();
  KILN_RETURN_IF_ERROR(write_adapter(model_dir, work + "/adapters/" + kAdapter, o.adapter_rank, o.seed + 1));

  KilnConfig config;
  config.model.path = model_dir;
  config.model.backend = o.backend;
  config.model.adapter_dir = work + "/adapters";
  config.server.state_dir = work + "/state";
  config.server.host = "127.0.0.1";
  config.server.port = 0;
  config.server.max_decode_batch = std::max(config.server.max_decode_batch, o.concurrency);
  config.server.max_queued_requests = std::max(config.server.max_queued_requests, 2 * o.concurrency);
  std::fprintf(stderr, "bench soak: starting the server on %s (backend %s)\n", model_dir.c_str(), o.backend.c_str());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ServingStack> stack, ServingStack::start(config));
  httplib::Client admin(stack->base_url());
  admin.set_read_timeout(120, 0);
  httplib::Result loaded = admin.Post("/v1/adapters/load", nlohmann::json{{"name", kAdapter}}.dump(), "application/json");
  if (!loaded || loaded->status != 200)
    return failed_precondition("bench soak: loading the adapter failed: " +
                               (loaded ? loaded->body : httplib::to_string(loaded.error())));

  loadgen::LoadSpec spec;
  spec.base_url = stack->base_url();
  spec.model = stack->model_id();
  spec.concurrency = o.concurrency;
  spec.duration_s = o.duration;
  spec.max_tokens = o.max_tokens;
  spec.seed = o.seed;
  spec.temperature = 0.7;
  spec.shape_request = [&o](int64_t i, loadgen::ChatRequest& r) {
    if (i % 2 == 1) r.adapter = kAdapter;
    if (o.disconnect_every > 0 && i % o.disconnect_every == o.disconnect_every - 1) r.disconnect_after_chunks = 1;
  };
  std::atomic<int64_t> done{0};
  spec.on_request_done = [&done](const loadgen::RequestRecord& rec, int64_t n) {
    done = n;
    if (!rec.ok()) std::fprintf(stderr, "bench soak: request %lld failed: %s\n", static_cast<long long>(rec.index), rec.error.c_str());
  };

  // The sampler and the swap run beside the load, until it ends.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::vector<Sample> samples;
  nlohmann::json swap = {{"at_s", nullptr}, {"http_status", nullptr}, {"revision", nullptr}};
  const Clock::time_point start = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::thread sampler([&] {
    httplib::Client c(stack->base_url());
    c.set_read_timeout(30, 0);
    bool swapped = false;
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      const double t = since();
      Sample s = sample_memory(t);
      lock.unlock();
      if (Result<nlohmann::json> h = get_json(c, "/health"); h.ok() && h->contains("memory") &&
                                                            (*h)["memory"]["device_used_bytes"].is_number())
        s.device_mib = (*h)["memory"]["device_used_bytes"].get<double>() / kMiB;
      if (httplib::Result m = c.Get("/metrics"); m && m->status == 200) {
        const double made = prometheus_value(m->body, "kiln_decode_recordings");
        const double dropped = prometheus_value(m->body, "kiln_decode_recordings_invalidated_total");
        if (made >= 0 && dropped >= 0) s.recordings = made - dropped;
      }
      if (!swapped && t >= o.duration * o.swap_at) {
        swapped = true;
        nlohmann::json status = nullptr, body, error = nullptr;
        if (Status w = write_adapter(model_dir, work + "/adapters/" + kAdapter, o.adapter_rank, o.seed + 2); !w.ok()) {
          error = w.to_string();
        } else if (httplib::Result r = c.Post("/v1/adapters/load", nlohmann::json{{"name", kAdapter}}.dump(),
                                              "application/json")) {
          status = r->status;
          body = nlohmann::json::parse(r->body, nullptr, false);
        } else {
          error = httplib::to_string(r.error());
        }
        lock.lock();
        swap = {{"at_s", since()},
                {"http_status", status},
                {"revision", body.is_object() && body.contains("revision") ? body["revision"] : nlohmann::json(nullptr)},
                {"error", error}};
        std::fprintf(stderr, "bench soak: adapter reloaded at %.0f s (HTTP %s)\n", swap["at_s"].get<double>(),
                     swap["http_status"].dump().c_str());
        lock.unlock();
      }
      lock.lock();
      samples.push_back(s);
      std::fprintf(stderr, "bench soak: %.0f/%.0f s, %lld requests, RSS %.1f MiB\n", t, o.duration,
                   static_cast<long long>(done.load()), s.rss_mib);
      if (cv.wait_for(lock, std::chrono::duration<double>(o.sample_every), [&] { return finished; })) return;
    }
  });
  Result<loadgen::LoadResult> load = loadgen::run_load(spec, prompts);
  {
    std::lock_guard<std::mutex> lock(mu);
    finished = true;
  }
  cv.notify_all();
  sampler.join();
  samples.push_back(sample_memory(since()));
  KILN_RETURN_IF_ERROR(load.status());

  // Requests retire at the engine's next cycle boundary: give it up to 10 s to become idle.
  std::vector<std::string> engine;
  nlohmann::json health;
  for (int i = 0; i < 100; ++i) {
    Result<nlohmann::json> h = get_json(admin, "/health");
    engine = h.ok() ? engine_problems(*h) : std::vector<std::string>{h.status().message()};
    if (h.ok()) health = *h;
    if (engine.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (health.contains("memory") && health["memory"]["device_used_bytes"].is_number())
    samples.back().device_mib = health["memory"]["device_used_bytes"].get<double>() / kMiB;
  stack->stop();

  const Growth rss = growth(samples, o.duration, &Sample::rss_mib);
  const Growth device = growth(samples, o.duration, &Sample::device_mib);
  const bool swap_ok = swap["http_status"] == 200;
  const bool holds = load->errors == 0 && swap_ok && engine.empty() && rss.flat() && device.flat();
  nlohmann::json sample_json = nlohmann::json::array();
  for (const Sample& s : samples)
    sample_json.push_back({{"t_s", s.t}, {"rss_mib", s.rss_mib}, {"heap_mib", s.heap_mib}, {"device_mib", s.device_mib},
                           {"recordings", s.recordings}});
  nlohmann::json doc = {{"kind", "bench_soak"},
                        {"model", stack->model_id()},
                        {"model_dir", model_dir},
                        {"backend", o.backend},
                        {"concurrency", o.concurrency},
                        {"duration_s", o.duration},
                        {"max_tokens", o.max_tokens},
                        {"disconnect_every", o.disconnect_every},
                        {"seed", o.seed},
                        {"load", loadgen::load_result_json(*load)},
                        {"per_minute", per_minute(load->records)},
                        {"swap", swap},
                        {"rss", rss.json()},
                        {"heap", growth(samples, o.duration, &Sample::heap_mib).json()},
                        {"device_memory", device.json()},
                        {"samples", sample_json},
                        {"engine_after", health.value("engine", nlohmann::json())},
                        {"engine_problems", engine},
                        {"holds", holds},
                        {"note", "every other request (odd index) uses the adapter; every Nth closes its stream after "
                                 "its first content chunk (disconnected, not an error); memory is flat when the end is "
                                 "within 2% + 32 MiB of the first sample at or after a quarter of the run; resident "
                                 "memory is read after malloc_trim(0), heap is what malloc has handed out"}};
  if (const char* path = std::getenv("KILN_QUALIFICATION_CASE_RESULT"); path != nullptr) {
    using loadgen::case_metric;
    const nlohmann::json result = loadgen::case_result(
        "soak", holds, load->duration_s,
        {{"backend", o.backend}, {"concurrency", o.concurrency}, {"disconnect_every", o.disconnect_every},
         {"duration_s", o.duration}, {"max_tokens", o.max_tokens}},
        nlohmann::json::array({case_metric("device_memory_growth_mib", device.json()["growth_mib"], "MiB"),
                               case_metric("disconnected", static_cast<double>(load->disconnected), "count"),
                               case_metric("errors", static_cast<double>(load->errors), "count"),
                               case_metric("inter_token_p99_ms", load->inter_token_latency_ms.p99, "ms"),
                               case_metric("output_tokens_per_second", load->output_tokens_per_second(), "tok/s"),
                               case_metric("requests", static_cast<double>(load->requests), "count"),
                               case_metric("rss_growth_mib", rss.json()["growth_mib"], "MiB"),
                               case_metric("ttft_p99_ms", load->ttft_ms.p99, "ms")}),
        doc);
    KILN_RETURN_IF_ERROR(loadgen::write_case_result(path, result));
  }
  KILN_RETURN_IF_ERROR(emit_document(doc, o.out));
  if (!holds) {
    std::string why = load->errors > 0 ? std::to_string(load->errors) + " requests failed (first: " + load->first_error + ")"
                      : !swap_ok       ? "the adapter reload did not answer 200"
                      : !engine.empty() ? "the engine is not idle and whole afterwards: " + engine[0]
                      : !rss.flat()     ? "resident memory grew past 2% + 32 MiB"
                                        : "device memory grew past 2% + 32 MiB";
    return failed_precondition("bench soak: " + why);
  }
  return {};
}

}  // namespace

void add_bench_soak_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "soak", "Soak Kiln's own server: C streaming clients for a duration with client disconnects and an adapter hot "
              "swap midway; errors, memory over time and per-minute latency percentiles (JSON; exit 1 unless it holds)");
  auto o = std::make_shared<SoakOpts>();
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION]; default: the random-weight "
                                       "demo checkpoint of `kiln serve`");
  cmd->add_option("--backend", o->backend, "Backend of the server (auto, cpu, cuda, vulkan)")->capture_default_str();
  cmd->add_option("--prompt-set", o->prompt_set, "JSONL prompt set")->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "Streaming clients, each with one request in flight")
      ->capture_default_str();
  cmd->add_option("--duration", o->duration, "Seconds: no request starts after them")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "max_tokens of each request")->capture_default_str();
  cmd->add_option("--disconnect-every", o->disconnect_every,
                  "Every Nth request closes its stream after its first token (0: none)")
      ->capture_default_str();
  cmd->add_option("--swap-at", o->swap_at, "When the adapter is reloaded, as a fraction of the duration")
      ->capture_default_str();
  cmd->add_option("--sample-every", o->sample_every, "Seconds between memory samples")->capture_default_str();
  cmd->add_option("--adapter-rank", o->adapter_rank, "Rank of the random adapter on every target")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Request i sends seed + i; the adapters' seeds follow it")->capture_default_str();
  cmd->add_option("--out", o->out, "Also write the JSON document to this file");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
