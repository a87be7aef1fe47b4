// The evidence record: what a test binary writes is what the report reads, stamped with the
// binary's own commit; records from before the stamp read as unstamped with their devices kept.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/build_stamp.h"
#include "report/evidence_record.h"
#include "test_util.h"

namespace kiln {
namespace {

TEST(EvidenceRecord, WhatIsWrittenReadsBack) {
  EvidenceRecord r;
  r.binary = "cuda_backend_tests";
  r.commit = std::string(40, '1');
  r.dirty = true;
  r.stamped = true;
  r.timestamp = "2026-12-06T22:27:47Z";
  r.devices = {{"cpu", "AMD EPYC", "", ""},
               {"cuda", "NVIDIA H100 (sm_90, emulating sm86)", "CUDA 13.0", "sm_86 (emulated on sm_90)"},
               {"vulkan", "llvmpipe (CPU, Mesa 22.3.6)", "Mesa 22.3.6", ""}};
  r.switches = {{"KILN_CUDA_TARGET", "sm86"}};
  r.tests = {{"A.one", "passed"}, {"A.two", "skipped"}};
  const nlohmann::json j = evidence_record_json(r);
  EXPECT_EQ(j["schema"], "kiln.test-evidence/2");
  EXPECT_EQ(j["build"], (nlohmann::json{{"commit", r.commit}, {"dirty", true}}));
  auto back = parse_evidence_record(j, "x.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->commit, r.commit);
  EXPECT_TRUE(back->dirty);
  EXPECT_TRUE(back->stamped);
  EXPECT_EQ(back->tests, r.tests);
  EXPECT_EQ(back->switches, r.switches);
  ASSERT_EQ(back->devices.size(), 3u);
  ASSERT_NE(back->device("cuda"), nullptr);
  EXPECT_EQ(back->device("cuda")->driver, "CUDA 13.0");
  EXPECT_EQ(back->device("cuda")->target, "sm_86 (emulated on sm_90)");
  EXPECT_EQ(back->device("vulkan")->driver, "Mesa 22.3.6");
  EXPECT_EQ(back->device("rocm"), nullptr);
}

TEST(EvidenceRecord, UnstampedRecordsKeepTheirCommitAndDevices) {
  const auto j = nlohmann::json::parse(
      R"j({"schema":"kiln.test-evidence/1","binary":"b","commit":"fffb221 (given)","timestamp_utc":"t",)j"
      R"j("host":{"cuda_device":"NVIDIA H100","cuda_target":"sm_90a","vulkan_device":"NVIDIA H100 (discrete GPU, NVIDIA 580)"},)j"
      R"j("tests":{"A.one":"passed"}})j");
  auto r = parse_evidence_record(j, "old.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->stamped);
  EXPECT_EQ(r->commit, "fffb221 (given)");
  ASSERT_NE(r->device("cuda"), nullptr);
  EXPECT_EQ(r->device("cuda")->target, "sm_90a");
  ASSERT_NE(r->device("vulkan"), nullptr);
  EXPECT_EQ(r->device("vulkan")->device, "NVIDIA H100 (discrete GPU, NVIDIA 580)");
}

TEST(EvidenceRecord, MalformedRecordsNameTheFileAndField) {
  auto no_build = parse_evidence_record(
      nlohmann::json::parse(R"({"schema":"kiln.test-evidence/2","binary":"b","devices":[],"tests":{}})"), "e/b.json");
  ASSERT_FALSE(no_build.ok());
  EXPECT_NE(no_build.status().message().find("e/b.json: 'build'"), std::string::npos) << no_build.status().message();
  auto bad_result = parse_evidence_record(
      nlohmann::json::parse(R"({"schema":"kiln.test-evidence/2","build":{"commit":"c","dirty":false},"devices":[],)"
                            R"("tests":{"A.one":1}})"),
      "e/c.json");
  ASSERT_FALSE(bad_result.ok());
  EXPECT_NE(bad_result.status().message().find("'A.one'"), std::string::npos) << bad_result.status().message();
}

// This very binary, run again with KILN_EVIDENCE_DIR, records the commit compiled into it and
// the native switches set.
TEST(EvidenceRecord, TestBinariesRecordTheirOwnBuildStamp) {
  const std::string dir = testing::temp_dir("evidence-main");
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  const std::string cmd = "KILN_CUDA_PDL=0 KILN_EVIDENCE_DIR='" + dir + "' '" + self +
                          "' --gtest_filter=EvidenceRecord.WhatIsWrittenReadsBack > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(dir + "/" + std::filesystem::path(self).filename().string() + ".json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_evidence_record(nlohmann::json::parse(ss.str()), "written");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->stamped);
  EXPECT_EQ(r->commit, build_stamp().commit);
  EXPECT_EQ(r->dirty, build_stamp().dirty);
  EXPECT_EQ(r->tests, (std::map<std::string, std::string>{{"EvidenceRecord.WhatIsWrittenReadsBack", "passed"}}));
  ASSERT_NE(r->device("cpu"), nullptr) << "the CPU backend is present everywhere";
  EXPECT_EQ(r->switches.at("KILN_CUDA_PDL"), "0") << "the native switches set in the run are recorded";
}

}  // namespace
}  // namespace kiln
