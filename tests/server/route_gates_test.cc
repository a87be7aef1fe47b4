// Which route families the capability report's evidence qualifies on a backend (route_gates.h):
// read from synthetic reports, and from the report built into the binary, whose evidence must
// qualify every family on the CPU and CUDA backends (else `stable` would refuse them).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/route_gates.h"

namespace kiln {
namespace {

using json = nlohmann::json;

// A report whose every gate of both families has a row for `backend` with `status`, except
// `odd_gate`, given `odd_status`.
json report(const std::string& backend, const std::string& status, const std::string& odd_gate = "",
            const std::string& odd_status = "") {
  json gates = json::array();
  for (RouteFamily f : {RouteFamily::kInference, RouteFamily::kTraining})
    for (const std::string& name : RouteGates::gates_of(f))
      gates.push_back({{"name", name},
                       {"backends", {{{"backend", backend}, {"status", name == odd_gate ? odd_status : status}},
                                     {{"backend", "other"}, {"status", "failed"}}}}});
  return {{"schema", "kiln.capability-report/1"}, {"gates", gates}};
}

TEST(RouteGates, CoveredOrNotApplicableGatesQualifyAndOthersAreNamedWithTheirStatus) {
  EXPECT_TRUE(RouteGates::from_report(report("cpu", "covered"), "cpu").open_gates(RouteFamily::kInference).empty());
  EXPECT_TRUE(RouteGates::from_report(report("cpu", "not_applicable"), "cpu").open_gates(RouteFamily::kTraining).empty());
  const RouteGates g = RouteGates::from_report(report("cpu", "covered", "optimizer_parity", "failed"), "cpu");
  EXPECT_TRUE(g.open_gates(RouteFamily::kInference).empty());
  EXPECT_EQ(g.open_gates(RouteFamily::kTraining), std::vector<std::string>{"optimizer_parity (failed)"});
}

TEST(RouteGates, StaleOrUnknownGatesHavePassingEvidenceAndQualify) {
  EXPECT_TRUE(RouteGates::from_report(report("cuda", "stale"), "cuda").open_gates(RouteFamily::kInference).empty());
  EXPECT_TRUE(RouteGates::from_report(report("cuda", "unknown"), "cuda").open_gates(RouteFamily::kTraining).empty());
  const RouteGates g = RouteGates::from_report(report("cuda", "stale", "device_op_parity", "partial"), "cuda");
  EXPECT_EQ(g.open_gates(RouteFamily::kInference), std::vector<std::string>{"device_op_parity (partial)"});
}

TEST(RouteGates, ABackendOrGateTheReportLacksIsMissing) {
  const RouteGates g = RouteGates::from_report(report("cpu", "covered"), "vulkan");
  EXPECT_EQ(g.backend(), "vulkan");
  EXPECT_EQ(g.open_gates(RouteFamily::kTraining),
            (std::vector<std::string>{"optimizer_parity (missing)", "one_step_training_proof (missing)"}));
  EXPECT_EQ(RouteGates::from_report(json::object(), "cpu").open_gates(RouteFamily::kInference).size(),
            RouteGates::gates_of(RouteFamily::kInference).size());
}

TEST(RouteGates, TheBuiltInReportQualifiesEveryFamilyOnCpuAndCuda) {
  const json built_in = json::parse(embedded_capability_report());
  EXPECT_EQ(built_in["schema"], "kiln.capability-report/1");
  for (const char* backend : {"cpu", "cuda"})
    for (RouteFamily f : {RouteFamily::kInference, RouteFamily::kTraining}) {
      const std::vector<std::string> open = RouteGates::from_report(built_in, backend).open_gates(f);
      EXPECT_TRUE(open.empty()) << backend << " " << route_family_name(f) << ": " << json(open).dump();
    }
}

}  // namespace
}  // namespace kiln
