// `kiln bench eval`: one eval run end to end on Kiln's own server (in-process, on a free port of
// 127.0.0.1): registers a suite from a file (POST /v1/eval/suites), runs it on the base model
// (POST /v1/eval/run), follows the job and prints it with its throughput (JSON). Exit 0 when the
// job completed; with KILN_QUALIFICATION_CASE_RESULT set it also writes the case result `eval`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "cli/server_client.h"
#include "config/kiln_config.h"
#include "core/temp_dir.h"
#include "loadgen/serving_case_result.h"
#include "server/serving_stack.h"

namespace kiln::cli {
namespace {

using nlohmann::json;

struct EvalBenchOpts {
  std::string model, backend = "auto", suite_file = "bench/evals/arithmetic-v1.json", out;
  int64_t max_tokens = 0;
  double timeout = 3600;
};

Status run(const EvalBenchOpts& o) {
  if (o.max_tokens < 0) return invalid_argument("--max-tokens must be >= 0 (0: the suite's)");
  if (!(o.timeout > 0)) return invalid_argument("--timeout must be positive");
  std::ifstream in(o.suite_file);
  if (!in) return not_found("--suite-file: cannot read " + o.suite_file);
  std::stringstream ss;
  ss << in.rdbuf();
  json suite = json::parse(ss.str(), nullptr, false);
  if (suite.is_discarded() || !suite.is_object() || !suite.contains("name") || !suite["name"].is_string())
    return invalid_argument("--suite-file: " + o.suite_file + " is not a suite (a JSON object with a name and examples)");
  std::string model_dir;
  if (o.model.empty()) {
    KILN_ASSIGN_OR_RETURN(model_dir, demo_model_dir());
  } else {
    KILN_ASSIGN_OR_RETURN(model_dir, resolve_model_dir(o.model));
  }
  KILN_ASSIGN_OR_RETURN(TempDir state_dir, TempDir::create("kiln-bench-eval"));
  KilnConfig config;
  config.model.path = model_dir;
  config.model.backend = o.backend;
  config.server.state_dir = state_dir.path();
  config.server.host = "127.0.0.1";
  config.server.port = 0;
  std::fprintf(stderr, "bench eval: starting the server on %s (backend %s)\n", model_dir.c_str(), o.backend.c_str());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ServingStack> stack, ServingStack::start(config));
  KILN_ASSIGN_OR_RETURN(ServerClient client, ServerClient::connect(stack->base_url(), ApiKey{}));
  KILN_ASSIGN_OR_RETURN(json summary, client.call("POST", "/v1/eval/suites", suite));
  json body = {{"suite", suite["name"]}, {"seed", 0}, {"temperature", 0}};
  if (o.max_tokens > 0) body["max_tokens"] = o.max_tokens;
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(json queued, client.call("POST", "/v1/eval/run", body));
  const std::string id = queued.value("job_id", "");
  json job;
  double seconds = 0;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(job, client.call("GET", "/v1/eval/jobs/" + id));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string state = job.value("state", "");
    const json& p = job.contains("progress") ? job["progress"] : json::object();
    std::fprintf(stderr, "\rbench eval: %s %lld/%lld examples ", state.c_str(),
                 static_cast<long long>(p.value("done", int64_t{0})), static_cast<long long>(p.value("total", int64_t{0})));
    if (state == "completed" || state == "failed" || state == "cancelled") break;
    if (seconds > o.timeout) {
      (void)client.call("DELETE", "/v1/eval/jobs/" + id);  // best effort: the server stops with us
      return failed_precondition("bench eval: the job did not finish within --timeout " + std::to_string(o.timeout) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::fprintf(stderr, "\n");
  stack->stop();
  const bool completed = job.value("state", "") == "completed";
  const int64_t total = job.value("total", int64_t{0});
  const double per_s = seconds > 0 ? static_cast<double>(total) / seconds : 0;
  json doc = {{"kind", "bench_eval"},
              {"model_dir", model_dir},
              {"backend", o.backend},
              {"suite", summary},
              {"seconds", seconds},
              {"examples_per_second", per_s},
              {"job", job}};
  if (const char* path = std::getenv("KILN_QUALIFICATION_CASE_RESULT"); path != nullptr) {
    using loadgen::case_metric;
    const double accuracy = job["accuracy"].is_number() ? job["accuracy"].get<double>() : 0.0;
    const json result = loadgen::case_result(
        "eval", completed && total > 0, seconds,
        {{"backend", o.backend}, {"max_tokens", job.value("max_tokens", int64_t{0})}, {"suite", suite["name"]},
         {"temperature", 0.0}},
        json::array({case_metric("accuracy", accuracy, "fraction"),
                     case_metric("examples", static_cast<double>(total), "count"),
                     case_metric("examples_per_second", per_s, "examples/s"),
                     case_metric("passed", static_cast<double>(job.value("passed", int64_t{0})), "count")}),
        doc);
    KILN_RETURN_IF_ERROR(loadgen::write_case_result(path, result));
  }
  KILN_RETURN_IF_ERROR(emit_document(doc, o.out));
  if (!completed) return failed_precondition("bench eval: job " + id + " " + job.value("state", "") + ": " + job.value("error", ""));
  return {};
}

}  // namespace

void add_bench_eval_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("eval", "One eval run end to end on the in-process server: a suite from a file, run on "
                                           "the base model; accuracy, Wilson interval, examples/s and every outcome (JSON)");
  auto o = std::make_shared<EvalBenchOpts>();
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION]; default: the random-weight "
                                       "demo checkpoint of `kiln serve`");
  cmd->add_option("--backend", o->backend, "Backend of the server (auto, cpu, cuda, vulkan)")->capture_default_str();
  cmd->add_option("--suite-file", o->suite_file, "Suite JSON, as POST /v1/eval/suites takes it")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens generated per example (0: the suite's)")->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "Seconds to wait for the job")->capture_default_str();
  cmd->add_option("--out", o->out, "Also write the JSON document to this file");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
