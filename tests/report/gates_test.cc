// Gate status comes only from recorded results with the backend present.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "report/gates.h"
#include "test_util.h"

namespace kiln {
namespace {

const Gate kGate{"g", "requirement", {{"cpu", {"A.one", "A.two"}, ""}, {"cuda", {"B.gpu"}, ""}, {"rocm", {}, "no rocm"}}};

EvidenceFile file(std::string cuda, std::map<std::string, std::string> tests) {
  EvidenceFile f;
  f.path = "evidence/x.json";
  f.cuda_device = std::move(cuda);
  f.tests = std::move(tests);
  return f;
}

TEST(Gates, CoveredOnlyWhenEveryTestPassed) {
  auto s = evaluate_gate(kGate, kGate.backends[0], {file("", {{"A.one", "passed"}, {"A.two", "passed"}})});
  EXPECT_EQ(s.state, GateState::kCovered);
  EXPECT_EQ(s.evidence, std::vector<std::string>{"evidence/x.json"});
  EXPECT_EQ(s.command, "ctest --test-dir build --output-on-failure -R '^(A.one|A.two)$'");
  s = evaluate_gate(kGate, kGate.backends[0], {file("", {{"A.one", "passed"}, {"A.two", "failed"}})});
  EXPECT_EQ(s.state, GateState::kPartial);
  EXPECT_NE(s.reason.find("A.two"), std::string::npos);
  s = evaluate_gate(kGate, kGate.backends[0], {});
  EXPECT_EQ(s.state, GateState::kPending);
}

TEST(Gates, SkippedOrDeviceAbsentIsNotEvidence) {
  auto s = evaluate_gate(kGate, kGate.backends[1], {file("", {{"B.gpu", "passed"}})});
  EXPECT_EQ(s.state, GateState::kPending) << "a pass without a CUDA device present proves nothing for cuda";
  s = evaluate_gate(kGate, kGate.backends[1], {file("NVIDIA H200", {{"B.gpu", "skipped"}})});
  EXPECT_EQ(s.state, GateState::kPending);
  s = evaluate_gate(kGate, kGate.backends[1], {file("NVIDIA H200", {{"B.gpu", "passed"}})});
  EXPECT_EQ(s.state, GateState::kCovered);
  EXPECT_NE(s.command.find("build-device -L gpu"), std::string::npos);
}

TEST(Gates, NotApplicableAndNoTestYet) {
  EXPECT_EQ(evaluate_gate(kGate, kGate.backends[2], {}).state, GateState::kNotApplicable);
  Gate g{"h", "r", {{"cpu", {}, ""}}};
  auto s = evaluate_gate(g, g.backends[0], {file("", {})});
  EXPECT_EQ(s.state, GateState::kPending);
  EXPECT_NE(s.reason.find("no test"), std::string::npos);
}

TEST(Gates, EvidenceFilesAreValidated) {
  std::string dir = testing::temp_dir("evidence") + "/evidence";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/good.json") << R"({"schema":"kiln.test-evidence/1","binary":"b","commit":"c",)"
                                       R"("timestamp_utc":"t","host":{"cuda_device":null},"tests":{"A.one":"passed"}})";
  auto ev = load_evidence(dir);
  ASSERT_TRUE(ev.ok()) << ev.status().to_string();
  ASSERT_EQ(ev.value().size(), 1u);
  EXPECT_EQ(ev.value()[0].path, "evidence/good.json");
  EXPECT_EQ(ev.value()[0].tests.at("A.one"), "passed");
  std::ofstream(dir + "/bad.json") << R"({"schema":"other"})";
  EXPECT_EQ(load_evidence(dir).status().code(), ErrorCode::kFormatError);
  EXPECT_TRUE(load_evidence(dir + "/missing").value().empty());
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

// Every gate test name must exist, or a gate could never be covered: the names are checked
// against the tests compiled into this repository's binaries by the freshness test's report run.
TEST(Gates, EveryGateHasABackendRow) {
  for (const Gate& g : conformance_gates()) {
    EXPECT_FALSE(g.backends.empty()) << g.name;
    EXPECT_FALSE(g.requirement.empty()) << g.name;
  }
}

}  // namespace
}  // namespace kiln
