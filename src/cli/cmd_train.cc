// `kiln train sft|grpo --file DATA.jsonl`: a client of a running `kiln serve`. Posts the JSONL
// lines (conversations for sft, groups for grpo) as one training job, then polls its status,
// drawing a progress bar on stderr (step/total, loss, held-out loss, tokens/s), and prints the
// finished job's status JSON on stdout. Exit 0 when the job completed.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/server_client.h"

namespace kiln::cli {

namespace {

using nlohmann::json;

struct TrainOpts {
  std::string kind;  // "sft" | "grpo"
  std::string file, dataset_path, url = kDefaultServerUrl, api_key_file, config_json;
  bool no_wait = false;
  double poll_seconds = 0.5;
};

Result<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("--file " + path + ": cannot open it");
  json items = json::array();
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      items.push_back(json::parse(line));
    } catch (const json::parse_error& e) {
      return invalid_argument(path + ":" + std::to_string(n) + ": not JSON: " + e.what());
    }
  }
  if (items.empty()) return invalid_argument("--file " + path + " holds no lines");
  return items;
}

void draw_progress(const json& s) {
  const int64_t step = s.value("step", int64_t{0}), total = s.value("total_steps", int64_t{0});
  const int width = 30;
  const int filled = total > 0 ? static_cast<int>(width * step / total) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  const std::string state = s.value("state", "");
  char loss[32] = "-", eval[32] = "";
  if (s["loss"].is_number()) std::snprintf(loss, sizeof loss, "%.4f", s["loss"].get<double>());
  if (s.contains("eval_loss") && s["eval_loss"].is_number())
    std::snprintf(eval, sizeof eval, "  eval %.4f", s["eval_loss"].get<double>());
  std::fprintf(stderr, "\r%-9s [%s] step %lld/%lld  loss %s%s  %.0f tok/s ", state.c_str(), bar.c_str(),
               static_cast<long long>(step), static_cast<long long>(total), loss, eval, s.value("tokens_per_second", 0.0));
  if (state == "queued") std::fprintf(stderr, " (position %lld)", static_cast<long long>(s.value("queue_position", int64_t{0})));
  std::fflush(stderr);
}

Status run(const TrainOpts& o) {
  KILN_ASSIGN_OR_RETURN(ServerClient client, ServerClient::connect(o.url, o.api_key_file));
  json body = json::object();
  if (!o.file.empty()) {
    KILN_ASSIGN_OR_RETURN(json items, read_jsonl(o.file));
    body[o.kind == "sft" ? "examples" : "groups"] = std::move(items);
  } else {
    body["dataset_path"] = o.dataset_path;
  }
  if (!o.config_json.empty()) {
    try {
      body["config"] = json::parse(o.config_json);
    } catch (const json::parse_error& e) {
      return invalid_argument(std::string("--config-json is not JSON: ") + e.what());
    }
  }
  KILN_ASSIGN_OR_RETURN(json job, client.call("POST", "/v1/train/" + o.kind, body));
  const std::string id = job.value("job_id", "");
  std::fprintf(stderr, "kiln train: job %s queued (position %lld), adapter '%s'\n", id.c_str(),
               static_cast<long long>(job.value("queue_position", int64_t{0})), job.value("output_name", "").c_str());
  if (o.no_wait) {
    std::printf("%s\n", job.dump(2).c_str());
    return {};
  }
  for (;;) {
    KILN_ASSIGN_OR_RETURN(json s, client.call("GET", "/v1/train/status/" + id));
    draw_progress(s);
    const std::string state = s.value("state", "");
    if (state == "completed" || state == "failed" || state == "cancelled") {
      std::fprintf(stderr, "\n");
      std::printf("%s\n", s.dump(2).c_str());
      if (state == "completed") return {};
      return failed_precondition("job " + id + " " + state + (s["error"].is_string() ? ": " + s["error"].get<std::string>() : ""));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
  }
}

void add_kind(CLI::App& train, const std::string& kind, const std::string& help, const std::string& file_help) {
  auto o = std::make_shared<TrainOpts>();
  o->kind = kind;
  auto* cmd = train.add_subcommand(kind, help);
  auto* file = cmd->add_option("--file", o->file, file_help)->check(CLI::ExistingFile);
  auto* path = cmd->add_option("--dataset-path", o->dataset_path,
                               "A JSONL file on the server's machine instead of --file (sent as dataset_path)");
  file->excludes(path);
  cmd->add_option("--url", o->url, "The Kiln server")->capture_default_str();
  add_api_key_file_option(*cmd, o->api_key_file);
  cmd->add_option("--config-json", o->config_json,
                  "The job's config as a JSON object, e.g. '{\"lora_rank\": 8, \"epochs\": 2, \"output_name\": \"mine\"}' "
                  "(keys: docs/training-api.md)");
  cmd->add_flag("--no-wait", o->no_wait, "Print the queued job and exit instead of following it");
  cmd->add_option("--poll", o->poll_seconds, "Seconds between status polls")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([o] {
    if (o->file.empty() && o->dataset_path.empty()) return report(invalid_argument("give --file or --dataset-path"));
    report(run(*o));
  });
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* train = app.add_subcommand("train", "Train a LoRA adapter on a running `kiln serve` (a client: POST /v1/train/*, then follow the job)");
  train->require_subcommand(1);
  add_kind(*train, "sft", "Supervised fine-tuning on conversations (loss on assistant turns)",
           "JSONL, one {\"messages\": [...]} conversation per line");
  add_kind(*train, "grpo", "GRPO on groups of scored completions",
           "JSONL, one {\"messages\": [...], \"completions\": [{\"text\", \"reward\"}, ...]} group per line");
}

}  // namespace kiln::cli
