// The metrics the runner itself measures for every case, with their fixed definitions; a
// workload that declares one must declare it exactly this way.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "qualify/workload.h"

namespace kiln::qualify {

inline constexpr std::string_view kCasePassMetric = "case_pass";
inline constexpr std::string_view kExitCodeMetric = "exit_code";
inline constexpr std::string_view kAssertionFailuresMetric = "output_assertion_failures";

const std::vector<MetricDefinition>& runner_metric_definitions();
// nullptr when `name` is not a runner metric.
const MetricDefinition* find_runner_metric(std::string_view name);

// Aggregations a command-produced metric may declare across repetitions.
bool is_command_aggregation(std::string_view aggregation);

bool same_definition(const MetricDefinition& a, const MetricDefinition& b);

}  // namespace kiln::qualify
