#include "qualify/case_execution.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/regex.h"
#include "qualify/case_result.h"
#include "qualify/environment_filter.h"
#include "qualify/metric_definitions.h"
#include "qualify/placeholder.h"
#include "qualify/process.h"

namespace kiln::qualify {
namespace fs = std::filesystem;
namespace {

struct Repetition {
  bool passed = true;
  std::vector<std::string> failures;
  int exit_code = -1;
  int64_t assertion_failures = 0;
  double duration_seconds = 0;
  bool have_metrics = false;
  std::vector<CaseMetric> metrics;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

JsonValue string_array(const std::vector<std::string>& items) {
  JsonValue a = JsonValue::make_array();
  for (const std::string& s : items) a.array.push_back(JsonValue::make_string(s));
  return a;
}

void fail(Repetition& rep, std::string why) {
  rep.passed = false;
  rep.failures.push_back(std::move(why));
}

Repetition run_repetition(const CaseContext& ctx, const WorkloadCase& c, int index, const std::string& dir,
                          std::vector<EvidenceFile>& evidence) {
  Repetition rep;
  fs::create_directories(dir);
  ProcessSpec spec;
  for (const std::string& arg : c.command) spec.argv.push_back(expand_placeholder(arg, ctx.placeholders));
  spec.working_directory = (fs::path(ctx.repo_root) / c.working_directory).lexically_normal().string();
  spec.environment = filtered_environment();
  for (const auto& [k, v] : c.environment) set_environment(spec.environment, k, expand_placeholder(v, ctx.placeholders));
  std::string result_path = dir + "/result.json";
  if (c.producer == "command") set_environment(spec.environment, kCaseResultEnv, result_path);
  spec.timeout_seconds = static_cast<double>(c.timeout_seconds);
  spec.interrupt_grace_seconds = ctx.limits.interrupt_grace_seconds;
  spec.terminate_grace_seconds = ctx.limits.terminate_grace_seconds;
  spec.capture_limit_bytes = ctx.limits.capture_limit_bytes;
  spec.sandbox = ctx.sandbox;

  Result<ProcessOutcome> run = run_process(spec);
  ProcessOutcome o;
  if (!run.ok()) {
    fail(rep, "runner could not execute the case: " + run.status().message());
  } else {
    o = std::move(*run);
  }
  rep.duration_seconds = o.duration_seconds;
  rep.exit_code = o.exited ? o.exit_code : -1;
  if (run.ok() && !o.started) fail(rep, o.start_error);
  if (o.started) {
    if (o.timed_out) {
      std::string sent;
      for (const std::string& s : o.signals_sent) sent += (sent.empty() ? "" : ", ") + s;
      fail(rep, "timed out after " + std::to_string(c.timeout_seconds) + " s (sent " + sent + ")");
    }
    if (!o.exited) {
      fail(rep, "terminated by signal " + std::to_string(o.term_signal));
    } else if (std::find(c.expected_exit_codes.begin(), c.expected_exit_codes.end(), o.exit_code) ==
               c.expected_exit_codes.end()) {
      fail(rep, "exit code " + std::to_string(o.exit_code) + " is not expected");
    }
    if (o.stdout_truncated || o.stderr_truncated) {
      fail(rep, "output exceeded the capture limit of " + std::to_string(spec.capture_limit_bytes) +
                    " bytes per stream (stdout " + std::to_string(o.stdout_bytes) + ", stderr " +
                    std::to_string(o.stderr_bytes) + " bytes) and was truncated");
    }
    if (!o.leftovers.empty()) {
      std::string list;
      for (const LeftoverProcess& l : o.leftovers) list += (list.empty() ? "" : "; ") + std::to_string(l.pid) + " " + l.command;
      fail(rep, std::to_string(o.leftovers.size()) + " descendant process(es) outlived the case and were killed: " + list);
    }
  }
  // Output assertions.
  JsonValue assertion_log = JsonValue::make_array();
  for (const OutputAssertion& a : c.output_assertions) {
    const std::string& text = a.stream == "stdout" ? o.stdout_text : a.stream == "stderr" ? o.stderr_text : o.combined_text;
    Result<Regex> re = Regex::compile(a.pattern);
    Result<std::optional<RegexMatch>> hit = re.ok() ? re->find(text) : Result<std::optional<RegexMatch>>(re.status());
    const bool found = hit.ok() && hit->has_value();
    // A pattern that could not be checked holds neither way.
    const bool ok = hit.ok() && (a.match == "required" ? found : !found);
    if (!ok) {
      ++rep.assertion_failures;
      const std::string which =
          std::string(a.match == "required" ? "required" : "forbidden") + " pattern /" + a.pattern + "/ ";
      fail(rep, !hit.ok() ? which + "could not be checked on " + a.stream + ": " + hit.status().message()
                          : which + (found ? "matched" : "did not match") + " " + a.stream);
    }
    JsonValue entry = JsonValue::make_object();
    entry.set("stream", JsonValue::make_string(a.stream));
    entry.set("match", JsonValue::make_string(a.match));
    entry.set("pattern", JsonValue::make_string(a.pattern));
    entry.set("held", JsonValue::make_bool(ok));
    assertion_log.array.push_back(std::move(entry));
  }
  // The command's case result.
  JsonValue result_issues = JsonValue::make_array();
  if (c.producer == "command" && o.started) {
    std::ifstream in(result_path, std::ios::binary);
    if (!in) {
      fail(rep, "the command wrote no case result to " + std::string(kCaseResultEnv));
    } else {
      std::stringstream ss;
      ss << in.rdbuf();
      Issues issues;
      CaseResult cr = check_case_result(ss.str(), c, ctx.variant->effective_config, issues);
      evidence.push_back({"case_result", result_path});
      if (!issues.empty()) {
        for (const Issue& i : issues.items()) result_issues.array.push_back(JsonValue::make_string(i.to_string()));
        fail(rep, "malformed case result: " + issues.items()[0].to_string());
      } else {
        rep.have_metrics = true;
        rep.metrics = cr.metrics;
        // A command may report failure, and a skip is never a pass.
        if (cr.status == "failed") fail(rep, "the command reported status failed");
        if (cr.status == "skipped") fail(rep, "the command reported status skipped; a skipped case cannot pass");
      }
    }
  }

  // Raw output and normalised evidence.
  write_file(dir + "/stdout.log", o.stdout_text);
  write_file(dir + "/stderr.log", o.stderr_text);
  evidence.push_back({"stdout", dir + "/stdout.log"});
  evidence.push_back({"stderr", dir + "/stderr.log"});
  JsonValue outcome = JsonValue::make_object();
  outcome.set("case_id", JsonValue::make_string(c.id));
  outcome.set("repetition", JsonValue::make_integer(index));
  outcome.set("argv", string_array(spec.argv));
  outcome.set("working_directory", JsonValue::make_string(c.working_directory));
  std::vector<std::string> names;
  for (const std::string& kv : spec.environment) names.push_back(kv.substr(0, kv.find('=')));
  outcome.set("environment_names", string_array(names));
  outcome.set("started", JsonValue::make_bool(o.started));
  outcome.set("exit_code", o.exited ? JsonValue::make_integer(o.exit_code) : JsonValue::make_null());
  outcome.set("term_signal", o.exited ? JsonValue::make_null() : JsonValue::make_integer(o.term_signal));
  outcome.set("timed_out", JsonValue::make_bool(o.timed_out));
  outcome.set("signals_sent", string_array(o.signals_sent));
  outcome.set("duration_seconds", JsonValue::make_number(o.duration_seconds));
  outcome.set("stdout_bytes", JsonValue::make_integer(static_cast<int64_t>(o.stdout_bytes)));
  outcome.set("stderr_bytes", JsonValue::make_integer(static_cast<int64_t>(o.stderr_bytes)));
  outcome.set("stdout_truncated", JsonValue::make_bool(o.stdout_truncated));
  outcome.set("stderr_truncated", JsonValue::make_bool(o.stderr_truncated));
  JsonValue leftovers = JsonValue::make_array();
  for (const LeftoverProcess& l : o.leftovers) {
    JsonValue e = JsonValue::make_object();
    e.set("pid", JsonValue::make_integer(l.pid));
    e.set("command", JsonValue::make_string(l.command));
    leftovers.array.push_back(std::move(e));
  }
  outcome.set("leftover_descendants", std::move(leftovers));
  outcome.set("output_assertions", std::move(assertion_log));
  outcome.set("case_result_issues", std::move(result_issues));
  outcome.set("failures", string_array(rep.failures));
  outcome.set("passed", JsonValue::make_bool(rep.passed));
  write_file(dir + "/outcome.json", to_json_text(outcome, 2) + "\n");
  evidence.push_back({"outcome", dir + "/outcome.json"});
  return rep;
}

double aggregate(const std::string& how, const std::vector<double>& values) {
  double acc = values.front();
  for (size_t i = 1; i < values.size(); ++i) {
    if (how == "min") acc = std::min(acc, values[i]);
    else if (how == "max") acc = std::max(acc, values[i]);
    else acc += values[i];  // sum and mean
  }
  return how == "mean" ? acc / static_cast<double>(values.size()) : acc;
}

JsonValue metric_entry(const MetricDefinition& def, JsonValue value) {
  JsonValue m = JsonValue::make_object();
  m.set("name", JsonValue::make_string(def.name));
  m.set("value", std::move(value));
  m.set("unit", JsonValue::make_string(def.unit));
  m.set("aggregation", JsonValue::make_string(def.aggregation));
  m.set("lower_is_better", def.lower_is_better ? JsonValue::make_bool(*def.lower_is_better) : JsonValue::make_null());
  return m;
}

}  // namespace

CaseRun execute_case(const CaseContext& ctx, const WorkloadCase& c) {
  CaseRun out;
  std::vector<Repetition> reps;
  int64_t n = ctx.workload->determinism.repetitions;
  for (int64_t i = 0; i < n; ++i) {
    std::string dir = ctx.run_dir + "/cases/" + c.id + "/rep-" + std::to_string(i + 1);
    reps.push_back(run_repetition(ctx, c, static_cast<int>(i + 1), dir, out.evidence));
  }
  bool passed = std::all_of(reps.begin(), reps.end(), [](const Repetition& r) { return r.passed; });
  std::vector<std::string> failures;
  for (size_t i = 0; i < reps.size(); ++i) {
    for (const std::string& f : reps[i].failures) failures.push_back("repetition " + std::to_string(i + 1) + ": " + f);
  }
  bool exit_codes_agree = std::all_of(reps.begin(), reps.end(), [&](const Repetition& r) { return r.exit_code == reps[0].exit_code; });
  if (!exit_codes_agree) {
    passed = false;
    failures.push_back("exit codes differ across repetitions");
  }
  // Metrics: the runner's three, then the declared command metrics, sorted by name.
  std::vector<std::pair<std::string, JsonValue>> metrics;
  int64_t assertion_failures = 0;
  double duration = 0;
  for (const Repetition& r : reps) {
    assertion_failures += r.assertion_failures;
    duration += r.duration_seconds;
  }
  metrics.emplace_back(std::string(kCasePassMetric), metric_entry(*find_runner_metric(kCasePassMetric), JsonValue::make_bool(passed)));
  metrics.emplace_back(std::string(kExitCodeMetric), metric_entry(*find_runner_metric(kExitCodeMetric), JsonValue::make_integer(reps.back().exit_code)));
  metrics.emplace_back(std::string(kAssertionFailuresMetric),
                       metric_entry(*find_runner_metric(kAssertionFailuresMetric), JsonValue::make_integer(assertion_failures)));
  for (const MetricDefinition& def : c.declared_metrics) {
    if (find_runner_metric(def.name) != nullptr) continue;
    std::vector<double> values;
    for (const Repetition& r : reps) {
      for (const CaseMetric& m : r.metrics) {
        if (r.have_metrics && m.name == def.name) values.push_back(m.value);
      }
    }
    // A metric some repetition did not produce is left out rather than averaged over fewer runs.
    if (values.size() != reps.size()) continue;
    metrics.emplace_back(def.name, metric_entry(def, JsonValue::make_number(aggregate(def.aggregation, values))));
  }
  std::sort(metrics.begin(), metrics.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  JsonValue result = JsonValue::make_object();
  result.set("id", JsonValue::make_string(c.id));
  result.set("required", JsonValue::make_bool(c.required));
  result.set("status", JsonValue::make_string(passed ? "passed" : "failed"));
  result.set("duration_seconds", JsonValue::make_number(duration));
  JsonValue ms = JsonValue::make_array();
  for (auto& [name, m] : metrics) ms.array.push_back(std::move(m));
  result.set("metrics", std::move(ms));
  JsonValue details = JsonValue::make_object();
  details.set("repetitions", JsonValue::make_integer(n));
  JsonValue durations = JsonValue::make_array();
  for (const Repetition& r : reps) durations.array.push_back(JsonValue::make_number(r.duration_seconds));
  details.set("repetition_durations_seconds", std::move(durations));
  details.set("failures", string_array(failures));
  details.set("evidence", JsonValue::make_string(
                              fs::path(ctx.run_dir + "/cases/" + c.id).lexically_relative(ctx.repo_root).string()));
  result.set("details", std::move(details));
  out.result = std::move(result);
  out.passed = passed;
  return out;
}

}  // namespace kiln::qualify
