#include "server/route_gates.h"

namespace kiln {

const char* route_family_name(RouteFamily f) { return f == RouteFamily::kInference ? "inference" : "training"; }

RouteGates RouteGates::from_report(const nlohmann::json& report, const std::string& backend) {
  RouteGates g;
  g.backend_ = backend;
  if (!report.is_object() || !report.contains("gates") || !report["gates"].is_array()) return g;
  for (const auto& gate : report["gates"]) {
    if (!gate.is_object() || !gate.contains("name") || !gate.contains("backends")) continue;
    for (const auto& row : gate["backends"])
      if (row.is_object() && row.value("backend", "") == backend)
        g.statuses_[gate["name"].get<std::string>()] = row.value("status", "");
  }
  return g;
}

const std::vector<std::string>& RouteGates::gates_of(RouteFamily f) {
  static const std::vector<std::string> kInference = {"device_op_parity", "matmul_linear_parity",
                                                      "attention_gdn_conv_parity", "no_unexpected_host_fallback"};
  static const std::vector<std::string> kTraining = {"optimizer_parity", "one_step_training_proof"};
  return f == RouteFamily::kInference ? kInference : kTraining;
}

std::vector<std::string> RouteGates::open_gates(RouteFamily f) const {
  std::vector<std::string> open;
  for (const std::string& name : gates_of(f)) {
    const std::string status = statuses_.contains(name) ? statuses_[name].get<std::string>() : "missing";
    // Stale and unknown gates have passing evidence too, for older code or code whose freshness
    // cannot be told: the report says which; a rerun of the evidence, not a restart, makes them covered.
    if (status != "covered" && status != "stale" && status != "unknown" && status != "not_applicable")
      open.push_back(name + " (" + status + ")");
  }
  return open;
}

}  // namespace kiln
