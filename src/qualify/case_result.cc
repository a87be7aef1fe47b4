#include "qualify/case_result.h"

#include <algorithm>

#include "qualify/json_fields.h"
#include "qualify/metric_definitions.h"

namespace kiln::qualify {

CaseResult check_case_result(std::string_view text, const WorkloadCase& c, const JsonValue& effective_config,
                             Issues& issues) {
  CaseResult r;
  Result<JsonValue> doc = parse_strict_json(text);
  if (!doc.ok()) {
    issues.add("$", "json", doc.status().message());
    return r;
  }
  const JsonValue& d = *doc;
  if (!check_object(d, "$",
                    {"schema_version", "case_id", "status", "duration_seconds", "effective_config", "metrics",
                     "tolerances", "details"},
                    issues)) {
    return r;
  }
  if (read_integer(d, "$", "schema_version", issues).value_or(1) != 1) {
    issues.add("$.schema_version", "schema-version", "only case-result schema_version 1 is understood");
  }
  std::optional<std::string> id = read_string(d, "$", "case_id", issues);
  if (id && *id != c.id) issues.add("$.case_id", "case-id", "\"" + *id + "\" is not the running case \"" + c.id + "\"");
  r.status = read_string(d, "$", "status", issues).value_or("");
  if (r.status != "passed" && r.status != "failed" && r.status != "skipped") {
    issues.add("$.status", "enum", "\"" + r.status + "\" is not one of: passed, failed, skipped");
  }
  r.reported_duration_seconds = read_number(d, "$", "duration_seconds", issues).value_or(0);
  if (r.reported_duration_seconds < 0) issues.add("$.duration_seconds", "range", "a duration is not negative");
  if (const JsonValue* ec = d.find("effective_config"); ec != nullptr && !json_equal(*ec, effective_config)) {
    issues.add("$.effective_config", "effective-config", "differs from the variant's effective_config");
  }
  std::vector<const MetricDefinition*> expected;
  for (const MetricDefinition& m : c.declared_metrics) {
    if (find_runner_metric(m.name) == nullptr) expected.push_back(&m);
  }
  std::vector<std::string> names;
  if (const JsonValue* metrics = read_array(d, "$", "metrics", issues)) {
    for (size_t i = 0; i < metrics->array.size(); ++i) {
      std::string p = json_path_index("$.metrics", i);
      const JsonValue& m = metrics->array[i];
      if (!check_object(m, p, {"name", "value", "unit"}, issues)) continue;
      CaseMetric cm;
      cm.name = read_string(m, p, "name", issues).value_or("");
      cm.value = read_number(m, p, "value", issues).value_or(0);
      cm.unit = read_string(m, p, "unit", issues).value_or("");
      names.push_back(cm.name);
      const MetricDefinition* def = nullptr;
      for (const MetricDefinition* e : expected) {
        if (e->name == cm.name) def = e;
      }
      if (def == nullptr) {
        issues.add(json_path_key(p, "name"), "undeclared-metric", "\"" + cm.name + "\" is not a declared command metric of this case");
      } else if (def->unit != cm.unit) {
        issues.add(json_path_key(p, "unit"), "metric-unit", "declared unit is \"" + def->unit + "\"");
      }
      r.metrics.push_back(cm);
    }
    check_sorted_unique(names, "$.metrics", issues);
    for (const MetricDefinition* e : expected) {
      if (std::find(names.begin(), names.end(), e->name) == names.end()) {
        issues.add("$.metrics", "missing-metric", "declared metric \"" + e->name + "\" is missing");
      }
    }
  }
  if (const JsonValue* tol = read_array(d, "$", "tolerances", issues)) {
    // Advisory only: the workload's comparison policy is the authority. Checked for shape.
    for (size_t i = 0; i < tol->array.size(); ++i) {
      std::string p = json_path_index("$.tolerances", i);
      if (check_object(tol->array[i], p, {"metric", "absolute", "relative"}, issues)) {
        read_string(tol->array[i], p, "metric", issues);
        read_number(tol->array[i], p, "absolute", issues);
        read_number(tol->array[i], p, "relative", issues);
      }
    }
  }
  if (const JsonValue* det = d.find("details")) {
    if (!det->is_object()) issues.add("$.details", "type", "details is an object");
    r.details = *det;
  }
  return r;
}

}  // namespace kiln::qualify
