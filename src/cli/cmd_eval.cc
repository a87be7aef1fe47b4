// `kiln eval list|run|compare`: a client of a running `kiln serve` (docs/evals.md). `run` and
// `compare` queue an eval job, follow it with a progress bar on stderr (examples done / total,
// passes so far) and print the finished job's JSON on stdout; `list` prints the suites. Exit 0
// when the job completed.
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/server_client.h"

namespace kiln::cli {

namespace {

using nlohmann::json;

struct EvalOpts {
  std::string url = kDefaultServerUrl, api_key_file, suite, adapter, adapter_a, adapter_b;
  int64_t seed = 0, max_tokens = 0;
  double temperature = 0, poll_seconds = 0.5;
};

void draw_progress(const json& s) {
  const json& p = s.contains("progress") ? s["progress"] : json::object();
  const int64_t done = p.value("done", int64_t{0}), total = p.value("total", int64_t{0});
  const int width = 30;
  const int filled = total > 0 ? static_cast<int>(width * done / total) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::string acc = "-";
  if (s.contains("accuracy") && s["accuracy"].is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", s["accuracy"].get<double>());
    acc = buf;
  }
  std::fprintf(stderr, "\r%-9s [%s] %lld/%lld examples  accuracy %s ", s.value("state", "").c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), acc.c_str());
  std::fflush(stderr);
}

Status follow(ServerClient& client, const std::string& id, double poll) {
  for (;;) {
    KILN_ASSIGN_OR_RETURN(json s, client.call("GET", "/v1/eval/jobs/" + id));
    draw_progress(s);
    const std::string state = s.value("state", "");
    if (state == "completed" || state == "failed" || state == "cancelled") {
      std::fprintf(stderr, "\n");
      std::printf("%s\n", s.dump(2).c_str());
      if (state == "completed") return {};
      return failed_precondition("eval job " + id + " " + state + ": " + s.value("error", ""));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll));
  }
}

json target(const std::string& name) { return name.empty() ? json(nullptr) : json(name); }

Status submit(const EvalOpts& o, bool compare) {
  KILN_ASSIGN_OR_RETURN(ServerClient client, ServerClient::connect(o.url, o.api_key_file));
  json body = {{"suite", o.suite}, {"seed", o.seed}, {"temperature", o.temperature}};
  if (o.max_tokens > 0) body["max_tokens"] = o.max_tokens;
  if (compare) {
    body["adapter_a"] = target(o.adapter_a);
    body["adapter_b"] = target(o.adapter_b);
  } else {
    body["adapter"] = target(o.adapter);
  }
  KILN_ASSIGN_OR_RETURN(json job, client.call("POST", compare ? "/v1/eval/compare" : "/v1/eval/run", body));
  const std::string id = job.value("job_id", "");
  std::fprintf(stderr, "kiln eval: job %s queued on suite '%s'\n", id.c_str(), o.suite.c_str());
  return follow(client, id, o.poll_seconds);
}

void add_common(CLI::App* cmd, EvalOpts& o) {
  cmd->add_option("--url", o.url, "The Kiln server")->capture_default_str();
  add_api_key_file_option(*cmd, o.api_key_file);
  cmd->add_option("--suite", o.suite, "The eval suite's name")->required();
  cmd->add_option("--seed", o.seed, "Seed (with --temperature > 0, example i samples with seed + i)")->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "0: greedy")->capture_default_str()->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--max-tokens", o.max_tokens, "Tokens generated per example (default: the suite's)");
  cmd->add_option("--poll", o.poll_seconds, "Seconds between status polls")->capture_default_str()->check(CLI::PositiveNumber);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* eval = app.add_subcommand("eval", "Evaluate adapters on a running `kiln serve` (a client of /v1/eval/*)");
  eval->require_subcommand(1);

  auto lo = std::make_shared<EvalOpts>();
  auto* list = eval->add_subcommand("list", "Print the server's eval suites (JSON)");
  list->add_option("--url", lo->url, "The Kiln server")->capture_default_str();
  add_api_key_file_option(*list, lo->api_key_file);
  list->callback([lo] {
    report([&]() -> Status {
      KILN_ASSIGN_OR_RETURN(ServerClient client, ServerClient::connect(lo->url, lo->api_key_file));
      KILN_ASSIGN_OR_RETURN(json suites, client.call("GET", "/v1/eval/suites"));
      std::printf("%s\n", suites.dump(2).c_str());
      return {};
    }());
  });

  auto ro = std::make_shared<EvalOpts>();
  auto* run = eval->add_subcommand("run", "Run a suite on an adapter (or the base model) and print the job");
  add_common(run, *ro);
  run->add_option("--adapter", ro->adapter, "A loaded adapter (default: the base model)");
  run->callback([ro] { report(submit(*ro, false)); });

  auto co = std::make_shared<EvalOpts>();
  auto* cmp = eval->add_subcommand("compare", "Run a suite on two adapters and print the paired outcomes and flips");
  add_common(cmp, *co);
  cmp->add_option("--adapter-a", co->adapter_a, "Adapter A (empty: the base model)");
  cmp->add_option("--adapter-b", co->adapter_b, "Adapter B (empty: the base model)");
  cmp->callback([co] { report(submit(*co, true)); });
}

}  // namespace kiln::cli
