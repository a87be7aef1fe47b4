// Gate status comes only from recorded results with the backend present, and is covered only
// where those runs are fresh: stamped, unmodified, and no commit since touched what they cover.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "report/gates.h"
#include "test_util.h"

namespace kiln {
namespace {

const Gate kGate{"g", "requirement", {{"cpu", {"A.one", "A.two"}, ""}, {"cuda", {"B.gpu"}, ""}, {"rocm", {}, "no rocm"}}, {}};

const std::string kRunCommit(40, 'a');

// History as a table: the commits after each run's commit that touch the asked paths.
class FakeHistory final : public SourceHistory {
 public:
  std::map<std::string, std::vector<std::string>> since;  // run commit -> commits after it
  std::vector<std::vector<std::string>> asked;            // the path lists asked about
  std::string as_of() const override { return std::string(40, 'f'); }
  Result<std::vector<std::string>> commits_touching(const std::string& commit,
                                                    const std::vector<std::string>& paths) const override {
    const_cast<FakeHistory*>(this)->asked.push_back(paths);
    auto it = since.find(commit);
    if (it == since.end()) return not_found(commit + " is not a commit of the repository");
    return it->second;
  }
};

EvidenceFile file(std::string cuda, std::map<std::string, std::string> tests, std::string commit = kRunCommit) {
  EvidenceFile f;
  f.path = "evidence/x.json";
  f.record.stamped = true;
  f.record.commit = std::move(commit);
  if (!cuda.empty()) f.record.devices.push_back({"cuda", std::move(cuda), "", "sm_90a"});
  f.record.tests = std::move(tests);
  return f;
}

FakeHistory fresh_history() {
  FakeHistory h;
  h.since[kRunCommit] = {};
  return h;
}

TEST(Gates, CoveredOnlyWhenEveryTestPassed) {
  const FakeHistory h = fresh_history();
  auto s = evaluate_gate(kGate, kGate.backends[0], {file("", {{"A.one", "passed"}, {"A.two", "passed"}})}, &h);
  EXPECT_EQ(s.state, GateState::kCovered);
  EXPECT_EQ(s.evidence, std::vector<std::string>{"evidence/x.json"});
  EXPECT_EQ(s.command, "ctest --test-dir build --output-on-failure -R '^(A.one|A.two)$'");
  s = evaluate_gate(kGate, kGate.backends[0], {file("", {{"A.one", "passed"}, {"A.two", "failed"}})}, &h);
  EXPECT_EQ(s.state, GateState::kPartial);
  EXPECT_NE(s.reason.find("A.two"), std::string::npos);
  s = evaluate_gate(kGate, kGate.backends[0], {}, &h);
  EXPECT_EQ(s.state, GateState::kPending);
}

TEST(Gates, SkippedOrDeviceAbsentIsNotEvidence) {
  const FakeHistory h = fresh_history();
  auto s = evaluate_gate(kGate, kGate.backends[1], {file("", {{"B.gpu", "passed"}})}, &h);
  EXPECT_EQ(s.state, GateState::kPending) << "a pass without a CUDA device present proves nothing for cuda";
  s = evaluate_gate(kGate, kGate.backends[1], {file("NVIDIA H200", {{"B.gpu", "skipped"}})}, &h);
  EXPECT_EQ(s.state, GateState::kPending);
  s = evaluate_gate(kGate, kGate.backends[1], {file("NVIDIA H200", {{"B.gpu", "passed"}})}, &h);
  EXPECT_EQ(s.state, GateState::kCovered);
  EXPECT_EQ(s.targets, std::vector<std::string>{"sm_90a"});
  EXPECT_NE(s.command.find("build-device -L gpu"), std::string::npos);
}

TEST(Gates, NotApplicableAndNoTestYet) {
  EXPECT_EQ(evaluate_gate(kGate, kGate.backends[2], {}, nullptr).state, GateState::kNotApplicable);
  Gate g{"h", "r", {{"cpu", {}, ""}}, {}};
  auto s = evaluate_gate(g, g.backends[0], {file("", {})}, nullptr);
  EXPECT_EQ(s.state, GateState::kPending);
  EXPECT_NE(s.reason.find("no test"), std::string::npos);
}

TEST(Gates, ACommitTouchingTheCoveredCodeSinceTheRunMakesItStale) {
  FakeHistory h;
  h.since[kRunCommit] = {std::string(40, 'c'), std::string(40, 'b')};
  auto s = evaluate_gate(kGate, kGate.backends[0], {file("", {{"A.one", "passed"}, {"A.two", "passed"}})}, &h);
  EXPECT_EQ(s.state, GateState::kStale);
  EXPECT_NE(s.reason.find("evidence/x.json at aaaaaaaaaaaa predates 2 commits that changed the code it covers "
                          "(the newest cccccccccccc)"),
            std::string::npos)
      << s.reason;
  // Asked once for the run, about the gate's own paths.
  ASSERT_EQ(h.asked.size(), 1u);
  EXPECT_EQ(h.asked[0], gate_source_paths(kGate, "cpu"));
}

TEST(Gates, UnstampedAndModifiedBuildsAreStale) {
  const FakeHistory h = fresh_history();
  EvidenceFile unstamped = file("", {{"A.one", "passed"}, {"A.two", "passed"}}, "2598f0c0f02a");
  unstamped.record.stamped = false;
  auto s = evaluate_gate(kGate, kGate.backends[0], {unstamped}, &h);
  EXPECT_EQ(s.state, GateState::kStale);
  EXPECT_NE(s.reason.find("is unstamped"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("2598f0c0f02a"), std::string::npos) << s.reason;
  EvidenceFile modified = file("", {{"A.one", "passed"}, {"A.two", "passed"}});
  modified.record.dirty = true;
  s = evaluate_gate(kGate, kGate.backends[0], {modified}, &h);
  EXPECT_EQ(s.state, GateState::kStale);
  EXPECT_NE(s.reason.find("uncommitted changes to aaaaaaaaaaaa"), std::string::npos) << s.reason;
}

TEST(Gates, WithoutHistoryOrCommitPassingRunsAreUnknownNeverCovered) {
  const std::vector<EvidenceFile> runs = {file("", {{"A.one", "passed"}, {"A.two", "passed"}})};
  auto s = evaluate_gate(kGate, kGate.backends[0], runs, nullptr);
  EXPECT_EQ(s.state, GateState::kUnknown);
  EXPECT_NE(s.reason.find("no git history"), std::string::npos) << s.reason;
  FakeHistory lacks_commit;  // a shallow clone, or a commit rewritten away
  s = evaluate_gate(kGate, kGate.backends[0], runs, &lacks_commit);
  EXPECT_EQ(s.state, GateState::kUnknown);
  EXPECT_NE(s.reason.find("is not a commit"), std::string::npos) << s.reason;
  const FakeHistory h = fresh_history();
  s = evaluate_gate(kGate, kGate.backends[0], {file("", {{"A.one", "passed"}, {"A.two", "passed"}}, "unknown")}, &h);
  EXPECT_EQ(s.state, GateState::kUnknown);
  EXPECT_NE(s.reason.find("outside a git checkout"), std::string::npos) << s.reason;
}

TEST(Gates, TheFreshestPassingRunIsEachTestsProof) {
  FakeHistory h = fresh_history();
  const std::string old(40, 'e');
  h.since[old] = {std::string(40, 'd')};
  EvidenceFile stale_run = file("", {{"A.one", "passed"}, {"A.two", "passed"}}, old);
  stale_run.path = "evidence/z-old.json";  // sorts last, so order alone would pick it
  EvidenceFile fresh_run = file("", {{"A.one", "passed"}, {"A.two", "passed"}});
  fresh_run.path = "evidence/a-new.json";
  auto s = evaluate_gate(kGate, kGate.backends[0], {fresh_run, stale_run}, &h);
  EXPECT_EQ(s.state, GateState::kCovered) << s.reason;
  EXPECT_EQ(s.evidence, std::vector<std::string>{"evidence/a-new.json"});
  // A test only the stale run passed makes the gate stale.
  fresh_run.record.tests["A.two"] = "failed";
  s = evaluate_gate(kGate, kGate.backends[0], {fresh_run, stale_run}, &h);
  EXPECT_EQ(s.state, GateState::kStale);
  EXPECT_EQ(s.evidence, (std::vector<std::string>{"evidence/a-new.json", "evidence/z-old.json"}));
}

TEST(Gates, EachTargetSaysWhetherItsRunsAreFresh) {
  FakeHistory h = fresh_history();
  const std::string old(40, 'e');
  h.since[old] = {std::string(40, 'd')};
  EvidenceFile sm90 = file("NVIDIA H100", {{"B.gpu", "passed"}});
  EvidenceFile sm86 = file("NVIDIA H100", {{"B.gpu", "passed"}}, old);
  sm86.record.devices[0].target = "sm_86 (emulated on sm_90)";
  auto s = evaluate_gate(kGate, kGate.backends[1], {sm90, sm86}, &h);
  EXPECT_EQ(s.state, GateState::kCovered) << "the sm_90a run is fresh";
  EXPECT_EQ(s.targets, (std::vector<std::string>{"sm_90a", "sm_86 (emulated on sm_90) (stale)"}));
}

TEST(Gates, SourcePathsAreTheBackendsOwnTheGatesAndTheirTests) {
  Gate g{"m", "r", {{"cpu", {"A.one"}, ""}}, {"src/model/**"}};
  EXPECT_EQ(gate_source_paths(g, "cuda"),
            (std::vector<std::string>{"src/core/**", "tests/core/**", "src/backend/*", "tests/backend/*",
                                      "src/backend/cuda/**", "tests/backend/cuda/**", "src/model/**", "tests/model/**",
                                      "!tests/backend/cuda/latency_thresholds/**"}));
  // Only a gate whose tests read the thresholds is judged by their changes.
  g.reads_run_time_data = true;
  EXPECT_EQ(gate_source_paths(g, "cuda").back(), "tests/model/**");
  // What a recorded backend section is judged by: the same backend paths, without core or tests.
  EXPECT_EQ(backend_source_paths("cuda"), (std::vector<std::string>{"src/backend/*", "src/backend/cuda/**"}));
}

// A git glob pathspec (`*` within a folder, `**` across folders) as a regular expression.
std::regex glob_regex(const std::string& glob) {
  std::string re;
  for (size_t i = 0; i < glob.size(); ++i) {
    if (glob.compare(i, 3, "/**") == 0) {
      re += "(/.*)?";
      i += 2;
    } else if (glob[i] == '*') {
      re += "[^/]*";
    } else {
      if (std::string(".+?()[]{}^$|\\").find(glob[i]) != std::string::npos) re += '\\';
      re += glob[i];
    }
  }
  return std::regex(re);
}

// A mistyped path would never make a gate stale: each must name files of this tree.
TEST(Gates, EveryCoveredPathMatchesFilesOfTheTree) {
  std::vector<std::string> files;
  for (const char* top : {"src", "tests"})
    for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(KILN_SOURCE_DIR) + "/" + top))
      if (e.is_regular_file())
        files.push_back(std::filesystem::relative(e.path(), KILN_SOURCE_DIR).string());
  ASSERT_GT(files.size(), 100u);
  for (const Gate& g : conformance_gates())
    for (const GateBackend& b : g.backends) {
      if (!b.not_applicable.empty()) continue;
      for (std::string p : gate_source_paths(g, b.backend)) {
        const bool excluded = p.rfind('!', 0) == 0;  // run-time data, which must exist too
        if (excluded) p.erase(0, 1);
        else if (p.rfind("tests/", 0) == 0) continue;  // the mirror of a folder without tests of its own
        const std::regex re = glob_regex(p);
        EXPECT_TRUE(std::any_of(files.begin(), files.end(), [&](const std::string& f) { return std::regex_match(f, re); }))
            << g.name << " (" << b.backend << "): " << p << " matches no file";
      }
    }
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
  EXPECT_EQ(ev.value()[0].record.tests.at("A.one"), "passed");
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
