#include "qualify/runner.h"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/atomic_publish.h"
#include "qualify/git_repo.h"
#include "qualify/model_fingerprint.h"
#include "qualify/placeholder.h"
#include "qualify/platform_probe.h"
#include "qualify/receipt.h"
#include "qualify/regex.h"
#include "core/sha256.h"
#include "qualify/utc_time.h"
#include "qualify/variables.h"
#include "qualify/workload.h"

namespace kiln::qualify {
namespace fs = std::filesystem;
namespace {

JsonValue str(const std::string& s) { return JsonValue::make_string(s); }
JsonValue opt_str(const std::optional<std::string>& s) { return s ? str(*s) : JsonValue::make_null(); }
JsonValue opt_u64(const std::optional<uint64_t>& v) {
  return v ? JsonValue::make_integer(static_cast<int64_t>(*v)) : JsonValue::make_null();
}

bool within(const fs::path& path, const fs::path& dir) {
  auto [d, p] = std::mismatch(dir.begin(), dir.end(), path.begin(), path.end());
  return d == dir.end() && p != path.end();
}

std::string random_suffix() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

bool variant_uses(const Variant& v, std::string_view name) {
  std::string ph = "${" + std::string(name) + "}";
  for (const WorkloadCase& c : v.cases) {
    for (const std::string& a : c.command) if (a == ph) return true;
    for (const auto& [k, val] : c.environment) if (val == ph) return true;
  }
  return false;
}

JsonValue environment_json(const std::string& host_id, const std::string& backend, const PlatformFacts& f) {
  JsonValue os = JsonValue::make_object();
  os.set("name", str(f.os_name)).set("release", str(f.os_release)).set("version", str(f.os_version));
  os.set("machine", str(f.machine)).set("distribution", opt_str(f.distribution));
  JsonValue host = JsonValue::make_object();
  host.set("cpu_model", opt_str(f.cpu_model)).set("logical_cpus", JsonValue::make_integer(f.logical_cpus));
  host.set("memory_bytes", opt_u64(f.memory_bytes));
  JsonValue device = JsonValue::make_object();
  device.set("backend", str(backend)).set("available", JsonValue::make_bool(f.device.available));
  device.set("count", JsonValue::make_integer(f.device.count)).set("name", opt_str(f.device.name));
  device.set("architecture", opt_str(f.device.architecture)).set("memory_bytes", opt_u64(f.device.memory_bytes));
  device.set("driver", opt_str(f.device.driver));
  JsonValue runtime = JsonValue::make_object();
  runtime.set("name", opt_str(f.runtime_name)).set("version", opt_str(f.runtime_version));
  JsonValue compiler = JsonValue::make_object();
  compiler.set("id", str(f.compiler_id)).set("version", str(f.compiler_version));
  JsonValue env = JsonValue::make_object();
  env.set("host_id", str(host_id)).set("os", std::move(os)).set("host", std::move(host));
  env.set("device", std::move(device)).set("runtime", std::move(runtime)).set("compiler", std::move(compiler));
  return env;
}

JsonValue model_json(const std::optional<ModelFingerprint>& m) {
  if (!m) return JsonValue::make_null();
  JsonValue files = JsonValue::make_array();
  for (const WeightFile& w : m->weight_files) {
    JsonValue f = JsonValue::make_object();
    f.set("path", str(w.path)).set("sha256", str(w.sha256)).set("bytes", JsonValue::make_integer(static_cast<int64_t>(w.bytes)));
    files.array.push_back(std::move(f));
  }
  JsonValue out = JsonValue::make_object();
  out.set("id", str(m->id)).set("weight_files", std::move(files));
  out.set("config_hash", opt_str(m->config_hash)).set("tokenizer_hash", opt_str(m->tokenizer_hash));
  out.set("chat_template_hash", opt_str(m->chat_template_hash));
  return out;
}

JsonValue runner_result(const std::string& id, bool passed, const std::vector<std::string>& failures) {
  JsonValue r = JsonValue::make_object();
  r.set("id", str(id)).set("required", JsonValue::make_bool(true)).set("status", str(passed ? "passed" : "failed"));
  r.set("duration_seconds", JsonValue::make_number(0)).set("metrics", JsonValue::make_array());
  JsonValue details = JsonValue::make_object();
  JsonValue f = JsonValue::make_array();
  for (const std::string& s : failures) f.array.push_back(str(s));
  details.set("failures", std::move(f));
  r.set("details", std::move(details));
  return r;
}

// Everything decided before any case runs; a failure here is a refusal.
struct Preflight {
  GitRepo repo{""};
  Workload workload;
  const Variant* variant = nullptr;
  ResolvedVariables variables;
  std::string head;
  std::string tree_hash;
  std::optional<ModelFingerprint> model;
  std::string model_dir;
  std::string receipt_id;
  fs::path receipt_path;
  fs::path run_dir;
};

Result<Preflight> preflight(const RunRequest& req) {
  Preflight p;
  if (!full_match("[A-Za-z0-9][A-Za-z0-9._-]{0,127}", req.host_id)) {
    return invalid_argument("--host-id \"" + req.host_id + "\" must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$");
  }
  std::error_code ec;
  fs::path workload_abs = fs::weakly_canonical(fs::absolute(req.workload_path), ec);
  if (ec || !fs::is_regular_file(workload_abs)) return not_found("workload " + req.workload_path + " does not exist");
  KILN_ASSIGN_OR_RETURN(p.repo, GitRepo::discover(workload_abs.string()));
  KILN_ASSIGN_OR_RETURN(p.head, p.repo.head_commit());
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> dirty, p.repo.dirty_paths());
  if (!dirty.empty()) {
    std::string list;
    for (size_t i = 0; i < dirty.size() && i < 10; ++i) list += (i ? ", " : "") + dirty[i];
    return failed_precondition("the worktree " + p.repo.root() + " is dirty (" + std::to_string(dirty.size()) +
                               " path(s), untracked files included: " + list + "); commit or remove them first");
  }
  std::string rel = workload_abs.lexically_relative(fs::path(p.repo.root())).string();
  Result<std::string> committed = p.repo.file_at_head(rel);
  if (!committed.ok()) return failed_precondition("workload " + rel + " is not committed at HEAD");
  std::ifstream in(workload_abs, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str() != *committed) return failed_precondition("workload " + rel + " differs from its committed bytes at HEAD");
  WorkloadCheck check = check_workload_text(ss.str());
  KILN_RETURN_IF_ERROR(check.issues.to_status("workload " + rel + " is invalid"));
  p.workload = std::move(check.workload);
  p.variant = p.workload.find_variant(req.variant_id);
  if (p.variant == nullptr) {
    std::string ids;
    for (const Variant& v : p.workload.variants) ids += (ids.empty() ? "" : ", ") + v.id;
    return invalid_argument("--variant " + req.variant_id + " is not a variant of " + p.workload.workload_id +
                            " (variants: " + ids + ")");
  }
  KILN_ASSIGN_OR_RETURN(p.variables, resolve_variables(p.workload, req.variables));
  if (p.workload.determinism.seed) {
    p.variables.placeholder_values[std::string(kSeedPlaceholder)] = std::to_string(*p.workload.determinism.seed);
  }
  bool needs_model = variant_uses(*p.variant, kModelPathPlaceholder);
  if (needs_model && !req.model_dir) {
    return invalid_argument("variant " + p.variant->id + " of " + p.workload.workload_id + " runs against a model: pass --model DIR");
  }
  if (req.model_dir) {
    p.model_dir = fs::absolute(*req.model_dir).lexically_normal().string();
    KILN_ASSIGN_OR_RETURN(ModelFingerprint fp, fingerprint_model(p.model_dir, req.model_id));
    p.model = std::move(fp);
    p.variables.placeholder_values[std::string(kModelPathPlaceholder)] = p.model_dir;
  }
  // Output location and a fresh run directory.
  WallTime now = std::chrono::system_clock::now();
  std::string stamp = compact_utc(now);
  for (char& c : stamp) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  p.receipt_id = p.workload.workload_id + "." + p.variant->id + "." + stamp + "." + random_suffix();
  fs::path root(p.repo.root());
  p.receipt_path = req.output_path ? fs::absolute(*req.output_path).lexically_normal()
                                   : root / ".qualification" / "receipts" / (p.receipt_id + ".json");
  if (!within(p.receipt_path, root / ".qualification" / "receipts") &&
      !within(p.receipt_path, root / "qualification" / "receipts")) {
    return invalid_argument("--output " + p.receipt_path.string() + " is outside " + (root / ".qualification/receipts").string() +
                            " and " + (root / "qualification/receipts").string());
  }
  if (p.receipt_path.extension() != ".json") return invalid_argument("--output " + p.receipt_path.string() + " must end in .json");
  if (fs::exists(p.receipt_path, ec) || fs::is_symlink(p.receipt_path, ec)) {
    return failed_precondition("receipt " + p.receipt_path.string() + " already exists; receipts are never overwritten");
  }
  p.run_dir = root / ".qualification" / "runs" / p.receipt_id;
  fs::create_directories(p.run_dir.parent_path(), ec);
  if (mkdir(p.run_dir.c_str(), 0755) != 0) {
    return failed_precondition("run directory " + p.run_dir.string() + " already exists or cannot be created");
  }
  fs::create_directories(p.receipt_path.parent_path(), ec);
  KILN_ASSIGN_OR_RETURN(p.tree_hash, source_tree_hash(p.repo));
  return p;
}

// What the cases and the runner's own checks found.
struct Findings {
  JsonValue results = JsonValue::make_array();
  std::vector<EvidenceFile> evidence;
  std::vector<std::string> notes;
  bool all_required_passed = true, any_failed = false, skipped = false;
  void add_runner_result(const std::string& id, const std::vector<std::string>& failures) {
    results.array.push_back(runner_result(id, failures.empty(), failures));
    if (!failures.empty()) all_required_passed = false, any_failed = true;
  }
};

// Every case of the variant, in order; none where it needs a device this host lacks.
void run_cases(const RunRequest& req, const Preflight& p, const PlatformFacts& facts, const SandboxPlan& sandbox,
               Findings& f) {
  const Variant& variant = *p.variant;
  if (variant.device_requirement == "required" && !facts.device.available) {
    if (variant.skip_policy == "skip") {
      f.skipped = true;
      f.notes.push_back("no " + variant.backend + " device was found; skip_policy is skip, so no case ran");
    } else {
      f.add_runner_result("runner:device", {"variant " + variant.id + " requires a " + variant.backend +
                                            " device and none was found; no case ran"});
    }
    return;
  }
  CaseContext ctx;
  ctx.workload = &p.workload;
  ctx.variant = &variant;
  ctx.repo_root = p.repo.root();
  ctx.run_dir = p.run_dir.string();
  ctx.placeholders = p.variables.placeholder_values;
  ctx.limits = req.limits;
  ctx.sandbox = &sandbox;
  for (const WorkloadCase& c : variant.cases) {
    CaseRun run = execute_case(ctx, c);
    if (!run.passed) {
      f.any_failed = true;
      if (c.required) f.all_required_passed = false;
    }
    f.results.array.push_back(std::move(run.result));
    f.evidence.insert(f.evidence.end(), run.evidence.begin(), run.evidence.end());
  }
}

// Integrity after the run: the same commit, a clean tree with the same hash, the same model.
void check_integrity(const RunRequest& req, const Preflight& p, Findings& f) {
  std::vector<std::string> source_failures;
  Result<std::string> head_after = p.repo.head_commit();
  if (!head_after.ok() || *head_after != p.head) source_failures.push_back("HEAD moved during the run");
  Result<std::vector<std::string>> dirty_after = p.repo.dirty_paths();
  if (!dirty_after.ok() || !dirty_after->empty()) source_failures.push_back("the worktree became dirty during the run");
  Result<std::string> tree_after = source_tree_hash(p.repo);
  if (!tree_after.ok() || *tree_after != p.tree_hash) source_failures.push_back("the source tree changed during the run");
  f.add_runner_result("runner:source-integrity", source_failures);
  if (!p.model) return;
  Result<ModelFingerprint> after = fingerprint_model(p.model_dir, req.model_id);
  std::vector<std::string> model_failures;
  if (!after.ok()) model_failures.push_back("re-fingerprinting failed: " + after.status().message());
  else if (!after->same_identity(*p.model)) model_failures.push_back("the model's weights, config, tokenizer or chat template changed during the run");
  f.add_runner_result("runner:model-integrity", model_failures);
}

// The run's normalised evidence (evidence.json in the run directory), then every evidence file
// with its digest: the receipt's artifacts.
JsonValue artifacts_of(const RunRequest& req, const Preflight& p, const std::string& verdict, Findings& f,
                       std::string& summary_path) {
  JsonValue summary = JsonValue::make_object();
  summary.set("receipt_id", str(p.receipt_id));
  summary.set("workload", str(fs::path(req.workload_path).string()));
  summary.set("variant", str(p.variant->id));
  summary.set("verdict", str(verdict));
  summary.set("results", f.results);
  summary_path = (p.run_dir / "evidence.json").string();
  {
    std::ofstream out(summary_path, std::ios::binary);
    out << to_json_text(summary, 2) << "\n";
  }
  f.evidence.push_back({"evidence", summary_path});
  JsonValue artifacts = JsonValue::make_array();
  for (const EvidenceFile& e : f.evidence) {
    Result<FileDigest> d = sha256_file(e.path);
    if (!d.ok()) continue;
    JsonValue a = JsonValue::make_object();
    a.set("kind", str(e.kind)).set("location", str("local"));
    a.set("path", str(fs::path(e.path).lexically_relative(p.repo.root()).string()));
    a.set("sha256", str(d->sha256)).set("bytes", JsonValue::make_integer(static_cast<int64_t>(d->bytes)));
    artifacts.array.push_back(std::move(a));
  }
  return artifacts;
}

// When the run was, for the receipt.
struct RunTimes {
  WallTime started, finished;
  double seconds = 0;
};

// How the cases were confined: each part's limit, how it held, and why not where it did not.
JsonValue sandbox_json(const SandboxPlan& plan, const std::string& network_policy) {
  auto part = [](const char* limit_key, JsonValue limit, const Enforcement& e) {
    JsonValue o = JsonValue::make_object();
    o.set(limit_key, std::move(limit)).set("enforcement", str(e.how));
    o.set("reason", e.why.empty() ? JsonValue::make_null() : str(e.why));
    return o;
  };
  auto bound = [](uint64_t v) { return v == 0 ? JsonValue::make_null() : JsonValue::make_integer(static_cast<int64_t>(v)); };
  JsonValue s = JsonValue::make_object();
  s.set("network", part("policy", str(network_policy), plan.network));
  s.set("processes", part("limit", bound(plan.policy.max_processes), plan.processes));
  s.set("memory", part("limit_bytes", bound(plan.policy.max_memory_bytes), plan.memory));
  return s;
}

JsonValue receipt_of(const RunRequest& req, const Preflight& p, const PlatformFacts& facts, const std::string& verdict,
                     const RunTimes& t, const SandboxPlan& sandbox, Findings& f, JsonValue artifacts) {
  const Variant& variant = *p.variant;
  JsonValue receipt = JsonValue::make_object();
  receipt.set("schema_version", JsonValue::make_integer(2));
  receipt.set("receipt_id", str(p.receipt_id));
  WallTime created = std::max(std::chrono::system_clock::now(), t.finished);
  receipt.set("created_at_utc", str(format_utc(created)));
  JsonValue source = JsonValue::make_object();
  source.set("tree_hash", str(p.tree_hash)).set("git_commit", str(p.head)).set("git_worktree_clean", JsonValue::make_bool(true));
  receipt.set("source", std::move(source));
  JsonValue q = JsonValue::make_object();
  q.set("kind", str(p.workload.kind)).set("backend", str(variant.backend)).set("profile", str(variant.id));
  q.set("verdict", str(verdict)).set("started_at_utc", str(format_utc(t.started)));
  q.set("finished_at_utc", str(format_utc(t.finished)));
  // Rounded to the microsecond like the timestamps, so the two always agree.
  q.set("duration_seconds", JsonValue::make_number(std::round(t.seconds * 1e6) / 1e6));
  JsonValue cmd = JsonValue::make_array();
  for (const std::string& a : req.command) cmd.array.push_back(str(a));
  if (cmd.array.empty()) cmd.array.push_back(str("kiln"));
  q.set("command", std::move(cmd));
  receipt.set("qualification", std::move(q));
  receipt.set("environment", environment_json(req.host_id, variant.backend, facts));
  receipt.set("model", model_json(p.model));
  JsonValue wl = JsonValue::make_object();
  wl.set("id", str(p.workload.workload_id)).set("sha256", str(p.workload.digest));
  wl.set("seed", p.workload.determinism.seed ? JsonValue::make_integer(*p.workload.determinism.seed) : JsonValue::make_null());
  wl.set("parameters", p.variables.parameters);
  receipt.set("workload", std::move(wl));
  receipt.set("effective_config", variant.effective_config);
  receipt.set("results", std::move(f.results));
  receipt.set("artifacts", std::move(artifacts));
  JsonValue unsupported = JsonValue::make_array();
  for (const Unsupported& u : facts.unsupported) {
    JsonValue e = JsonValue::make_object();
    e.set("probe", str(u.probe)).set("reason", str(u.reason));
    unsupported.array.push_back(std::move(e));
  }
  receipt.set("unsupported", std::move(unsupported));
  JsonValue n = JsonValue::make_array();
  for (const std::string& s : f.notes) n.array.push_back(str(s));
  receipt.set("notes", std::move(n));
  receipt.set("sandbox", sandbox_json(sandbox, p.workload.determinism.network_access));
  return receipt;
}

}  // namespace

Result<RunOutcome> run_workload(const RunRequest& req) {
  KILN_ASSIGN_OR_RETURN(Preflight p, preflight(req));
  RunTimes t;
  t.started = std::chrono::system_clock::now();
  const auto started = std::chrono::steady_clock::now();
  const PlatformFacts facts = probe_platform(p.variant->backend);
  SandboxPolicy policy = req.sandbox;
  policy.isolate_network = p.workload.determinism.network_access == "forbidden";
  const SandboxPlan sandbox = plan_sandbox(policy);
  Findings f;
  run_cases(req, p, facts, sandbox, f);
  check_integrity(req, p, f);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  t.finished = t.started + std::chrono::duration_cast<WallTime::duration>(std::chrono::duration<double>(t.seconds));
  const std::string verdict = f.skipped && !f.any_failed ? "skipped"
                              : (f.all_required_passed && !f.results.array.empty() ? "passed" : "failed");
  std::string summary_path;
  JsonValue artifacts = artifacts_of(req, p, verdict, f, summary_path);
  const std::string text = to_json_text(receipt_of(req, p, facts, verdict, t, sandbox, f, std::move(artifacts)), 2) + "\n";
  ReceiptCheck self_check = check_receipt_text(text);
  if (!self_check.issues.empty()) {
    return internal_error("the runner produced an invalid receipt (kept at " + summary_path + "):\n" +
                          self_check.issues.to_string());
  }
  KILN_RETURN_IF_ERROR(write_file_atomically(p.receipt_path.string(), text, PublishMode::kCreateNew));
  RunOutcome out;
  out.verdict = verdict;
  out.receipt_path = p.receipt_path.string();
  out.run_dir = p.run_dir.string();
  out.receipt_id = p.receipt_id;
  return out;
}

}  // namespace kiln::qualify
