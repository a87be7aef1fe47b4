// Which routes the serving backend's recorded evidence qualifies. The capability report
// (docs/backend-capability-report.json, built into the binary) says, per conformance gate and
// backend, whether passing tests cover it; a route family is qualified on a backend when every
// gate it rests on has passing evidence there (covered, or stale or unknown: passed on older code,
// or code whose freshness cannot be told) or does not apply. The `stable` profile admits qualified
// routes only; `experimental` also admits those still under qualification (docs/api.md, "Profiles").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

enum class RouteFamily { kInference, kTraining };
const char* route_family_name(RouteFamily f);

class RouteGates {
 public:
  // The gates of `report` (a kiln.capability-report/1 document) as they stand for `backend`.
  static RouteGates from_report(const nlohmann::json& report, const std::string& backend);
  // The gates a family rests on, by name (the report's `gates[].name`).
  static const std::vector<std::string>& gates_of(RouteFamily f);
  // Those of the family's gates without passing evidence (partial, pending) on the backend, each
  // with its status ("missing" when the report has no row for it): empty when qualified.
  std::vector<std::string> open_gates(RouteFamily f) const;
  const std::string& backend() const { return backend_; }

 private:
  std::string backend_;
  nlohmann::json statuses_ = nlohmann::json::object();  // gate name -> status on the backend
};

// docs/backend-capability-report.json as it was when the binary was built.
std::string_view embedded_capability_report();

}  // namespace kiln
