#include <cmath>
#include <fstream>
#include <sstream>
#include <set>

#include "qualify/git_repo.h"
#include "qualify/json_fields.h"
#include "qualify/receipt.h"
#include "qualify/receipt_freshness.h"
#include "qualify/regex.h"
#include "core/sha256.h"
#include "qualify/utc_time.h"

namespace kiln::qualify {

const ReceiptMetric* ReceiptResult::find_metric(const std::string& name) const {
  for (const ReceiptMetric& m : metrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const ReceiptResult* Receipt::find_result(const std::string& id) const {
  for (const ReceiptResult& r : results) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

namespace {

const char* kHex64 = "[0-9a-f]{64}";

void check_format(const std::string& value, const char* pattern, const std::string& path, const std::string& rule,
                  Issues& issues) {
  if (!full_match(pattern, value)) issues.add(path, rule, "\"" + value + "\" must match ^" + std::string(pattern) + "$");
}

void check_enum(const std::string& value, std::initializer_list<const char*> allowed, const std::string& path,
                Issues& issues) {
  for (const char* a : allowed) {
    if (value == a) return;
  }
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  issues.add(path, "enum", "\"" + value + "\" is not one of: " + list);
}

// Keys of an object whose values are scalars or null; `nullable` keys may be null.
void check_scalars(const JsonValue& obj, const std::string& path, std::initializer_list<std::string_view> keys,
                   Issues& issues) {
  if (!check_object(obj, path, keys, issues)) return;
  for (const auto& [k, v] : obj.object) {
    if (v.is_object() || v.is_array()) issues.add(json_path_key(path, k), "type", "expected a scalar or null");
  }
}

void parse_environment(const JsonValue& env, Receipt& r, Issues& issues) {
  const std::string p = "$.environment";
  if (!check_object(env, p, {"host_id", "os", "host", "device", "runtime", "compiler"}, issues)) return;
  r.host_id = read_string(env, p, "host_id", issues).value_or("");
  check_format(r.host_id, "[A-Za-z0-9][A-Za-z0-9._-]{0,127}", "$.environment.host_id", "host-id", issues);
  auto sub = [&](const char* key, JsonValue& out, std::initializer_list<std::string_view> keys) {
    if (const JsonValue* v = env.find(key)) {
      out = *v;
      check_scalars(*v, json_path_key(p, key), keys, issues);
    }
  };
  sub("os", r.os, {"name", "release", "version", "machine", "distribution"});
  sub("host", r.host, {"cpu_model", "logical_cpus", "memory_bytes"});
  sub("device", r.device, {"backend", "available", "count", "name", "architecture", "memory_bytes", "driver"});
  sub("runtime", r.runtime, {"name", "version"});
  sub("compiler", r.compiler, {"id", "version"});
}

void parse_sandbox(const JsonValue& sb, Receipt& r, Issues& issues) {
  const std::string p = "$.sandbox";
  if (!check_object(sb, p, {"network", "processes", "memory"}, issues)) return;
  r.sandbox = sb;
  struct Part {
    const char* key;
    const char* limit;
    bool network;
  };
  for (const Part& part_of : {Part{"network", "policy", true}, Part{"processes", "limit", false},
                              Part{"memory", "limit_bytes", false}}) {
    const char* key = part_of.key;
    const char* limit = part_of.limit;
    const std::string pp = json_path_key(p, key);
    const JsonValue& part = *sb.find(key);
    if (!check_object(part, pp, {limit, "enforcement", "reason"}, issues)) continue;
    const std::string how = read_string(part, pp, "enforcement", issues).value_or("");
    if (part_of.network)
      check_enum(how, {"network_namespace", "user_namespace", "not_requested", "unenforced"}, json_path_key(pp, "enforcement"),
                 issues);
    else
      check_enum(how, {"cgroup_v2", "rlimit", "not_requested", "unenforced"}, json_path_key(pp, "enforcement"), issues);
    const std::optional<std::string> why = read_nullable_string(part, pp, "reason", issues);
    if (how == "unenforced" && !why) issues.add(json_path_key(pp, "reason"), "unenforced-reason", "an unenforced part says why");
  }
}

void parse_model(const JsonValue& m, Issues& issues) {
  const std::string p = "$.model";
  if (m.is_null()) return;
  if (!check_object(m, p, {"id", "weight_files", "config_hash", "tokenizer_hash", "chat_template_hash"}, issues)) return;
  read_string(m, p, "id", issues);
  std::vector<std::string> paths;
  if (const JsonValue* wf = read_array(m, p, "weight_files", issues)) {
    if (wf->array.empty()) issues.add("$.model.weight_files", "non-empty", "a model has weight files");
    for (size_t i = 0; i < wf->array.size(); ++i) {
      std::string ep = json_path_index("$.model.weight_files", i);
      if (!check_object(wf->array[i], ep, {"path", "sha256", "bytes"}, issues)) continue;
      paths.push_back(read_string(wf->array[i], ep, "path", issues).value_or(""));
      check_format(read_string(wf->array[i], ep, "sha256", issues).value_or(""), kHex64, json_path_key(ep, "sha256"),
                   "sha256", issues);
      read_integer(wf->array[i], ep, "bytes", issues);
    }
  }
  check_sorted_unique(paths, "$.model.weight_files", issues);
  for (const char* key : {"config_hash", "tokenizer_hash", "chat_template_hash"}) {
    if (auto h = read_nullable_string(m, p, key, issues)) {
      check_format(*h, "sha256:[0-9a-f]{64}", json_path_key(p, key), "sha256", issues);
    }
  }
}

ReceiptResult parse_result(const JsonValue& v, const std::string& p, Issues& issues) {
  ReceiptResult r;
  if (!check_object(v, p, {"id", "required", "status", "duration_seconds", "metrics", "details"}, issues)) return r;
  r.id = read_string(v, p, "id", issues).value_or("");
  r.required = read_bool(v, p, "required", issues).value_or(true);
  r.status = read_string(v, p, "status", issues).value_or("");
  check_enum(r.status, {"passed", "failed", "skipped"}, json_path_key(p, "status"), issues);
  r.duration_seconds = read_number(v, p, "duration_seconds", issues).value_or(0);
  if (r.duration_seconds < 0) issues.add(json_path_key(p, "duration_seconds"), "range", "durations are not negative");
  std::vector<std::string> names;
  if (const JsonValue* ms = read_array(v, p, "metrics", issues)) {
    for (size_t i = 0; i < ms->array.size(); ++i) {
      std::string mp = json_path_index(json_path_key(p, "metrics"), i);
      const JsonValue& m = ms->array[i];
      if (!check_object(m, mp, {"name", "value", "unit", "aggregation", "lower_is_better"}, issues)) continue;
      ReceiptMetric rm;
      rm.name = read_string(m, mp, "name", issues).value_or("");
      rm.unit = read_string(m, mp, "unit", issues).value_or("");
      rm.aggregation = read_string(m, mp, "aggregation", issues).value_or("");
      if (const JsonValue* lib = m.find("lower_is_better"); lib != nullptr && !lib->is_null()) {
        rm.lower_is_better = read_bool(m, mp, "lower_is_better", issues);
      }
      if (const JsonValue* val = m.find("value")) {
        rm.value = *val;
        bool ok = rm.unit == "bool" ? val->is_bool() : val->is_number();
        if (!ok) {
          issues.add(json_path_key(mp, "value"), "metric-value",
                     rm.unit == "bool" ? "a bool metric has a boolean value" : "a metric value is a finite number");
        }
      }
      names.push_back(rm.name);
      r.metrics.push_back(std::move(rm));
    }
  }
  check_sorted_unique(names, json_path_key(p, "metrics"), issues);
  if (const JsonValue* d = v.find("details"); d != nullptr && !d->is_object()) {
    issues.add(json_path_key(p, "details"), "type", "details is an object");
  }
  return r;
}

void check_timestamps(const Receipt& r, Issues& issues) {
  std::optional<double> created = parse_utc(r.created_at_utc);
  std::optional<double> started = parse_utc(r.started_at_utc);
  std::optional<double> finished = parse_utc(r.finished_at_utc);
  if (!created) issues.add("$.created_at_utc", "timestamp", "\"" + r.created_at_utc + "\" is not YYYY-MM-DDTHH:MM:SS[.f]Z");
  if (!started) issues.add("$.qualification.started_at_utc", "timestamp", "\"" + r.started_at_utc + "\" is not a UTC timestamp");
  if (!finished) issues.add("$.qualification.finished_at_utc", "timestamp", "\"" + r.finished_at_utc + "\" is not a UTC timestamp");
  if (started && finished && *finished < *started) {
    issues.add("$.qualification.finished_at_utc", "timestamp-order", "the run finished before it started");
  }
  if (finished && created && *created < *finished) {
    issues.add("$.created_at_utc", "timestamp-order", "the receipt was created before the run finished");
  }
  if (r.duration_seconds < 0) issues.add("$.qualification.duration_seconds", "range", "a duration is not negative");
  if (started && finished && std::fabs((*finished - *started) - r.duration_seconds) > 0.01) {
    issues.add("$.qualification.duration_seconds", "duration-consistency",
               "duration_seconds " + std::to_string(r.duration_seconds) + " differs from finished - started = " +
                   std::to_string(*finished - *started));
  }
}

void check_verdict(const Receipt& r, Issues& issues) {
  const std::string p = "$.qualification.verdict";
  size_t failed = 0, passed = 0;
  for (const ReceiptResult& res : r.results) {
    if (res.status == "failed") ++failed;
    if (res.status == "passed") ++passed;
  }
  if (r.verdict == "passed") {
    if (!r.git_worktree_clean) issues.add(p, "passed-clean", "a passed verdict needs a clean worktree");
    if (r.results.empty()) issues.add(p, "passed-results", "a passed verdict needs results");
    for (size_t i = 0; i < r.results.size(); ++i) {
      if (r.results[i].required && r.results[i].status != "passed") {
        issues.add(p, "passed-results", "required result \"" + r.results[i].id + "\" is " + r.results[i].status);
      }
    }
  } else if (r.verdict == "failed") {
    if (failed == 0) issues.add(p, "failed-has-failure", "a failed verdict names at least one failed result");
  } else if (r.verdict == "skipped") {
    if (r.unsupported_count == 0) issues.add(p, "skipped-evidence", "a skipped verdict records what was unavailable");
    if (passed + failed > 0) issues.add(p, "skipped-evidence", "a skipped run has no passed or failed results");
  }
}

}  // namespace

ReceiptCheck check_receipt_text(std::string_view text) {
  ReceiptCheck out;
  Receipt& r = out.receipt;
  Issues& issues = out.issues;
  Result<JsonValue> doc = parse_strict_json(text);
  if (!doc.ok()) {
    const std::string& m = doc.status().message();
    size_t colon = m.find(": ");
    issues.add(m.substr(0, colon), "json", colon == std::string::npos ? m : m.substr(colon + 2));
    return out;
  }
  r.document = *doc;
  const JsonValue& d = *doc;
  // Version 2 adds `sandbox`; version 1 receipts, written before sandboxing, stay valid.
  const JsonValue* version = d.is_object() ? d.find("schema_version") : nullptr;
  const bool v2 = version != nullptr && version->is_number() && version->is_integer && version->number == 2;
  if (!(v2 ? check_object(d, "$",
                          {"schema_version", "receipt_id", "created_at_utc", "source", "qualification", "environment",
                           "model", "workload", "effective_config", "results", "artifacts", "unsupported", "notes",
                           "sandbox"},
                          issues)
           : check_object(d, "$",
                          {"schema_version", "receipt_id", "created_at_utc", "source", "qualification", "environment",
                           "model", "workload", "effective_config", "results", "artifacts", "unsupported", "notes"},
                          issues))) {
    return out;
  }
  const int64_t schema = read_integer(d, "$", "schema_version", issues).value_or(1);
  if (schema != 1 && schema != 2) {
    issues.add("$.schema_version", "schema-version", "only receipt schema_version 1 and 2 are understood");
  }
  if (const JsonValue* sb = d.find("sandbox")) parse_sandbox(*sb, r, issues);
  r.receipt_id = read_string(d, "$", "receipt_id", issues).value_or("");
  check_format(r.receipt_id, "[a-z0-9][a-z0-9._-]{2,200}", "$.receipt_id", "receipt-id", issues);
  r.created_at_utc = read_string(d, "$", "created_at_utc", issues).value_or("");
  if (const JsonValue* s = d.find("source"); s && check_object(*s, "$.source", {"tree_hash", "git_commit", "git_worktree_clean"}, issues)) {
    r.tree_hash = read_string(*s, "$.source", "tree_hash", issues).value_or("");
    r.git_commit = read_string(*s, "$.source", "git_commit", issues).value_or("");
    r.git_worktree_clean = read_bool(*s, "$.source", "git_worktree_clean", issues).value_or(false);
    check_format(r.tree_hash, "sha256:[0-9a-f]{64}", "$.source.tree_hash", "sha256", issues);
    check_format(r.git_commit, "[0-9a-f]{40}([0-9a-f]{24})?", "$.source.git_commit", "git-commit", issues);
  }
  const std::string q = "$.qualification";
  if (const JsonValue* s = d.find("qualification");
      s && check_object(*s, q,
                        {"kind", "backend", "profile", "verdict", "started_at_utc", "finished_at_utc", "duration_seconds",
                         "command"},
                        issues)) {
    r.kind = read_string(*s, q, "kind", issues).value_or("");
    r.backend = read_string(*s, q, "backend", issues).value_or("");
    r.profile = read_string(*s, q, "profile", issues).value_or("");
    r.verdict = read_string(*s, q, "verdict", issues).value_or("");
    r.started_at_utc = read_string(*s, q, "started_at_utc", issues).value_or("");
    r.finished_at_utc = read_string(*s, q, "finished_at_utc", issues).value_or("");
    r.duration_seconds = read_number(*s, q, "duration_seconds", issues).value_or(0);
    if (read_string_array(*s, q, "command", issues).empty()) {
      issues.add("$.qualification.command", "non-empty", "the command that produced the receipt is recorded");
    }
    check_enum(r.kind, {"environment", "correctness", "serving", "performance", "training", "eval", "soak"},
               "$.qualification.kind", issues);
    check_enum(r.backend, {"cpu", "cuda", "rocm", "vulkan", "metal"}, "$.qualification.backend", issues);
    check_enum(r.verdict, {"passed", "failed", "skipped"}, "$.qualification.verdict", issues);
  }
  if (const JsonValue* e = d.find("environment")) parse_environment(*e, r, issues);
  if (const JsonValue* m = d.find("model")) {
    r.model = *m;
    parse_model(*m, issues);
  }
  if (const JsonValue* w = d.find("workload");
      w && check_object(*w, "$.workload", {"id", "sha256", "seed", "parameters"}, issues)) {
    r.workload_id = read_string(*w, "$.workload", "id", issues).value_or("");
    r.workload_sha256 = read_string(*w, "$.workload", "sha256", issues).value_or("");
    check_format(r.workload_sha256, "sha256:[0-9a-f]{64}", "$.workload.sha256", "sha256", issues);
    r.seed = *w->find("seed");
    if (!r.seed.is_null() && !(r.seed.is_number() && r.seed.is_integer)) {
      issues.add("$.workload.seed", "type", "the seed is an integer or null");
    }
    r.parameters = *w->find("parameters");
    if (!r.parameters.is_object()) issues.add("$.workload.parameters", "type", "parameters is an object");
  }
  if (const JsonValue* ec = d.find("effective_config")) {
    r.effective_config = *ec;
    if (!ec->is_object()) issues.add("$.effective_config", "type", "effective_config is an object");
  }
  if (const JsonValue* rs = read_array(d, "$", "results", issues)) {
    std::set<std::string> ids;
    for (size_t i = 0; i < rs->array.size(); ++i) {
      std::string p = json_path_index("$.results", i);
      r.results.push_back(parse_result(rs->array[i], p, issues));
      if (!ids.insert(r.results.back().id).second) {
        issues.add(json_path_key(p, "id"), "unique", "result id \"" + r.results.back().id + "\" repeats");
      }
    }
  }
  if (const JsonValue* as = read_array(d, "$", "artifacts", issues)) {
    for (size_t i = 0; i < as->array.size(); ++i) {
      std::string p = json_path_index("$.artifacts", i);
      ReceiptArtifact a;
      if (check_object(as->array[i], p, {"kind", "location", "path", "sha256", "bytes"}, issues)) {
        a.kind = read_string(as->array[i], p, "kind", issues).value_or("");
        a.location = read_string(as->array[i], p, "location", issues).value_or("");
        a.path = read_string(as->array[i], p, "path", issues).value_or("");
        a.sha256 = read_string(as->array[i], p, "sha256", issues).value_or("");
        a.bytes = static_cast<uint64_t>(read_integer(as->array[i], p, "bytes", issues).value_or(0));
        check_enum(a.location, {"local"}, json_path_key(p, "location"), issues);
        check_format(a.sha256, kHex64, json_path_key(p, "sha256"), "sha256", issues);
        if (a.path.empty() || a.path[0] == '/' || a.path.find("..") != std::string::npos) {
          issues.add(json_path_key(p, "path"), "artifact-path", "artifact paths are repository-relative without '..'");
        }
      }
      r.artifacts.push_back(std::move(a));
    }
  }
  if (const JsonValue* us = read_array(d, "$", "unsupported", issues)) {
    r.unsupported_count = us->array.size();
    for (size_t i = 0; i < us->array.size(); ++i) {
      std::string p = json_path_index("$.unsupported", i);
      if (check_object(us->array[i], p, {"probe", "reason"}, issues)) {
        read_string(us->array[i], p, "probe", issues);
        read_string(us->array[i], p, "reason", issues);
      }
    }
  }
  read_string_array(d, "$", "notes", issues);
  check_timestamps(r, issues);
  check_verdict(r, issues);
  return out;
}

Result<ReceiptCheck> check_receipt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open receipt " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return check_receipt_text(ss.str());
}

void check_receipt_requirements(const Receipt& r, const ReceiptRequirements& req, const std::string& repo_path,
                                Issues& issues) {
  if (req.enforced) {
    const JsonValue* network = r.sandbox.is_object() ? r.sandbox.find("network") : nullptr;
    const JsonValue* how = network != nullptr && network->is_object() ? network->find("enforcement") : nullptr;
    const JsonValue* why = network != nullptr && network->is_object() ? network->find("reason") : nullptr;
    if (how == nullptr || !how->is_string()) {
      issues.add("$.sandbox", "enforced", "the receipt records no sandbox (schema_version 1): its cases ran with the network");
    } else if (how->string != "network_namespace" && how->string != "user_namespace") {
      issues.add("$.sandbox.network.enforcement", "enforced",
                 "the cases ran " + how->string +
                     (why != nullptr && why->is_string() ? ": " + why->string : std::string()));
    }
  }
  if (!req.current_source && !req.local_artifacts && !req.known_commit) return;
  Result<GitRepo> repo = GitRepo::discover(repo_path);
  if (!repo.ok()) {
    issues.add("$", "repository", repo.status().message());
    return;
  }
  if (req.known_commit) {
    Result<bool> known = repo->has_commit(r.git_commit);
    if (!known.ok() || !*known) {
      issues.add("$.source.git_commit", "known-commit", r.git_commit + " is not a commit of " + repo->root());
    }
  }
  if (req.current_source) {
    ReceiptFreshness f = receipt_freshness(r, *repo);
    if (f.state != ReceiptCurrency::kCurrent)
      issues.add("$.source", "current-source", std::string(currency_name(f.state)) + ": " + f.why);
  }
  if (req.local_artifacts) {
    for (size_t i = 0; i < r.artifacts.size(); ++i) {
      const ReceiptArtifact& a = r.artifacts[i];
      std::string p = json_path_index("$.artifacts", i);
      Result<FileDigest> d = sha256_file(repo->root() + "/" + a.path);
      if (!d.ok()) {
        issues.add(json_path_key(p, "path"), "local-artifact", a.path + " is not present in this checkout");
      } else if (d->sha256 != a.sha256 || d->bytes != a.bytes) {
        issues.add(json_path_key(p, "sha256"), "local-artifact", a.path + " no longer has the recorded sha256 and size");
      }
    }
  }
}

}  // namespace kiln::qualify
