// `kiln qualify compare`: whether two receipts may be compared under a workload's comparison
// policy, and, if so, each metric rule's verdict with the spec's tolerance arithmetic.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qualify/receipt.h"
#include "qualify/workload.h"

namespace kiln::qualify {

struct ComparisonRow {
  std::string result_id;
  std::string metric;
  std::string metric_class;
  std::string op;
  bool required = true;
  std::optional<double> baseline;
  std::optional<double> candidate;
  double tolerance = 0;
  double violation = 0;
  // passed | failed | failed_row (a result did not pass, so its numbers are not used) |
  // missing (a required metric is absent) | not_compared (an optional rule without data)
  std::string status;
  std::string reason;
  bool holds() const { return status == "passed" || status == "not_compared"; }
};

struct Comparison {
  std::vector<std::string> incompatibilities;  // empty when the receipts are comparable
  std::vector<ComparisonRow> rows;             // only when comparable
  bool compatible() const { return incompatibilities.empty(); }
  bool holds() const;
};

// tol = max(abs_tol, |b| * rel_tol); violation = |c - b| (equal), max(0, c - b) (not_greater),
// max(0, b - c) (not_less); the rule holds when violation <= tol.
double rule_tolerance(double baseline, double absolute, double relative);
double rule_violation(const std::string& op, double baseline, double candidate);

// Both receipts must already be valid; `manifest` is the validated workload they name.
Comparison compare_receipts(const Receipt& baseline, const Receipt& candidate, const Workload& manifest);

JsonValue comparison_to_json(const Comparison& c);
std::string comparison_to_text(const Comparison& c);

}  // namespace kiln::qualify
