// The workload contract (qualification/workloads/*.json, schema_version 1): what to run, on
// which backend, with which variables, how results are produced and how receipts compare.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "qualify/issues.h"
#include "qualify/strict_json.h"

namespace kiln::qualify {

struct Variable {
  std::string name;
  std::string type;  // string | integer | number | boolean
  bool required = false;
  JsonValue default_value;  // null when required
  std::optional<std::vector<JsonValue>> allowed_values;
  std::optional<double> minimum;
  std::optional<double> maximum;
  std::optional<std::string> pattern;
};

// How one metric is defined: the comparison and the aggregation across repetitions both depend on it.
struct MetricDefinition {
  std::string name;
  std::string unit;
  std::string aggregation;               // all | exact | sum | mean | min | max
  std::optional<bool> lower_is_better;   // null: no direction (compared for equality)
};

struct OutputAssertion {
  std::string stream;   // stdout | stderr | combined
  std::string match;    // required | forbidden
  std::string pattern;  // PCRE2, searched anywhere in the stream
};

struct WorkloadCase {
  std::string id;
  std::string description;
  bool required = true;
  std::vector<std::string> command;  // argv; argv[0] is looked up on the filtered PATH
  std::string working_directory;     // relative to the repository root
  std::vector<std::pair<std::string, std::string>> environment;
  int64_t timeout_seconds = 0;
  std::vector<int64_t> expected_exit_codes;
  std::vector<OutputAssertion> output_assertions;
  std::string producer;  // runner | command
  std::vector<MetricDefinition> declared_metrics;
};

struct Variant {
  std::string id;
  std::string description;
  std::string backend;             // cpu | cuda | rocm | vulkan | metal
  std::string device_requirement;  // none | required
  std::string skip_policy;         // fail | skip
  JsonValue effective_config;      // nested object of scalars
  std::vector<WorkloadCase> cases;
};

struct MetricRule {
  std::string result_id;  // a case id
  std::string metric;
  std::string metric_class;  // correctness | performance
  std::string unit;
  std::string aggregation;
  std::optional<bool> lower_is_better;
  std::string op;  // equal | not_greater | not_less
  double absolute_tolerance = 0;
  double relative_tolerance = 0;
  bool required = true;
};

struct VariantPair {
  std::string baseline;
  std::string candidate;
  std::vector<std::string> allowed_effective_config_differences;  // dotted leaf paths
};

struct BackendPair {
  std::string baseline;
  std::string candidate;
};

struct ComparisonPolicy {
  std::string mode;  // same_environment_performance | declared_ab_variants | cross_backend_correctness
  std::vector<VariantPair> variant_pairs;
  std::vector<BackendPair> backend_pairs;
  std::vector<std::string> allowed_environment_differences;
  std::vector<MetricRule> metric_rules;
};

struct Determinism {
  std::optional<int64_t> seed;
  std::string seed_delivery;  // not_applicable | fixed_fixture | argv | environment
  int64_t repetitions = 1;
  std::string case_order;
  int64_t max_parallel_cases = 1;
  std::string network_access;
};

struct Workload {
  int64_t schema_version = 1;
  std::string workload_id;
  std::string kind;
  std::string description;
  Determinism determinism;
  std::vector<Variable> variables;
  std::vector<Variant> variants;
  std::optional<ComparisonPolicy> comparison_policy;
  // What the cases run, as git glob pathspecs relative to the repository root (`*` within a
  // folder, `**` across folders). A receipt stays current while no file matching them (nor the
  // workload itself) changes. Empty when the workload declares none: then any change to the
  // source tree makes its receipts stale.
  std::vector<std::string> inputs;
  std::string digest;  // "sha256:" + hex of the raw bytes

  const Variant* find_variant(const std::string& id) const;
  const Variable* find_variable(const std::string& name) const;
};

// Structural and semantic checks of a workload's text; `workload` is meaningful only when
// `issues` is empty.
struct WorkloadCheck {
  Workload workload;
  Issues issues;
};
WorkloadCheck check_workload_text(std::string_view text);

// Reads, parses and validates; the error lists every problem with its JSON path.
Result<Workload> load_workload(const std::string& path);

// Internal steps of check_workload_text, in their own files.
void parse_workload(const JsonValue& doc, Workload& out, Issues& issues);  // workload_parse.cc
void check_workload_rules(const Workload& w, Issues& issues);            // workload_rules.cc

}  // namespace kiln::qualify
