#include "qualify/metric_definitions.h"

namespace kiln::qualify {

const std::vector<MetricDefinition>& runner_metric_definitions() {
  // case_pass is the AND over repetitions; exit_code must agree across repetitions;
  // assertion failures add up, and fewer is better.
  static const std::vector<MetricDefinition> kDefs = {
      {"case_pass", "bool", "all", std::nullopt},
      {"exit_code", "code", "exact", std::nullopt},
      {"output_assertion_failures", "count", "sum", true},
  };
  return kDefs;
}

const MetricDefinition* find_runner_metric(std::string_view name) {
  for (const MetricDefinition& d : runner_metric_definitions()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

bool is_command_aggregation(std::string_view a) { return a == "mean" || a == "min" || a == "max" || a == "sum"; }

bool same_definition(const MetricDefinition& a, const MetricDefinition& b) {
  return a.name == b.name && a.unit == b.unit && a.aggregation == b.aggregation && a.lower_is_better == b.lower_is_better;
}

}  // namespace kiln::qualify
