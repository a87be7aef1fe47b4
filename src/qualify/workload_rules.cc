// Value rules of a workload: names and ids, sorted and unique lists, variables used and typed,
// placeholder delivery, no shell evaluation, repo-relative directories, backend/device/skip
// policy, result protocols and declared metrics, and the comparison policy.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/regex.h"
#include "qualify/effective_config.h"
#include "qualify/json_fields.h"
#include "qualify/metric_definitions.h"
#include "qualify/placeholder.h"
#include "qualify/regex.h"
#include "qualify/workload.h"

namespace kiln::qualify {
namespace {

const std::set<std::string> kKinds = {"environment", "correctness", "serving", "performance",
                                      "training",    "eval",        "soak"};
const std::set<std::string> kBackends = {"cpu", "cuda", "rocm", "vulkan", "metal"};
// Programs that evaluate a command string, and wrappers that would hand argv to one.
const std::set<std::string> kShells = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox"};
const std::set<std::string> kWrappers = {"env", "nice", "ionice", "stdbuf", "time", "xargs", "taskset", "chrt", "timeout"};
// Programs whose purpose is to escape the case's process group or privileges.
const std::set<std::string> kEscapes = {"setsid", "nohup", "daemonize", "sudo", "su", "disown"};
constexpr int64_t kMaxSeed = (int64_t{1} << 53) - 1;
constexpr int64_t kMaxTimeoutSeconds = 86400;

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

void check_enum(const std::string& value, const std::set<std::string>& allowed, const std::string& path,
                Issues& issues) {
  if (allowed.count(value) == 0) issues.add(path, "enum", quoted(value) + " is not one of: " + join(allowed));
}

void check_pattern(const std::string& value, std::string_view pattern, const std::string& rule,
                   const std::string& path, Issues& issues) {
  if (!full_match(pattern, value)) {
    issues.add(path, rule, quoted(value) + " must match ^" + std::string(pattern) + "$");
  }
}

void check_non_empty_text(const std::string& value, const std::string& path, Issues& issues) {
  if (value.find_first_not_of(" \t\n") == std::string::npos) issues.add(path, "non-empty", "must not be empty");
}

std::string basename_of(const std::string& s) {
  size_t slash = s.find_last_of('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

// Inputs are glob pathspecs inside the repository: relative, without `..`, and of the characters
// file names in this project use plus `*`.
void check_inputs(const std::vector<std::string>& inputs, Issues& issues) {
  constexpr size_t kMaxInputs = 64;
  if (inputs.size() > kMaxInputs) issues.add("$.inputs", "limit", "at most " + std::to_string(kMaxInputs) + " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string path = json_path_index("$.inputs", i);
    const std::string& g = inputs[i];
    check_pattern(g, "[A-Za-z0-9._*-]+(/[A-Za-z0-9._*-]+)*", "input", path, issues);
    if (g == "." || g.rfind("./", 0) == 0 || g.find("/./") != std::string::npos || g == ".." ||
        g.rfind("../", 0) == 0 || g.find("/../") != std::string::npos || g.ends_with("/..")) {
      issues.add(path, "input", quoted(g) + " must name paths inside the repository without . or .. segments");
    }
  }
  check_sorted_unique(inputs, "$.inputs", issues);
}

// Which placeholders each variant uses, and where.
struct PlaceholderUse {
  std::set<std::string> in_argv;
  std::set<std::string> in_environment;
  bool uses(const std::string& n) const { return in_argv.count(n) || in_environment.count(n); }
};

bool is_builtin_placeholder(const std::string& name) {
  return name == kSeedPlaceholder || name == kModelPathPlaceholder;
}

// Checks one argv element or environment value; returns the placeholder name it fills, if any.
std::optional<std::string> check_value_placeholder(const std::string& value, const std::string& path,
                                                   const Workload& w, Issues& issues) {
  if (value.find('\0') != std::string::npos) {
    issues.add(path, "nul-byte", "arguments and environment values cannot contain NUL");
    return std::nullopt;
  }
  if (!mentions_placeholder(value)) return std::nullopt;
  std::optional<std::string> name = whole_placeholder(value);
  if (!name) {
    issues.add(path, "placeholder-whole-element",
               quoted(value) + " uses a placeholder inside a larger string; ${name} must fill the whole element");
    return std::nullopt;
  }
  if (!is_builtin_placeholder(*name) && w.find_variable(*name) == nullptr) {
    issues.add(path, "unknown-placeholder", "${" + *name + "} names no declared variable (nor seed or model_path)");
  }
  return name;
}

void check_command(const WorkloadCase& c, const std::string& cpath, const Workload& w, PlaceholderUse& use,
                   Issues& issues) {
  std::string path = json_path_key(cpath, "command");
  if (c.command.empty()) {
    issues.add(path, "command-empty", "a case needs at least argv[0]");
    return;
  }
  const std::string& argv0 = c.command[0];
  std::string p0 = json_path_index(path, 0);
  if (mentions_placeholder(argv0)) {
    issues.add(p0, "argv0-placeholder", "argv[0] names the program literally; it may not be a placeholder");
  } else if (argv0.empty()) {
    issues.add(p0, "command-empty", "argv[0] is empty");
  }
  std::string prog = basename_of(argv0);
  if (kShells.count(prog)) {
    issues.add(p0, "no-shell", quoted(prog) + " evaluates shell text; give the program's argv directly");
  } else if (kEscapes.count(prog)) {
    issues.add(p0, "no-escape", quoted(prog) + " would leave the case's process group; the runner owns processes");
  } else if (kWrappers.count(prog)) {
    for (size_t i = 1; i < c.command.size(); ++i) {
      if (kShells.count(basename_of(c.command[i]))) {
        issues.add(json_path_index(path, i), "no-shell",
                   quoted(c.command[i]) + " behind " + quoted(prog) + " evaluates shell text");
        break;
      }
    }
  }
  for (size_t i = 0; i < c.command.size(); ++i) {
    if (i == 0 && mentions_placeholder(argv0)) continue;
    if (auto name = check_value_placeholder(c.command[i], json_path_index(path, i), w, issues)) {
      use.in_argv.insert(*name);
    }
  }
}

void check_working_directory(const std::string& dir, const std::string& path, Issues& issues) {
  if (dir.empty()) {
    issues.add(path, "working-directory", "must name a repository-relative directory (\".\" for the root)");
    return;
  }
  if (dir[0] == '/') {
    issues.add(path, "working-directory", quoted(dir) + " is absolute; it must be relative to the repository root");
    return;
  }
  if (mentions_placeholder(dir) || dir.find('\\') != std::string::npos) {
    issues.add(path, "working-directory", quoted(dir) + " must be a literal path with '/' separators");
    return;
  }
  size_t start = 0;
  while (start <= dir.size()) {
    size_t end = dir.find('/', start);
    if (end == std::string::npos) end = dir.size();
    std::string part = dir.substr(start, end - start);
    if (part == "..") {
      issues.add(path, "working-directory", quoted(dir) + " climbs out with '..'");
      return;
    }
    if (part.empty() && dir != ".") {
      issues.add(path, "working-directory", quoted(dir) + " has an empty path component");
      return;
    }
    start = end + 1;
  }
}

void check_metric_definitions(const WorkloadCase& c, const std::string& rpath, Issues& issues) {
  std::string mpath = json_path_key(rpath, "declared_metrics");
  std::vector<std::string> names;
  for (size_t i = 0; i < c.declared_metrics.size(); ++i) {
    const MetricDefinition& m = c.declared_metrics[i];
    std::string p = json_path_index(mpath, i);
    names.push_back(m.name);
    check_pattern(m.name, "[a-z][a-z0-9_]{0,63}", "metric-name", json_path_key(p, "name"), issues);
    if (const MetricDefinition* def = find_runner_metric(m.name)) {
      if (!same_definition(*def, m)) {
        issues.add(p, "runner-metric-definition",
                   quoted(m.name) + " is measured by the runner as unit " + quoted(def->unit) + ", aggregation " +
                       quoted(def->aggregation) + "; declare it exactly so");
      }
      continue;
    }
    if (c.producer == "runner") {
      issues.add(json_path_key(p, "name"), "command-metric-producer",
                 quoted(m.name) + " is not a runner metric; only a command-produced case can report it");
    }
    check_pattern(m.unit, "[A-Za-z0-9_/%.-]{1,32}", "metric-unit", json_path_key(p, "unit"), issues);
    if (!is_command_aggregation(m.aggregation)) {
      issues.add(json_path_key(p, "aggregation"), "aggregation",
                 quoted(m.aggregation) + " is not one of: mean, min, max, sum");
    }
  }
  check_sorted_unique(names, mpath, issues);
}

void check_case(const WorkloadCase& c, const std::string& path, const Workload& w, PlaceholderUse& use,
                Issues& issues) {
  check_pattern(c.id, "[a-z0-9][a-z0-9._-]{0,63}", "case-id", json_path_key(path, "id"), issues);
  check_non_empty_text(c.description, json_path_key(path, "description"), issues);
  check_command(c, path, w, use, issues);
  check_working_directory(c.working_directory, json_path_key(path, "working_directory"), issues);
  std::string epath = json_path_key(path, "environment");
  for (const auto& [k, v] : c.environment) {
    std::string p = json_path_key(epath, k);
    check_pattern(k, "[A-Z_][A-Z0-9_]*", "environment-name", p, issues);
    if (k.rfind("KILN_QUALIFICATION_", 0) == 0) {
      issues.add(p, "reserved-environment", quoted(k) + " is set by the runner itself");
    }
    if (auto name = check_value_placeholder(v, p, w, issues)) use.in_environment.insert(*name);
  }
  if (c.timeout_seconds < 1 || c.timeout_seconds > kMaxTimeoutSeconds) {
    issues.add(json_path_key(path, "timeout_seconds"), "timeout-range",
               std::to_string(c.timeout_seconds) + " is outside 1.." + std::to_string(kMaxTimeoutSeconds));
  }
  std::string xpath = json_path_key(path, "expected_exit_codes");
  if (c.expected_exit_codes.empty()) issues.add(xpath, "non-empty", "list at least one expected exit code");
  for (size_t i = 0; i < c.expected_exit_codes.size(); ++i) {
    int64_t code = c.expected_exit_codes[i];
    if (code < 0 || code > 255) {
      issues.add(json_path_index(xpath, i), "exit-code-range", std::to_string(code) + " is outside 0..255");
    } else if (i > 0 && code <= c.expected_exit_codes[i - 1]) {
      issues.add(json_path_index(xpath, i), code == c.expected_exit_codes[i - 1] ? "unique" : "sorted",
                 "exit codes are sorted ascending and unique");
    }
  }
  std::string apath = json_path_key(path, "output_assertions");
  std::set<std::string> seen;
  for (size_t i = 0; i < c.output_assertions.size(); ++i) {
    const OutputAssertion& a = c.output_assertions[i];
    std::string p = json_path_index(apath, i);
    check_enum(a.stream, {"stdout", "stderr", "combined"}, json_path_key(p, "stream"), issues);
    check_enum(a.match, {"required", "forbidden"}, json_path_key(p, "match"), issues);
    if (a.pattern.empty()) {
      issues.add(json_path_key(p, "pattern"), "non-empty", "an empty pattern matches everything");
    } else if (Result<Regex> r = Regex::compile(a.pattern); !r.ok()) {
      issues.add(json_path_key(p, "pattern"), "pattern-compile", r.status().message());
    }
    if (!seen.insert(a.stream + "\n" + a.match + "\n" + a.pattern).second) {
      issues.add(p, "unique", "this assertion repeats an earlier one");
    }
  }
  std::string rpath = json_path_key(path, "result_protocol");
  check_enum(c.producer, {"runner", "command"}, json_path_key(rpath, "producer"), issues);
  check_metric_definitions(c, rpath, issues);
}

void check_variant(const Variant& v, const std::string& path, const Workload& w, PlaceholderUse& use,
                   Issues& issues) {
  check_pattern(v.id, "[a-z0-9][a-z0-9._-]{0,63}", "variant-id", json_path_key(path, "id"), issues);
  check_non_empty_text(v.description, json_path_key(path, "description"), issues);
  check_enum(v.backend, kBackends, json_path_key(path, "backend"), issues);
  check_enum(v.device_requirement, {"none", "required"}, json_path_key(path, "device_requirement"), issues);
  check_enum(v.skip_policy, {"fail", "skip"}, json_path_key(path, "skip_policy"), issues);
  if (v.backend == "cpu" && v.device_requirement == "required") {
    issues.add(json_path_key(path, "device_requirement"), "cpu-device", "the cpu backend has no device to require");
  }
  if (kBackends.count(v.backend) && v.backend != "cpu" && v.device_requirement == "none") {
    issues.add(json_path_key(path, "device_requirement"), "device-required",
               "backend " + quoted(v.backend) + " needs a device: device_requirement must be \"required\"");
  }
  if (v.device_requirement == "required" && v.skip_policy == "skip") {
    issues.add(json_path_key(path, "skip_policy"), "skip-policy",
               "a variant that requires a device must fail, not skip, when the device is missing");
  }
  check_effective_config(v.effective_config, json_path_key(path, "effective_config"), issues);
  std::string cpath = json_path_key(path, "cases");
  if (v.cases.empty()) issues.add(cpath, "non-empty", "a variant needs at least one case");
  std::set<std::string> ids;
  for (size_t i = 0; i < v.cases.size(); ++i) {
    std::string p = json_path_index(cpath, i);
    if (!v.cases[i].id.empty() && !ids.insert(v.cases[i].id).second) {
      issues.add(json_path_key(p, "id"), "unique", "case id " + quoted(v.cases[i].id) + " repeats in this variant");
    }
    check_case(v.cases[i], p, w, use, issues);
  }
}

bool value_has_type(const JsonValue& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number() && v.is_integer;
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_bool();
  return false;
}

// Whether `value` satisfies the variable's constraints; the reason when it does not.
std::optional<std::string> constraint_violation(const Variable& var, const JsonValue& value) {
  if (var.allowed_values) {
    bool found = std::any_of(var.allowed_values->begin(), var.allowed_values->end(),
                             [&](const JsonValue& a) { return json_equal(a, value); });
    if (!found) return to_json_text(value) + " is not among the allowed values";
  }
  if (value.is_number()) {
    if (var.minimum && value.number < *var.minimum) return to_json_text(value) + " is below the minimum";
    if (var.maximum && value.number > *var.maximum) return to_json_text(value) + " is above the maximum";
  }
  if (value.is_string() && var.pattern) {
    // A pattern that does not compile is an issue of its own (check_variable).
    if (Result<Regex> r = Regex::compile(*var.pattern); r.ok()) {
      Result<bool> m = r->full_match(value.string);
      if (!m.ok()) return m.status().message();
      if (!*m) return quoted(value.string) + " does not match the pattern";
    }
  }
  return std::nullopt;
}

void check_variable(const Variable& var, const std::string& path, Issues& issues) {
  check_pattern(var.name, "[a-z][a-z0-9_]{1,63}", "variable-name", json_path_key(path, "name"), issues);
  if (is_builtin_placeholder(var.name)) {
    issues.add(json_path_key(path, "name"), "reserved-variable", quoted(var.name) + " is supplied by the runner");
  }
  check_enum(var.type, {"string", "integer", "number", "boolean"}, json_path_key(path, "type"), issues);
  std::string dpath = json_path_key(path, "default");
  if (var.required && !var.default_value.is_null()) {
    issues.add(dpath, "required-default", "a required variable has no default (use null)");
  } else if (!var.required && var.default_value.is_null()) {
    issues.add(dpath, "optional-default", "an optional variable needs a default value");
  } else if (!var.required && !value_has_type(var.default_value, var.type)) {
    issues.add(dpath, "default-type", to_json_text(var.default_value) + " is not of type " + quoted(var.type));
  }
  std::string cpath = json_path_key(path, "constraints");
  if (var.allowed_values) {
    std::string apath = json_path_key(cpath, "allowed_values");
    if (var.allowed_values->empty()) issues.add(apath, "non-empty", "use null rather than an empty list");
    for (size_t i = 0; i < var.allowed_values->size(); ++i) {
      const JsonValue& a = (*var.allowed_values)[i];
      if (!value_has_type(a, var.type)) {
        issues.add(json_path_index(apath, i), "constraint-type", to_json_text(a) + " is not of type " + quoted(var.type));
      }
      for (size_t j = 0; j < i; ++j) {
        if (json_equal(a, (*var.allowed_values)[j])) {
          issues.add(json_path_index(apath, i), "unique", to_json_text(a) + " is listed twice");
          break;
        }
      }
    }
  }
  bool numeric = var.type == "integer" || var.type == "number";
  if ((var.minimum || var.maximum) && !numeric) {
    issues.add(json_path_key(cpath, var.minimum ? "minimum" : "maximum"), "constraint-applicability",
               "minimum and maximum apply only to integer and number variables");
  }
  if (var.minimum && var.maximum && *var.minimum > *var.maximum) {
    issues.add(json_path_key(cpath, "minimum"), "constraint-range", "minimum exceeds maximum");
  }
  if (var.pattern) {
    if (var.type != "string") {
      issues.add(json_path_key(cpath, "pattern"), "constraint-applicability", "pattern applies only to strings");
    } else if (Result<Regex> r = Regex::compile(*var.pattern); !r.ok()) {
      issues.add(json_path_key(cpath, "pattern"), "pattern-compile", r.status().message());
    }
  }
  if (!var.required && value_has_type(var.default_value, var.type)) {
    if (auto why = constraint_violation(var, var.default_value)) issues.add(dpath, "default-constraint", *why);
  }
}

void check_determinism(const Workload& w, const std::vector<PlaceholderUse>& uses, Issues& issues) {
  const Determinism& d = w.determinism;
  const std::string p = "$.determinism";
  check_enum(d.seed_delivery, {"not_applicable", "fixed_fixture", "argv", "environment"},
             json_path_key(p, "seed_delivery"), issues);
  if (d.repetitions < 1 || d.repetitions > 1000) {
    issues.add(json_path_key(p, "repetitions"), "range", std::to_string(d.repetitions) + " is outside 1..1000");
  }
  if (d.case_order != "declared") {
    issues.add(json_path_key(p, "case_order"), "case-order", "cases run in \"declared\" order");
  }
  if (d.max_parallel_cases != 1) {
    issues.add(json_path_key(p, "max_parallel_cases"), "serial", "cases run serially: max_parallel_cases is 1");
  }
  if (d.network_access != "forbidden") {
    issues.add(json_path_key(p, "network_access"), "network-access", "network_access must be \"forbidden\"");
  }
  if (w.kind == "environment") {
    if (d.seed) issues.add(json_path_key(p, "seed"), "environment-seed", "environment workloads have no seed (null)");
    if (d.seed_delivery != "not_applicable") {
      issues.add(json_path_key(p, "seed_delivery"), "environment-seed",
                 "environment workloads use seed_delivery \"not_applicable\"");
    }
  } else if (kKinds.count(w.kind)) {
    if (!d.seed) {
      issues.add(json_path_key(p, "seed"), "seed-required", quoted(w.kind) + " workloads declare a seed");
    }
    if (d.seed_delivery == "not_applicable") {
      issues.add(json_path_key(p, "seed_delivery"), "seed-delivery",
                 "a seeded workload says how the seed reaches the cases (fixed_fixture, argv or environment)");
    }
  }
  if (d.seed && (*d.seed < 0 || *d.seed > kMaxSeed)) {
    issues.add(json_path_key(p, "seed"), "range", "seed is an integer in 0..2^53-1");
  }
  const std::string seed(kSeedPlaceholder);
  for (size_t i = 0; i < uses.size(); ++i) {
    std::string vpath = json_path_index("$.variants", i);
    const PlaceholderUse& u = uses[i];
    if (d.seed_delivery == "argv" && !u.in_argv.count(seed)) {
      issues.add(vpath, "seed-delivery-argv", "seed_delivery is argv but no argv element of this variant is ${seed}");
    }
    if (d.seed_delivery == "environment" && !u.in_environment.count(seed)) {
      issues.add(vpath, "seed-delivery-environment",
                 "seed_delivery is environment but no environment value of this variant is ${seed}");
    }
    if ((d.seed_delivery == "argv" && u.in_environment.count(seed)) ||
        (d.seed_delivery == "environment" && u.in_argv.count(seed)) ||
        ((d.seed_delivery == "fixed_fixture" || d.seed_delivery == "not_applicable") && u.uses(seed))) {
      issues.add(vpath, "seed-delivery-mismatch",
                 "${seed} is used in a way seed_delivery " + quoted(d.seed_delivery) + " does not declare");
    }
  }
}

void check_variable_use(const Workload& w, const std::vector<PlaceholderUse>& uses, Issues& issues) {
  for (size_t i = 0; i < w.variables.size(); ++i) {
    const Variable& var = w.variables[i];
    std::string p = json_path_index("$.variables", i);
    bool any = std::any_of(uses.begin(), uses.end(), [&](const PlaceholderUse& u) { return u.uses(var.name); });
    if (!any) {
      issues.add(p, "unused-variable", quoted(var.name) + " is declared but no variant uses ${" + var.name + "}");
      continue;
    }
    if (!var.required) continue;
    for (size_t v = 0; v < uses.size(); ++v) {
      if (!uses[v].uses(var.name)) {
        issues.add(json_path_index("$.variants", v), "required-variable-unused",
                   "required variable " + quoted(var.name) + " is not used by this variant");
      }
    }
  }
  if (w.kind == "serving" || w.kind == "training" || w.kind == "eval") {
    for (size_t v = 0; v < uses.size(); ++v) {
      if (!uses[v].uses(std::string(kModelPathPlaceholder))) {
        issues.add(json_path_index("$.variants", v), "model-required",
                   quoted(w.kind) + " workloads run against a model: every variant uses ${model_path}");
      }
    }
  }
}

// The declared definition of `metric` in case `result_id` of `variant`; nullptr when absent.
const MetricDefinition* declared_metric(const Variant& variant, const std::string& result_id, const std::string& metric,
                                        bool* case_found) {
  for (const WorkloadCase& c : variant.cases) {
    if (c.id != result_id) continue;
    *case_found = true;
    for (const MetricDefinition& m : c.declared_metrics) {
      if (m.name == metric) return &m;
    }
  }
  return nullptr;
}

void check_rule_direction(const MetricRule& r, const std::string& p, Issues& issues) {
  if (r.op == "equal") return;
  if (!r.lower_is_better) {
    issues.add(json_path_key(p, "operator"), "operator-direction",
               "a metric without a direction (lower_is_better null) compares with \"equal\"");
  } else if (*r.lower_is_better && r.op != "not_greater") {
    issues.add(json_path_key(p, "operator"), "operator-direction", "lower is better: use \"not_greater\" (or \"equal\")");
  } else if (!*r.lower_is_better && r.op != "not_less") {
    issues.add(json_path_key(p, "operator"), "operator-direction", "higher is better: use \"not_less\" (or \"equal\")");
  }
}

void check_metric_rules(const ComparisonPolicy& cp, const std::vector<const Variant*>& scope,
                        Issues& issues) {
  const std::string base = "$.comparison_policy.metric_rules";
  if (cp.metric_rules.empty()) issues.add(base, "non-empty", "a comparison policy needs at least one metric rule");
  std::vector<std::string> keys;
  for (size_t i = 0; i < cp.metric_rules.size(); ++i) {
    const MetricRule& r = cp.metric_rules[i];
    std::string p = json_path_index(base, i);
    keys.push_back(r.result_id + "\x01" + r.metric);
    check_enum(r.metric_class, {"correctness", "performance"}, json_path_key(p, "class"), issues);
    check_enum(r.op, {"equal", "not_greater", "not_less"}, json_path_key(p, "operator"), issues);
    for (auto [name, val] : {std::pair{"absolute_tolerance", r.absolute_tolerance},
                             std::pair{"relative_tolerance", r.relative_tolerance}}) {
      if (!std::isfinite(val) || val < 0) {
        issues.add(json_path_key(p, name), "tolerance", "tolerances are finite and non-negative");
      }
    }
    check_rule_direction(r, p, issues);
    if (cp.mode == "cross_backend_correctness" && (r.metric_class != "correctness" || r.op != "equal")) {
      issues.add(p, "cross-backend-equal", "cross-backend rules are correctness rules with operator \"equal\"");
    }
    // The rule must name a case and metric every compared variant declares, defined identically.
    bool found_anywhere = false;
    for (const Variant* v : scope) {
      bool case_found = false;
      const MetricDefinition* def = declared_metric(*v, r.result_id, r.metric, &case_found);
      if (!case_found) {
        issues.add(json_path_key(p, "result_id"), "unknown-result",
                   quoted(r.result_id) + " is not a case of variant " + quoted(v->id));
        continue;
      }
      found_anywhere = true;
      if (def == nullptr) {
        issues.add(json_path_key(p, "metric"), "undeclared-metric",
                   quoted(r.metric) + " is not declared by case " + quoted(r.result_id) + " of variant " + quoted(v->id));
        continue;
      }
      if (def->unit != r.unit || def->aggregation != r.aggregation || def->lower_is_better != r.lower_is_better) {
        issues.add(p, "metric-definition-mismatch",
                   "unit, aggregation and lower_is_better must repeat the declaration in variant " + quoted(v->id));
      }
    }
    if (scope.empty() && !found_anywhere) {
      issues.add(json_path_key(p, "result_id"), "unknown-result", quoted(r.result_id) + " is not a case of any variant");
    }
  }
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] == keys[i - 1]) {
      issues.add(json_path_index(base, i), "unique", "two rules for the same result_id and metric");
    } else if (keys[i] < keys[i - 1]) {
      issues.add(json_path_index(base, i), "sorted", "metric rules are sorted by result_id, then metric");
    }
  }
}

void check_policy(const Workload& w, Issues& issues) {
  const std::string base = "$.comparison_policy";
  if (!w.comparison_policy) {
    if (kKinds.count(w.kind) && w.kind != "environment") {
      issues.add(base, "comparison-policy-required", "only environment workloads may have a null comparison policy");
    }
    return;
  }
  const ComparisonPolicy& cp = *w.comparison_policy;
  check_enum(cp.mode, {"same_environment_performance", "declared_ab_variants", "cross_backend_correctness"},
             json_path_key(base, "mode"), issues);
  auto must_be_empty = [&](bool empty, const char* key) {
    if (!empty) {
      issues.add(json_path_key(base, key), "mode-field", std::string(key) + " must be empty in mode " + quoted(cp.mode));
    }
  };
  std::vector<const Variant*> scope;
  if (cp.mode == "same_environment_performance") {
    must_be_empty(cp.variant_pairs.empty(), "variant_pairs");
    must_be_empty(cp.backend_pairs.empty(), "backend_pairs");
    must_be_empty(cp.allowed_environment_differences.empty(), "allowed_environment_differences");
  } else if (cp.mode == "declared_ab_variants") {
    must_be_empty(cp.backend_pairs.empty(), "backend_pairs");
    must_be_empty(cp.allowed_environment_differences.empty(), "allowed_environment_differences");
    std::string ppath = json_path_key(base, "variant_pairs");
    if (cp.variant_pairs.empty()) issues.add(ppath, "non-empty", "declared_ab_variants needs at least one pair");
    std::vector<std::string> keys;
    for (size_t i = 0; i < cp.variant_pairs.size(); ++i) {
      const VariantPair& vp = cp.variant_pairs[i];
      std::string p = json_path_index(ppath, i);
      keys.push_back(vp.baseline + "\x01" + vp.candidate);
      const Variant* a = w.find_variant(vp.baseline);
      const Variant* b = w.find_variant(vp.candidate);
      if (a == nullptr) issues.add(json_path_key(p, "baseline"), "unknown-variant", quoted(vp.baseline) + " is not a variant");
      if (b == nullptr) issues.add(json_path_key(p, "candidate"), "unknown-variant", quoted(vp.candidate) + " is not a variant");
      if (vp.baseline == vp.candidate) issues.add(p, "pair-distinct", "a pair compares two different variants");
      std::string dpath = json_path_key(p, "allowed_effective_config_differences");
      check_sorted_unique(vp.allowed_effective_config_differences, dpath, issues);
      if (a == nullptr || b == nullptr) continue;
      if (a->backend != b->backend) {
        issues.add(p, "pair-backend", "A/B variants run on the same backend; use cross_backend_correctness otherwise");
      }
      std::vector<std::string> ca, cb;
      for (const WorkloadCase& c : a->cases) ca.push_back(c.id);
      for (const WorkloadCase& c : b->cases) cb.push_back(c.id);
      if (ca != cb) issues.add(p, "pair-cases", "A/B variants must declare the same cases in the same order");
      std::vector<std::string> diff = config_differences(a->effective_config, b->effective_config);
      const auto& allowed = vp.allowed_effective_config_differences;
      for (const std::string& d : diff) {
        if (std::find(allowed.begin(), allowed.end(), d) == allowed.end()) {
          issues.add(dpath, "undeclared-config-difference",
                     "effective_config leaf " + quoted(d) + " differs between the variants but is not declared");
        }
      }
      for (size_t j = 0; j < allowed.size(); ++j) {
        if (std::find(diff.begin(), diff.end(), allowed[j]) == diff.end()) {
          issues.add(json_path_index(dpath, j), "config-leaf-unchanged",
                     quoted(allowed[j]) + " is not a leaf on which the two variants differ");
        }
      }
      for (const Variant* v : {a, b}) {
        if (std::find(scope.begin(), scope.end(), v) == scope.end()) scope.push_back(v);
      }
    }
    for (size_t i = 1; i < keys.size(); ++i) {
      if (keys[i] == keys[i - 1]) issues.add(json_path_index(ppath, i), "unique", "pair listed twice");
      else if (keys[i] < keys[i - 1]) issues.add(json_path_index(ppath, i), "sorted", "pairs are sorted");
    }
  } else if (cp.mode == "cross_backend_correctness") {
    must_be_empty(cp.variant_pairs.empty(), "variant_pairs");
    std::string ppath = json_path_key(base, "backend_pairs");
    if (cp.backend_pairs.empty()) issues.add(ppath, "non-empty", "cross_backend_correctness needs a backend pair");
    for (size_t i = 0; i < cp.backend_pairs.size(); ++i) {
      const BackendPair& bp = cp.backend_pairs[i];
      std::string p = json_path_index(ppath, i);
      if (bp.baseline == bp.candidate) issues.add(p, "pair-distinct", "a pair compares two different backends");
      for (auto [key, backend] : {std::pair{"baseline", bp.baseline}, std::pair{"candidate", bp.candidate}}) {
        std::vector<const Variant*> matches;
        for (const Variant& v : w.variants) {
          if (v.backend == backend) matches.push_back(&v);
        }
        if (matches.size() != 1) {
          issues.add(json_path_key(p, key), "backend-variant",
                     "backend " + quoted(backend) + " must have exactly one variant, found " +
                         std::to_string(matches.size()));
          continue;
        }
        if (std::find(scope.begin(), scope.end(), matches[0]) == scope.end()) scope.push_back(matches[0]);
      }
    }
    std::string epath = json_path_key(base, "allowed_environment_differences");
    for (size_t i = 0; i < cp.allowed_environment_differences.size(); ++i) {
      check_enum(cp.allowed_environment_differences[i], {"compiler", "device", "driver", "host_id", "os", "runtime"},
                 json_path_index(epath, i), issues);
    }
    check_sorted_unique(cp.allowed_environment_differences, epath, issues);
  }
  if (cp.mode == "same_environment_performance") {
    // Every variant may be compared with a later run of itself; a rule must name a case and
    // metric that some variant declares, and every variant that has the case must declare it.
    for (const Variant& v : w.variants) {
      for (const MetricRule& r : cp.metric_rules) {
        bool found = false;
        declared_metric(v, r.result_id, r.metric, &found);
        if (found && std::find(scope.begin(), scope.end(), &v) == scope.end()) scope.push_back(&v);
      }
    }
  }
  check_metric_rules(cp, scope, issues);
}

}  // namespace

void check_workload_rules(const Workload& w, Issues& issues) {
  if (w.schema_version != 1) {
    issues.add("$.schema_version", "schema-version", "only schema_version 1 is understood");
  }
  check_pattern(w.workload_id, "[a-z0-9][a-z0-9._-]{2,127}", "workload-id", "$.workload_id", issues);
  check_enum(w.kind, kKinds, "$.kind", issues);
  check_non_empty_text(w.description, "$.description", issues);

  std::vector<std::string> names;
  for (size_t i = 0; i < w.variables.size(); ++i) {
    names.push_back(w.variables[i].name);
    check_variable(w.variables[i], json_path_index("$.variables", i), issues);
  }
  check_sorted_unique(names, "$.variables", issues);

  if (w.variants.empty()) issues.add("$.variants", "non-empty", "a workload needs at least one variant");
  std::vector<std::string> ids;
  std::vector<PlaceholderUse> uses(w.variants.size());
  for (size_t i = 0; i < w.variants.size(); ++i) {
    ids.push_back(w.variants[i].id);
    check_variant(w.variants[i], json_path_index("$.variants", i), w, uses[i], issues);
  }
  check_sorted_unique(ids, "$.variants", issues);

  check_determinism(w, uses, issues);
  check_variable_use(w, uses, issues);
  check_policy(w, issues);
  check_inputs(w.inputs, issues);
}

}  // namespace kiln::qualify
