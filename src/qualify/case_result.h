// The case-result protocol: a command-produced case writes a strict JSON document to the path
// in KILN_QUALIFICATION_CASE_RESULT. It is evidence for the runner, never the verdict: the
// runner checks it against the case, replaces its duration and may downgrade its status.
#pragma once

#include <string>
#include <vector>

#include "qualify/issues.h"
#include "qualify/strict_json.h"
#include "qualify/workload.h"

namespace kiln::qualify {

inline constexpr const char* kCaseResultEnv = "KILN_QUALIFICATION_CASE_RESULT";

struct CaseMetric {
  std::string name;
  double value = 0;
  std::string unit;
};

struct CaseResult {
  std::string status;  // passed | failed | skipped
  double reported_duration_seconds = 0;
  std::vector<CaseMetric> metrics;  // exactly the case's declared command metrics, sorted by name
  JsonValue details;
};

// Checks `text` against the case: schema, case_id, effective_config equal to the variant's,
// metric names equal to the declared command metrics (units too). Issues name JSON paths.
CaseResult check_case_result(std::string_view text, const WorkloadCase& c, const JsonValue& effective_config,
                             Issues& issues);

}  // namespace kiln::qualify
