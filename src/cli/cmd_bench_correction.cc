// `kiln bench correction`: the online-correction latency (target: under 1 s). A user
// posts one conversation of about --tokens tokens to POST /v1/train/sft (one optimizer step,
// auto_load) and wants the next request to use the corrected adapter. Each repeat measures the
// time from the POST to the job's completion as a client polling its status sees it (the swap
// included: auto_load has made the new revision the default by then), the job's phases (queued,
// train, publish, load), and checks that the next request naming no adapter is answered by
// exactly that revision. The server is one given by --url or Kiln's own, configured as `kiln
// serve` is (flags, KILN_*, kiln.toml) and started in-process on a free port of 127.0.0.1 with a
// temporary adapter directory. One JSON document on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/api_key.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "cli/server_client.h"
#include "config/kiln_config.h"
#include "core/temp_dir.h"
#include "server/request_guard.h"
#include "server/serving_stack.h"

namespace kiln::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double kTargetSeconds = 1.0;  // a ~512-token correction, hot-swap included

struct CorrectionBenchOpts {
  ConfigFlags flags;  // the in-process server's configuration
  std::string url, name = "bench-correction", optimizer = "muon", out;
  int64_t tokens = 512, repeats = 4, rank = 16;
  double learning_rate = 1e-4;
  uint64_t seed = 0;
};

// A conversation of about `tokens` tokens (common English words are one token each in Qwen's
// vocabulary; the chat template adds ~15): three quarters question, one quarter the corrected
// answer, which is what SFT trains on. Words drawn from a fixed list by `seed`.
json correction_conversation(int64_t tokens, uint64_t seed) {
  static const char* const kWords[] = {"the",   "river", "stone", "light", "north", "garden", "market", "winter",
                                       "paper", "green", "quiet", "seven", "table", "window", "bridge", "signal"};
  std::mt19937_64 rng(seed);
  auto words = [&](int64_t n) {
    std::string s;
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) s += ' ';
      s += kWords[rng() % (sizeof kWords / sizeof kWords[0])];
    }
    return s;
  };
  const int64_t body = std::max<int64_t>(4, tokens - 16);
  const int64_t answer = std::max<int64_t>(1, body / 4);
  return {{"messages",
           {{{"role", "user"}, {"content", words(body - answer)}}, {{"role", "assistant"}, {"content", words(answer)}}}}};
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double number_or_zero(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0; }

// One correction: the job, its phases, and the first request after it.
Result<json> one_correction(ServerClient& client, const CorrectionBenchOpts& o, const std::string& model_id, int64_t i) {
  const json body = {{"examples", json::array({correction_conversation(o.tokens, o.seed + static_cast<uint64_t>(i))})},
                     {"config",
                      {{"output_name", o.name},
                       {"replace", true},  // each correction is the next revision of one adapter
                       {"lora_rank", o.rank},
                       {"learning_rate", o.learning_rate},
                       {"epochs", 1},
                       {"seed", o.seed},
                       {"optimizer", {{"kind", o.optimizer}}},
                       {"auto_load", true}}}};
  const Clock::time_point t0 = Clock::now();
  KILN_ASSIGN_OR_RETURN(json job, client.call("POST", "/v1/train/sft", body));
  const std::string id = job.value("job_id", "");
  json status;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(status, client.call("GET", "/v1/train/status/" + id));
    const std::string state = status.value("state", "");
    if (state == "completed") break;
    if (state == "failed" || state == "cancelled")
      return failed_precondition("bench correction: job " + id + " " + state + ": " + status.value("error", std::string("?")));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double end_to_end = seconds_since(t0);
  if (!status["adapter_revision"].is_number_integer())
    return failed_precondition("bench correction: job " + id + " completed without loading its adapter: " + status.dump());
  const int64_t revision = status["adapter_revision"].get<int64_t>();

  // The next request names no adapter: the default, which auto_load has just made this revision.
  const json ask = {{"model", model_id},
                    {"messages", {{{"role", "user"}, {"content", "Is this answer corrected?"}}}},
                    {"max_tokens", 1},
                    {"temperature", 0}};
  const Clock::time_point t1 = Clock::now();
  KILN_ASSIGN_OR_RETURN(json answer, client.call("POST", "/v1/chat/completions", ask));
  const double first_request = seconds_since(t1);
  const json want = json::array({{{"name", o.name}, {"revision", revision}}});
  json got = json::array();
  for (const json& a : answer.value("adapters", json::array())) got.push_back({{"name", a.value("name", "")}, {"revision", a.value("revision", 0)}});
  if (got != want)
    return failed_precondition("bench correction: the request after job " + id + " was answered by " + got.dump() +
                               ", not " + want.dump());
  const json& t = status["timings"];
  return json{{"job_id", id},
              {"trained_tokens", status["trained_tokens"]},
              {"end_to_end_seconds", end_to_end},
              {"queued_seconds", number_or_zero(t, "queued_seconds")},
              {"train_seconds", number_or_zero(t, "train_seconds")},
              {"publish_seconds", number_or_zero(t, "publish_seconds")},
              {"load_seconds", number_or_zero(t, "load_seconds")},
              {"loss", status["loss"]},
              {"adapter_revision", revision},
              {"first_request_seconds", first_request}};
}

// The key file the command line names (--api-key-file, or --set server.api_key_file=...): the
// one flag that keys both the in-process server and a client of --url.
std::string key_file_flag(const ConfigFlags& flags) {
  std::string file;
  for (const FlagOverride& f : flags.overrides)
    if (f.key == "server.api_key_file") file = f.value;
  return file;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Status run(const CorrectionBenchOpts& o) {
  if (o.tokens < 32) return invalid_argument("--tokens must be at least 32, got " + std::to_string(o.tokens));
  if (o.repeats < 1) return invalid_argument("--repeats must be at least 1, got " + std::to_string(o.repeats));
  std::unique_ptr<ServingStack> stack;
  std::string url = o.url, model_dir;
  ApiKey key;
  std::optional<TempDir> adapter_dir;  // the in-process server's adapters, gone however the bench ends
  if (url.empty()) {
    KILN_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve(o.flags));
    KilnConfig& config = resolved.config;
    if (config.model.path.empty()) {
      KILN_ASSIGN_OR_RETURN(config.model.path, demo_model_dir());  // what `kiln serve` runs by default
    }
    KILN_RETURN_IF_ERROR(resolve_configured_model(config));
    model_dir = config.model.path;
    KILN_ASSIGN_OR_RETURN(adapter_dir, TempDir::create("kiln-bench-correction"));
    config.model.adapter_dir = adapter_dir->path();
    config.server.host = "127.0.0.1";
    config.server.port = 0;
    std::fprintf(stderr, "bench correction: starting the server on %s (backend %s)\n", model_dir.c_str(),
                 config.model.backend.c_str());
    KILN_ASSIGN_OR_RETURN(stack, ServingStack::start(config));
    url = stack->base_url();
    // The in-process server's own key, whatever configured it (a flag, KILN_SERVER_API_KEY, kiln.toml).
    KILN_ASSIGN_OR_RETURN(GuardOptions guard, guard_options(config));
    key = {guard.api_key, "the in-process server's configuration"};
  } else {
    KILN_ASSIGN_OR_RETURN(key, resolve_api_key(key_file_flag(o.flags)));
  }
  KILN_ASSIGN_OR_RETURN(ServerClient client, ServerClient::connect(url, std::move(key)));
  KILN_ASSIGN_OR_RETURN(json health, client.call("GET", "/health"));
  if (!health["model"].is_string()) return format_error("bench correction: GET " + url + "/health names no model");
  const std::string model_id = health["model"].get<std::string>();
  // Each correction's auto_load makes its adapter the server's default: a server that already
  // serves a default adapter, or has one of --name, would have it replaced, so it is refused.
  KILN_ASSIGN_OR_RETURN(json adapters, client.call("GET", "/v1/adapters"));
  if (adapters["default_adapter"].is_string())
    return failed_precondition("bench correction: " + url + " serves adapter '" +
                               adapters["default_adapter"].get<std::string>() +
                               "' by default, which each correction's auto_load would replace; use a server without "
                               "a default adapter");
  for (const json& a : adapters.value("data", json::array()))
    if (a.value("name", "") == o.name)
      return failed_precondition("bench correction: adapter '" + o.name + "' is already loaded on " + url +
                                 "; choose another --name");
  // However the bench ends, a server given by --url is left without its adapter (unloaded, its
  // files removed).
  struct Cleanup {
    ServerClient& client;
    const std::string& name;
    bool armed = false;
    ~Cleanup() {
      if (armed) (void)client.call("DELETE", "/v1/adapters/" + name);
    }
  } remove_adapter{client, o.name};

  json runs = json::array();
  std::vector<double> warm;
  for (int64_t i = 0; i < o.repeats; ++i) {
    remove_adapter.armed = !o.url.empty();  // from the first job on it may exist (in-process: the temporary directory goes)
    KILN_ASSIGN_OR_RETURN(json r, one_correction(client, o, model_id, i));
    std::fprintf(stderr, "bench correction: %lld/%lld: %.3f s end to end (train %.3f, publish %.3f, load %.3f), %s tokens\n",
                 static_cast<long long>(i + 1), static_cast<long long>(o.repeats), r["end_to_end_seconds"].get<double>(),
                 r["train_seconds"].get<double>(), r["publish_seconds"].get<double>(), r["load_seconds"].get<double>(),
                 r["trained_tokens"].dump().c_str());
    if (i > 0 || o.repeats == 1) warm.push_back(r["end_to_end_seconds"].get<double>());
    runs.push_back(std::move(r));
  }
  const double typical = median(warm);
  json doc = {{"kind", "bench_correction"},
              {"model", model_id},
              {"model_dir", model_dir.empty() ? json(nullptr) : json(model_dir)},
              {"url", o.url.empty() ? json(nullptr) : json(o.url)},
              {"backend", health["backend"]},
              {"tokens_requested", o.tokens},
              {"lora_rank", o.rank},
              {"optimizer", o.optimizer},
              {"learning_rate", o.learning_rate},
              {"runs", runs},
              {"cold_end_to_end_seconds", runs[0]["end_to_end_seconds"]},
              {"median_end_to_end_seconds", typical},
              {"median_of", o.repeats > 1 ? "runs after the first" : "the only run"},
              {"target_seconds", kTargetSeconds},
              {"meets_target", typical < kTargetSeconds}};
  if (stack) stack->stop();
  return emit_document(doc, o.out);
}

}  // namespace

void add_bench_correction_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "correction", "Online correction latency: one SFT step on one conversation, published and hot-swapped, until the "
                    "next request uses it (JSON; the target is under 1 s at ~512 tokens)");
  auto o = std::make_shared<CorrectionBenchOpts>();
  cmd->add_option("--url", o->url, "Drive this running server (http://HOST:PORT) instead of starting one in-process; "
                                   "refused where it serves a default adapter; the adapter --name is removed at the end");
  cmd->add_option("--tokens", o->tokens, "About this many tokens in the conversation")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Corrections, one after another; the median leaves out the first")->capture_default_str();
  cmd->add_option("--lora-rank", o->rank, "LoRA rank (every target module)")->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "muon, adam_w or sgd")->capture_default_str();
  cmd->add_option("--learning-rate", o->learning_rate, "Learning rate of the step")->capture_default_str();
  cmd->add_option("--name", o->name, "Name of the adapter each correction publishes (a new revision each time)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the conversations' words and the adapter's init")->capture_default_str();
  cmd->add_option("--out", o->out, "Also write the JSON document to this file");
  add_config_flags(*cmd, o->flags);
  cmd->footer("Without --url, the server starts in-process from the configuration `kiln serve` would use (--model,\n"
              "--backend, --set KEY=VALUE, KILN_*, kiln.toml; the random-weight demo model when none is configured),\n"
              "on a free port of 127.0.0.1 (--host and --port are not used), with its adapters in a temporary\n"
              "directory removed at the end. Its requests carry that server's API key, if it has one.\n"
              "With --url, they carry the key in the first line of --api-key-file FILE, else $KILN_SERVER_API_KEY\n"
              "(as 'Authorization: Bearer <key>'), else none.");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
