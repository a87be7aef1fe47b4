// `kiln bench serve`: the serving load generator. Drives an OpenAI-compatible server (one given
// by --url, or Kiln's own started in-process on a free port of 127.0.0.1) with a fixed prompt set
// at one or more concurrency levels, and prints one JSON document; with
// KILN_QUALIFICATION_CASE_RESULT set it also writes the qualification case result.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/api_key.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "config/kiln_config.h"
#include "loadgen/load_generator.h"
#include "loadgen/serving_case_result.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "server/serving_stack.h"

namespace kiln::cli {
namespace {

struct ServeBenchOpts {
  std::string url, api_key_file, model, model_id, backend = "auto";
  std::string prompt_set = "bench/prompts/serving-v1.jsonl";
  std::string concurrency = "1";
  int64_t max_tokens = 256, requests = 0;
  uint64_t seed = 0;
  double duration = 0, temperature = 0;
  std::string out;
};

Result<std::vector<int64_t>> parse_levels(const std::string& text) {
  std::vector<int64_t> levels;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1) {
      return invalid_argument("--concurrency: \"" + item + "\" is not a positive integer (in \"" + text + "\")");
    }
    levels.push_back(v);
    pos = comma + 1;
  }
  return levels;
}

// The weight dtype of a checkpoint: the dtype holding most of its bytes (norm weights and such
// may be stored wider than the matmul weights).
Result<std::string> checkpoint_dtype(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir, [](const std::string& n) { return !is_unused_tensor(n); }));
  std::map<std::string, size_t> bytes;
  for (const auto& [name, entry] : ckpt.tensors()) bytes[std::string(dtype_name(entry.tensor.dtype()))] += entry.tensor.nbytes();
  if (bytes.empty()) return format_error("checkpoint " + dir + " holds no tensors");
  return std::max_element(bytes.begin(), bytes.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
}

// The first model a running server lists at GET /v1/models.
Result<std::string> served_model_id(const std::string& url, const ApiKey& key) {
  httplib::Client client(url);
  if (!client.is_valid()) return invalid_argument("--url \"" + url + "\" is not a usable http URL");
  client.set_connection_timeout(10, 0);
  if (!key.key.empty()) client.set_bearer_token_auth(key.key);
  httplib::Result res = client.Get("/v1/models");
  if (!res) return failed_precondition("GET " + url + "/v1/models failed: " + httplib::to_string(res.error()));
  if (res->status == 401) return unauthorized(url, key, loadgen::http_error(res->status, res->body));
  if (res->status != 200) return failed_precondition("GET " + url + "/v1/models returned HTTP " + std::to_string(res->status));
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return format_error("GET " + url + "/v1/models lists no model id; pass --model-id");
  }
  return j["data"][0]["id"].get<std::string>();
}

// Progress on stderr about every tenth of a level's requests.
void print_progress(const loadgen::RequestRecord& rec, int64_t done, int64_t total) {
  const int64_t step = std::max<int64_t>(1, total / 10);
  if (!rec.ok()) std::fprintf(stderr, "bench serve: request %lld failed: %s\n", static_cast<long long>(rec.index), rec.error.c_str());
  if (done % step == 0 || done == total) {
    std::fprintf(stderr, "bench serve:   %lld/%lld requests\n", static_cast<long long>(done), static_cast<long long>(total));
  }
}

Status run(const ServeBenchOpts& o) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> levels, parse_levels(o.concurrency));
  const char* case_result_path = std::getenv("KILN_QUALIFICATION_CASE_RESULT");
  if (case_result_path != nullptr && levels.size() != 1) {
    return invalid_argument("--concurrency: a qualification case measures one level, got \"" + o.concurrency + "\"");
  }
  if (o.max_tokens < 1) return invalid_argument("--max-tokens must be at least 1, got " + std::to_string(o.max_tokens));
  if (o.requests < 0) return invalid_argument("--requests must not be negative, got " + std::to_string(o.requests));
  if (o.duration < 0) return invalid_argument("--duration must not be negative, got " + std::to_string(o.duration));
  KILN_ASSIGN_OR_RETURN(loadgen::PromptSet prompts, loadgen::load_prompt_set(o.prompt_set));
  const int64_t max_level = *std::max_element(levels.begin(), levels.end());

  std::unique_ptr<ServingStack> stack;
  std::string base_url = o.url, model_id = o.model_id, model_dir;
  ApiKey key;  // the in-process server has none
  if (!o.url.empty()) {
    model_dir = o.model;  // optional here: only read for the weight dtype
    KILN_ASSIGN_OR_RETURN(key, resolve_api_key(o.api_key_file));
    if (model_id.empty()) {
      KILN_ASSIGN_OR_RETURN(model_id, served_model_id(o.url, key));
    }
  } else {
    if (o.model.empty()) {
      KILN_ASSIGN_OR_RETURN(model_dir, demo_model_dir());  // what `kiln serve` runs by default
    } else {
      KILN_ASSIGN_OR_RETURN(model_dir, resolve_model_dir(o.model));
    }
    KilnConfig config;
    config.model.path = model_dir;
    config.model.backend = o.backend;
    config.server.host = "127.0.0.1";
    config.server.port = 0;
    config.server.max_decode_batch = std::max(config.server.max_decode_batch, max_level);
    config.server.max_queued_requests = std::max(config.server.max_queued_requests, max_level);
    std::fprintf(stderr, "bench serve: starting the server on %s (backend %s)\n", model_dir.c_str(), o.backend.c_str());
    KILN_ASSIGN_OR_RETURN(stack, ServingStack::start(config));
    base_url = stack->base_url();
    if (model_id.empty()) model_id = stack->model_id();
  }
  std::string dtype = "unknown";
  if (!model_dir.empty()) {
    KILN_ASSIGN_OR_RETURN(dtype, checkpoint_dtype(model_dir));
  }

  loadgen::LoadSpec base;
  base.base_url = base_url;
  base.model = model_id;
  base.max_tokens = o.max_tokens;
  base.seed = o.seed;
  base.temperature = o.temperature;
  base.api_key = key.key;

  // One request first, so that the levels do not pay for first-use costs (allocations, caches).
  std::fprintf(stderr, "bench serve: %s at %s, warm-up request\n", model_id.c_str(), base_url.c_str());
  loadgen::LoadSpec warm = base;
  warm.requests = 1;
  KILN_ASSIGN_OR_RETURN(loadgen::LoadResult warm_result, loadgen::run_load(warm, prompts));
  if (warm_result.errors > 0) {
    if (warm_result.records[0].http_status == 401) return unauthorized(base_url, key, warm_result.records[0].error);
    return failed_precondition("bench serve: the warm-up request failed: " + warm_result.first_error);
  }

  nlohmann::json doc = {{"kind", "bench_serve"},
                        {"model", model_id},
                        {"model_dir", model_dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(model_dir)},
                        {"url", base_url},
                        {"backend", o.backend},
                        {"dtype", dtype},
                        {"prompt_set", prompts.name},
                        {"max_tokens", o.max_tokens},
                        {"seed", o.seed},
                        {"temperature", o.temperature},
                        {"levels", nlohmann::json::array()}};
  std::vector<loadgen::LoadResult> results;
  for (int64_t c : levels) {
    loadgen::LoadSpec spec = base;
    spec.concurrency = c;
    spec.requests = o.requests;
    spec.duration_s = o.duration;
    const int64_t total = o.requests > 0 ? o.requests
                          : o.duration > 0 ? 0
                                           : loadgen::default_request_count(static_cast<int64_t>(prompts.prompts.size()), c);
    std::fprintf(stderr, "bench serve: concurrency %lld, %s\n", static_cast<long long>(c),
                 total > 0 ? (std::to_string(total) + " requests").c_str() : (std::to_string(o.duration) + " s").c_str());
    if (total > 0) spec.on_request_done = [total](const loadgen::RequestRecord& rec, int64_t done) { print_progress(rec, done, total); };
    KILN_ASSIGN_OR_RETURN(loadgen::LoadResult r, loadgen::run_load(spec, prompts));
    std::fprintf(stderr, "bench serve: concurrency %lld: %lld requests, %lld errors, %.1f output tok/s, TTFT p50 %.1f ms, ITL p50 %.2f ms\n",
                 static_cast<long long>(c), static_cast<long long>(r.requests), static_cast<long long>(r.errors),
                 r.output_tokens_per_second(), r.ttft_ms.p50, r.inter_token_latency_ms.p50);
    doc["levels"].push_back(loadgen::load_result_json(r));
    results.push_back(std::move(r));
  }
  if (stack) stack->stop();

  KILN_RETURN_IF_ERROR(emit_document(doc, o.out));
  if (case_result_path != nullptr) {
    const nlohmann::json config = {{"backend", o.backend}, {"dtype", dtype}, {"prompt_set", prompts.name}};
    KILN_RETURN_IF_ERROR(loadgen::write_case_result(
        case_result_path, loadgen::serving_case_result(results[0], loadgen::serving_case_id(levels[0]), config)));
  }
  for (const loadgen::LoadResult& r : results) {
    if (r.errors > 0) {
      return failed_precondition("bench serve: " + std::to_string(r.errors) + " of " + std::to_string(r.requests) +
                                 " requests failed at concurrency " + std::to_string(r.concurrency) + "; first: " + r.first_error);
    }
  }
  return {};
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("serve", "Serving load generator: requests/s, output tokens/s, TTFT and inter-token latency "
                                            "through the OpenAI API at given concurrencies (JSON)");
  auto o = std::make_shared<ServeBenchOpts>();
  cmd->add_option("--url", o->url, "Drive this running server (http://HOST:PORT) instead of starting one in-process");
  add_api_key_file_option(*cmd, o->api_key_file);
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION] served in-process; default: the random-weight demo checkpoint of `kiln serve`");
  cmd->add_option("--model-id", o->model_id, "The requests' model field; default: the served model id");
  cmd->add_option("--backend", o->backend, "Backend of the in-process server (auto, cpu, cuda, vulkan)")->capture_default_str();
  cmd->add_option("--prompt-set", o->prompt_set, "JSONL prompt set")->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "Concurrency levels, run one after another: N[,N...]")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "max_tokens of each request")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Request i sends seed + i")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "Sampling temperature of every request")->capture_default_str();
  cmd->add_option("--requests", o->requests, "Requests per level; default: the prompt set size rounded up to a multiple of "
                                             "the concurrency, at least twice it");
  cmd->add_option("--duration", o->duration, "Seconds per level: no request starts after them");
  cmd->add_option("--out", o->out, "Also write the JSON document to this file");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
