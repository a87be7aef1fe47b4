// The (name, unit) pairs a case result reports, and those a workload case declares for its
// command (every declared metric but the runner's own case_pass), to compare in order.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::testing {

using MetricUnits = std::vector<std::pair<std::string, std::string>>;

inline MetricUnits reported_metrics(const nlohmann::json& case_result) {
  MetricUnits out;
  for (const auto& m : case_result["metrics"]) out.emplace_back(m["name"], m["unit"]);
  return out;
}

inline MetricUnits declared_metrics(const nlohmann::json& workload_case) {
  MetricUnits out;
  for (const auto& m : workload_case["result_protocol"]["declared_metrics"])
    if (m["name"] != "case_pass") out.emplace_back(m["name"], m["unit"]);
  return out;
}

}  // namespace kiln::testing
