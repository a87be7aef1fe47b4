// Shape of a workload document: exact key sets and JSON types. Value rules live in
// workload_rules.cc. Every array element is kept (even a malformed one) so that indices in the
// model match indices in the document and later rules can name exact paths.
#include <fstream>
#include <sstream>

#include "qualify/json_fields.h"
#include "core/sha256.h"
#include "qualify/workload.h"

namespace kiln::qualify {
namespace {

std::optional<bool> read_nullable_bool(const JsonValue& obj, const std::string& path, std::string_view key,
                                       Issues& issues) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  return read_bool(obj, path, key, issues);
}

// Elements of obj[key] as (path, element) pairs; empty when missing or not an array.
std::vector<std::pair<std::string, const JsonValue*>> elements(const JsonValue& obj, const std::string& path,
                                                               std::string_view key, Issues& issues) {
  std::vector<std::pair<std::string, const JsonValue*>> out;
  const JsonValue* arr = read_array(obj, path, key, issues);
  if (arr == nullptr) return out;
  std::string base = json_path_key(path, key);
  for (size_t i = 0; i < arr->array.size(); ++i) out.emplace_back(json_path_index(base, i), &arr->array[i]);
  return out;
}

MetricDefinition parse_metric_definition(const JsonValue& v, const std::string& path, Issues& issues) {
  MetricDefinition m;
  if (!check_object(v, path, {"name", "unit", "aggregation", "lower_is_better"}, issues)) return m;
  m.name = read_string(v, path, "name", issues).value_or("");
  m.unit = read_string(v, path, "unit", issues).value_or("");
  m.aggregation = read_string(v, path, "aggregation", issues).value_or("");
  m.lower_is_better = read_nullable_bool(v, path, "lower_is_better", issues);
  return m;
}

Variable parse_variable(const JsonValue& v, const std::string& path, Issues& issues) {
  Variable var;
  if (!check_object(v, path, {"name", "type", "required", "default", "constraints"}, issues)) return var;
  var.name = read_string(v, path, "name", issues).value_or("");
  var.type = read_string(v, path, "type", issues).value_or("");
  var.required = read_bool(v, path, "required", issues).value_or(false);
  if (const JsonValue* d = v.find("default")) var.default_value = *d;
  const JsonValue* c = v.find("constraints");
  std::string cpath = json_path_key(path, "constraints");
  if (c == nullptr || !check_object(*c, cpath, {"allowed_values", "minimum", "maximum", "pattern"}, issues)) {
    return var;
  }
  if (const JsonValue* a = c->find("allowed_values"); a != nullptr && !a->is_null()) {
    if (a->is_array()) {
      var.allowed_values = a->array;
    } else {
      issues.add(json_path_key(cpath, "allowed_values"), "type", "expected an array or null");
    }
  }
  if (const JsonValue* m = c->find("minimum"); m != nullptr && !m->is_null()) var.minimum = read_number(*c, cpath, "minimum", issues);
  if (const JsonValue* m = c->find("maximum"); m != nullptr && !m->is_null()) var.maximum = read_number(*c, cpath, "maximum", issues);
  var.pattern = read_nullable_string(*c, cpath, "pattern", issues);
  return var;
}

WorkloadCase parse_case(const JsonValue& v, const std::string& path, Issues& issues) {
  WorkloadCase c;
  if (!check_object(v, path,
                    {"id", "description", "required", "command", "working_directory", "environment",
                     "timeout_seconds", "expected_exit_codes", "output_assertions", "result_protocol"},
                    issues)) {
    return c;
  }
  c.id = read_string(v, path, "id", issues).value_or("");
  c.description = read_string(v, path, "description", issues).value_or("");
  c.required = read_bool(v, path, "required", issues).value_or(true);
  c.command = read_string_array(v, path, "command", issues);
  c.working_directory = read_string(v, path, "working_directory", issues).value_or("");
  if (const JsonValue* env = v.find("environment")) {
    std::string epath = json_path_key(path, "environment");
    if (!env->is_object()) {
      issues.add(epath, "type", "expected an object of NAME: value strings");
    } else {
      for (const auto& [k, val] : env->object) {
        if (!val.is_string()) {
          issues.add(json_path_key(epath, k), "type", "environment values are strings");
          continue;
        }
        c.environment.emplace_back(k, val.string);
      }
    }
  }
  c.timeout_seconds = read_integer(v, path, "timeout_seconds", issues).value_or(0);
  for (const auto& [p, e] : elements(v, path, "expected_exit_codes", issues)) {
    if (!e->is_number() || !e->is_integer) {
      issues.add(p, "type", "expected an integer exit code");
      c.expected_exit_codes.push_back(-1);
      continue;
    }
    c.expected_exit_codes.push_back(e->integer);
  }
  for (const auto& [p, e] : elements(v, path, "output_assertions", issues)) {
    OutputAssertion a;
    if (check_object(*e, p, {"stream", "match", "pattern"}, issues)) {
      a.stream = read_string(*e, p, "stream", issues).value_or("");
      a.match = read_string(*e, p, "match", issues).value_or("");
      a.pattern = read_string(*e, p, "pattern", issues).value_or("");
    }
    c.output_assertions.push_back(std::move(a));
  }
  if (const JsonValue* rp = v.find("result_protocol")) {
    std::string rpath = json_path_key(path, "result_protocol");
    if (check_object(*rp, rpath, {"producer", "declared_metrics"}, issues)) {
      c.producer = read_string(*rp, rpath, "producer", issues).value_or("");
      for (const auto& [p, e] : elements(*rp, rpath, "declared_metrics", issues)) {
        c.declared_metrics.push_back(parse_metric_definition(*e, p, issues));
      }
    }
  }
  return c;
}

Variant parse_variant(const JsonValue& v, const std::string& path, Issues& issues) {
  Variant var;
  if (!check_object(v, path,
                    {"id", "description", "backend", "device_requirement", "skip_policy", "effective_config", "cases"},
                    issues)) {
    return var;
  }
  var.id = read_string(v, path, "id", issues).value_or("");
  var.description = read_string(v, path, "description", issues).value_or("");
  var.backend = read_string(v, path, "backend", issues).value_or("");
  var.device_requirement = read_string(v, path, "device_requirement", issues).value_or("");
  var.skip_policy = read_string(v, path, "skip_policy", issues).value_or("");
  if (const JsonValue* ec = v.find("effective_config")) var.effective_config = *ec;
  for (const auto& [p, e] : elements(v, path, "cases", issues)) var.cases.push_back(parse_case(*e, p, issues));
  return var;
}

MetricRule parse_metric_rule(const JsonValue& v, const std::string& path, Issues& issues) {
  MetricRule r;
  if (!check_object(v, path,
                    {"result_id", "metric", "class", "unit", "aggregation", "lower_is_better", "operator",
                     "absolute_tolerance", "relative_tolerance", "required"},
                    issues)) {
    return r;
  }
  r.result_id = read_string(v, path, "result_id", issues).value_or("");
  r.metric = read_string(v, path, "metric", issues).value_or("");
  r.metric_class = read_string(v, path, "class", issues).value_or("");
  r.unit = read_string(v, path, "unit", issues).value_or("");
  r.aggregation = read_string(v, path, "aggregation", issues).value_or("");
  r.lower_is_better = read_nullable_bool(v, path, "lower_is_better", issues);
  r.op = read_string(v, path, "operator", issues).value_or("");
  r.absolute_tolerance = read_number(v, path, "absolute_tolerance", issues).value_or(0);
  r.relative_tolerance = read_number(v, path, "relative_tolerance", issues).value_or(0);
  r.required = read_bool(v, path, "required", issues).value_or(true);
  return r;
}

ComparisonPolicy parse_policy(const JsonValue& v, const std::string& path, Issues& issues) {
  ComparisonPolicy p;
  if (!check_object(v, path, {"mode", "variant_pairs", "backend_pairs", "allowed_environment_differences", "metric_rules"},
                    issues)) {
    return p;
  }
  p.mode = read_string(v, path, "mode", issues).value_or("");
  for (const auto& [ep, e] : elements(v, path, "variant_pairs", issues)) {
    VariantPair vp;
    if (check_object(*e, ep, {"baseline", "candidate", "allowed_effective_config_differences"}, issues)) {
      vp.baseline = read_string(*e, ep, "baseline", issues).value_or("");
      vp.candidate = read_string(*e, ep, "candidate", issues).value_or("");
      vp.allowed_effective_config_differences =
          read_string_array(*e, ep, "allowed_effective_config_differences", issues);
    }
    p.variant_pairs.push_back(std::move(vp));
  }
  for (const auto& [ep, e] : elements(v, path, "backend_pairs", issues)) {
    BackendPair bp;
    if (check_object(*e, ep, {"baseline", "candidate"}, issues)) {
      bp.baseline = read_string(*e, ep, "baseline", issues).value_or("");
      bp.candidate = read_string(*e, ep, "candidate", issues).value_or("");
    }
    p.backend_pairs.push_back(std::move(bp));
  }
  p.allowed_environment_differences = read_string_array(v, path, "allowed_environment_differences", issues);
  for (const auto& [ep, e] : elements(v, path, "metric_rules", issues)) {
    p.metric_rules.push_back(parse_metric_rule(*e, ep, issues));
  }
  return p;
}

}  // namespace

void parse_workload(const JsonValue& doc, Workload& w, Issues& issues) {
  const std::string root = "$";
  // `inputs` is optional: workloads written before it existed keep their bytes (an id names
  // immutable bytes).
  const bool has_inputs = doc.is_object() && doc.find("inputs") != nullptr;
  const bool object = has_inputs ? check_object(doc, root,
                                                {"schema_version", "workload_id", "kind", "description", "inputs",
                                                 "determinism", "variables", "variants", "comparison_policy"},
                                                issues)
                                 : check_object(doc, root,
                                                {"schema_version", "workload_id", "kind", "description",
                                                 "determinism", "variables", "variants", "comparison_policy"},
                                                issues);
  if (!object) return;
  if (has_inputs) {
    w.inputs = read_string_array(doc, root, "inputs", issues);
    if (w.inputs.empty()) issues.add("$.inputs", "non-empty", "list what the cases run, or leave the key out");
  }
  w.schema_version = read_integer(doc, root, "schema_version", issues).value_or(0);
  w.workload_id = read_string(doc, root, "workload_id", issues).value_or("");
  w.kind = read_string(doc, root, "kind", issues).value_or("");
  w.description = read_string(doc, root, "description", issues).value_or("");
  if (const JsonValue* d = doc.find("determinism")) {
    std::string dp = "$.determinism";
    if (check_object(*d, dp,
                     {"seed", "seed_delivery", "repetitions", "case_order", "max_parallel_cases", "network_access"},
                     issues)) {
      if (const JsonValue* s = d->find("seed"); s != nullptr && !s->is_null()) {
        w.determinism.seed = read_integer(*d, dp, "seed", issues);
        if (!w.determinism.seed) w.determinism.seed = -1;  // present but malformed: keep "has a seed"
      }
      w.determinism.seed_delivery = read_string(*d, dp, "seed_delivery", issues).value_or("");
      w.determinism.repetitions = read_integer(*d, dp, "repetitions", issues).value_or(1);
      w.determinism.case_order = read_string(*d, dp, "case_order", issues).value_or("declared");
      w.determinism.max_parallel_cases = read_integer(*d, dp, "max_parallel_cases", issues).value_or(1);
      w.determinism.network_access = read_string(*d, dp, "network_access", issues).value_or("forbidden");
    }
  }
  for (const auto& [p, e] : elements(doc, root, "variables", issues)) w.variables.push_back(parse_variable(*e, p, issues));
  for (const auto& [p, e] : elements(doc, root, "variants", issues)) w.variants.push_back(parse_variant(*e, p, issues));
  if (const JsonValue* cp = doc.find("comparison_policy"); cp != nullptr && !cp->is_null()) {
    w.comparison_policy = parse_policy(*cp, "$.comparison_policy", issues);
  }
}

const Variant* Workload::find_variant(const std::string& id) const {
  for (const Variant& v : variants) {
    if (v.id == id) return &v;
  }
  return nullptr;
}

const Variable* Workload::find_variable(const std::string& name) const {
  for (const Variable& v : variables) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

WorkloadCheck check_workload_text(std::string_view text) {
  WorkloadCheck out;
  out.workload.digest = "sha256:" + sha256_hex(text);
  Result<JsonValue> doc = parse_strict_json(text);
  if (!doc.ok()) {
    // The parser's message starts with the path; split it so the issue carries it.
    const std::string& m = doc.status().message();
    size_t colon = m.find(": ");
    out.issues.add(m.substr(0, colon), "json", colon == std::string::npos ? m : m.substr(colon + 2));
    return out;
  }
  parse_workload(*doc, out.workload, out.issues);
  check_workload_rules(out.workload, out.issues);
  return out;
}

Result<Workload> load_workload(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open workload " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  WorkloadCheck check = check_workload_text(ss.str());
  KILN_RETURN_IF_ERROR(check.issues.to_status(path));
  return std::move(check.workload);
}

}  // namespace kiln::qualify
