#include "qualify/compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "qualify/effective_config.h"

namespace kiln::qualify {

bool Comparison::holds() const {
  return compatible() && !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const ComparisonRow& r) { return r.holds(); });
}

double rule_tolerance(double baseline, double absolute, double relative) {
  return std::max(absolute, std::fabs(baseline) * relative);
}

double rule_violation(const std::string& op, double b, double c) {
  if (op == "not_greater") return std::max(0.0, c - b);
  if (op == "not_less") return std::max(0.0, b - c);
  return std::fabs(c - b);
}

namespace {

// The model's identity: everything but its label.
JsonValue model_identity(const JsonValue& model) {
  if (!model.is_object()) return model;
  JsonValue out = JsonValue::make_object();
  for (const auto& [k, v] : model.object) {
    if (k != "id") out.set(k, v);
  }
  return out;
}

JsonValue without_driver(const JsonValue& device) {
  JsonValue out = JsonValue::make_object();
  for (const auto& [k, v] : device.object) {
    if (k != "driver") out.set(k, v);
  }
  return out;
}

std::optional<double> numeric(const JsonValue& v) {
  if (v.is_bool()) return v.boolean ? 1.0 : 0.0;
  if (v.is_number()) return v.number;
  return std::nullopt;
}

// Environment facets that differ between the receipts, named as the policy names them.
std::vector<std::string> environment_differences(const Receipt& a, const Receipt& b) {
  std::vector<std::string> out;
  if (a.host_id != b.host_id || !json_equal(a.host, b.host)) out.push_back("host_id");
  if (!json_equal(a.os, b.os)) out.push_back("os");
  if (!json_equal(without_driver(a.device), without_driver(b.device))) out.push_back("device");
  const JsonValue* da = a.device.find("driver");
  const JsonValue* db = b.device.find("driver");
  if ((da == nullptr) != (db == nullptr) || (da && !json_equal(*da, *db))) out.push_back("driver");
  if (!json_equal(a.runtime, b.runtime)) out.push_back("runtime");
  if (!json_equal(a.compiler, b.compiler)) out.push_back("compiler");
  return out;
}

void check_policy_pairing(const Receipt& b, const Receipt& c, const Workload& w, std::vector<std::string>& why) {
  const ComparisonPolicy& p = *w.comparison_policy;
  std::vector<std::string> env_diff = environment_differences(b, c);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (p.mode == "same_environment_performance") {
    if (b.profile != c.profile) why.push_back("variants differ (" + b.profile + " vs " + c.profile + ") in a same-environment comparison");
    if (!env_diff.empty()) why.push_back("environments differ in: " + join(env_diff));
  } else if (p.mode == "declared_ab_variants") {
    const VariantPair* pair = nullptr;
    for (const VariantPair& vp : p.variant_pairs) {
      if (vp.baseline == b.profile && vp.candidate == c.profile) pair = &vp;
    }
    if (pair == nullptr) {
      why.push_back("(" + b.profile + ", " + c.profile + ") is not a declared variant pair");
    } else {
      for (const std::string& d : config_differences(b.effective_config, c.effective_config)) {
        const auto& allowed = pair->allowed_effective_config_differences;
        if (std::find(allowed.begin(), allowed.end(), d) == allowed.end()) {
          why.push_back("effective_config leaf " + d + " differs but the pair does not allow it");
        }
      }
    }
    if (!env_diff.empty()) why.push_back("environments differ in: " + join(env_diff));
  } else if (p.mode == "cross_backend_correctness") {
    bool paired = std::any_of(p.backend_pairs.begin(), p.backend_pairs.end(), [&](const BackendPair& bp) {
      return bp.baseline == b.backend && bp.candidate == c.backend;
    });
    if (!paired) why.push_back("(" + b.backend + ", " + c.backend + ") is not a declared backend pair");
    for (const std::string& d : env_diff) {
      const auto& allowed = p.allowed_environment_differences;
      if (std::find(allowed.begin(), allowed.end(), d) == allowed.end()) {
        why.push_back("environment differs in " + d + ", which the policy does not allow");
      }
    }
  }
}

}  // namespace

Comparison compare_receipts(const Receipt& b, const Receipt& c, const Workload& w) {
  Comparison out;
  auto& why = out.incompatibilities;
  if (b.workload_sha256 != w.digest || c.workload_sha256 != w.digest) {
    why.push_back("the receipts do not both name this manifest's bytes (" + w.digest + ")");
  }
  if (b.workload_id != w.workload_id || c.workload_id != w.workload_id) why.push_back("workload ids differ");
  if (b.kind != w.kind || c.kind != w.kind) why.push_back("workload kinds differ");
  if (b.tree_hash != c.tree_hash) why.push_back("source trees differ (" + b.tree_hash + " vs " + c.tree_hash + ")");
  if (!json_equal(model_identity(b.model), model_identity(c.model))) {
    why.push_back("model identities differ (weights, config, tokenizer or chat template)");
  }
  if (!json_equal(b.seed, c.seed)) why.push_back("seeds differ");
  // Workload parameters (build directory, job count, ...) say how each machine ran the workload.
  // Performance comparisons need them equal; a cross-backend correctness comparison spans
  // machines by design, and its rules demand equal results whatever the parameters were.
  const bool cross_backend = w.comparison_policy && w.comparison_policy->mode == "cross_backend_correctness";
  if (!cross_backend && !json_equal(b.parameters, c.parameters)) why.push_back("workload parameters differ");
  if (!w.comparison_policy) {
    why.push_back("workload " + w.workload_id + " has no comparison policy");
    return out;
  }
  for (const Receipt* r : {&b, &c}) {
    const Variant* v = w.find_variant(r->profile);
    if (v == nullptr) {
      why.push_back("receipt " + r->receipt_id + " ran variant " + r->profile + ", which the manifest lacks");
    } else if (v->backend != r->backend || !json_equal(v->effective_config, r->effective_config)) {
      why.push_back("receipt " + r->receipt_id + " does not record variant " + v->id + "'s backend and effective_config");
    }
  }
  check_policy_pairing(b, c, w, why);
  // Metric definitions must be the manifest's; a same-named metric defined differently is not comparable.
  for (const MetricRule& rule : w.comparison_policy->metric_rules) {
    for (const Receipt* r : {&b, &c}) {
      const ReceiptResult* res = r->find_result(rule.result_id);
      const ReceiptMetric* m = res ? res->find_metric(rule.metric) : nullptr;
      if (m && (m->unit != rule.unit || m->aggregation != rule.aggregation || m->lower_is_better != rule.lower_is_better)) {
        why.push_back("receipt " + r->receipt_id + " defines " + rule.result_id + "/" + rule.metric + " differently from the manifest");
      }
    }
  }
  if (!out.compatible()) return out;

  for (const MetricRule& rule : w.comparison_policy->metric_rules) {
    ComparisonRow row;
    row.result_id = rule.result_id;
    row.metric = rule.metric;
    row.metric_class = rule.metric_class;
    row.op = rule.op;
    row.required = rule.required;
    const ReceiptResult* rb = b.find_result(rule.result_id);
    const ReceiptResult* rc = c.find_result(rule.result_id);
    const ReceiptMetric* mb = rb ? rb->find_metric(rule.metric) : nullptr;
    const ReceiptMetric* mc = rc ? rc->find_metric(rule.metric) : nullptr;
    if (mb) row.baseline = numeric(mb->value);
    if (mc) row.candidate = numeric(mc->value);
    if ((rb && rb->status != "passed") || (rc && rc->status != "passed")) {
      row.status = rule.required ? "failed_row" : "not_compared";
      row.reason = "a result row did not pass; failed rows are never compared";
    } else if (!row.baseline || !row.candidate) {
      row.status = rule.required ? "missing" : "not_compared";
      row.reason = std::string("metric absent from the ") + (!row.baseline ? "baseline" : "candidate");
    } else {
      row.tolerance = rule_tolerance(*row.baseline, rule.absolute_tolerance, rule.relative_tolerance);
      row.violation = rule_violation(rule.op, *row.baseline, *row.candidate);
      row.status = row.violation <= row.tolerance ? "passed" : "failed";
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

JsonValue comparison_to_json(const Comparison& c) {
  JsonValue out = JsonValue::make_object();
  out.set("compatible", JsonValue::make_bool(c.compatible()));
  JsonValue why = JsonValue::make_array();
  for (const std::string& s : c.incompatibilities) why.array.push_back(JsonValue::make_string(s));
  out.set("incompatibilities", std::move(why));
  JsonValue rows = JsonValue::make_array();
  auto num = [](const std::optional<double>& v) { return v ? JsonValue::make_number(*v) : JsonValue::make_null(); };
  for (const ComparisonRow& r : c.rows) {
    JsonValue row = JsonValue::make_object();
    row.set("result_id", JsonValue::make_string(r.result_id)).set("metric", JsonValue::make_string(r.metric));
    row.set("class", JsonValue::make_string(r.metric_class)).set("operator", JsonValue::make_string(r.op));
    row.set("required", JsonValue::make_bool(r.required));
    row.set("baseline", num(r.baseline)).set("candidate", num(r.candidate));
    row.set("tolerance", JsonValue::make_number(r.tolerance)).set("violation", JsonValue::make_number(r.violation));
    row.set("status", JsonValue::make_string(r.status)).set("reason", JsonValue::make_string(r.reason));
    rows.array.push_back(std::move(row));
  }
  out.set("rows", std::move(rows));
  out.set("holds", JsonValue::make_bool(c.holds()));
  return out;
}

std::string comparison_to_text(const Comparison& c) {
  std::ostringstream os;
  if (!c.compatible()) {
    os << "incompatible receipts:\n";
    for (const std::string& s : c.incompatibilities) os << "  - " << s << "\n";
    return os.str();
  }
  for (const ComparisonRow& r : c.rows) {
    os << r.status << "  " << r.result_id << "/" << r.metric << " " << r.op;
    if (r.baseline && r.candidate) {
      os << "  baseline=" << *r.baseline << " candidate=" << *r.candidate << " violation=" << r.violation
         << " tolerance=" << r.tolerance;
    }
    if (!r.reason.empty()) os << "  (" << r.reason << ")";
    os << "\n";
  }
  os << (c.holds() ? "comparison holds\n" : "comparison does not hold\n");
  return os.str();
}

}  // namespace kiln::qualify
