// Backend records: a backend's report section recorded where its device is present reads back as
// written, stands apart from test evidence in the same tree, and fills that backend's entry of a
// report built where the device is absent, with its freshness judged by the history.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "backend/registry.h"
#include "model/init.h"
#include "report/backend_record.h"
#include "report/capability_report.h"
#include "report/gates.h"
#include "test_util.h"

namespace kiln {
namespace {

using nlohmann::json;

const std::string kCommit(40, 'c');

BackendRecord sample_record(const std::string& backend, const std::string& shapes) {
  BackendRecord r;
  r.run.binary = "kiln";
  r.run.commit = kCommit;
  r.run.stamped = true;
  r.run.timestamp = "2026-12-07T05:00:00Z";
  r.run.devices = {{"cpu", "host cpu", "", ""}, {backend, "NVIDIA H100 80GB HBM3", "580.159.04", "sm_90a"}};
  r.backend = backend;
  r.model_shapes = shapes;
  r.section = {{"capabilities", {{"storage", {{"weight_dtypes", "bf16, f32"}}}}},
               {"facet_support", json::array({{{"facet", "linear"}, {"case", "decode"}, {"request", "matmul"},
                                               {"support", "native"}, {"constraint", ""}}})},
               {"support_audit", {{"cases", 7}, {"mismatches", 0}}}};
  r.fallback_policy = {{"backend", backend}, {"generic_op", "error"}, {"decode_hot_path", "native_required"},
                       {"training_optimizer", "native_required"}};
  return r;
}

void write(const std::string& path, const json& j) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << j.dump(1) << "\n";
}

// Commits after a run that touch the asked paths: none, or one.
class TableHistory final : public SourceHistory {
 public:
  explicit TableHistory(std::vector<std::string> later) : later_(std::move(later)) {}
  std::string as_of() const override { return std::string(40, 'f'); }
  Result<std::vector<std::string>> commits_touching(const std::string&, const std::vector<std::string>& paths) const override {
    asked.push_back(paths);
    return later_;
  }
  mutable std::vector<std::vector<std::string>> asked;  // the paths of each question, in turn

 private:
  std::vector<std::string> later_;
};

TEST(BackendRecord, WhatIsWrittenReadsBack) {
  const BackendRecord r = sample_record("cuda", "the qwen3.5-4b preset");
  const json j = backend_record_json(r);
  EXPECT_EQ(j["schema"], "kiln.backend-record/1");
  EXPECT_FALSE(j.contains("tests"));
  auto back = parse_backend_record(j, "evidence/cuda/backend-cuda.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->path, "evidence/cuda/backend-cuda.json");
  EXPECT_EQ(back->backend, "cuda");
  EXPECT_EQ(back->model_shapes, "the qwen3.5-4b preset");
  EXPECT_EQ(back->run.commit, kCommit);
  ASSERT_NE(back->run.device("cuda"), nullptr);
  EXPECT_EQ(back->run.device("cuda")->target, "sm_90a");
  EXPECT_EQ(back->section, r.section);
  EXPECT_EQ(back->fallback_policy, r.fallback_policy);
}

TEST(BackendRecord, MalformedRecordsNameTheField) {
  json j = backend_record_json(sample_record("cuda", "s"));
  json no_caps = j;
  no_caps["section"].erase("capabilities");
  auto a = parse_backend_record(no_caps, "f.json");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("f.json: 'section'"), std::string::npos) << a.status().message();
  json other = j;
  other["fallback_policy"]["backend"] = "vulkan";
  auto b = parse_backend_record(other, "f.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("'fallback_policy'"), std::string::npos) << b.status().message();
  json no_build = j;
  no_build.erase("build");
  EXPECT_FALSE(parse_backend_record(no_build, "f.json").ok());
}

TEST(BackendRecord, StandsApartFromTestEvidenceInOneTree) {
  const std::string dir = testing::temp_dir("backend-record") + "/evidence";
  write(dir + "/cuda/backend-cuda.json", backend_record_json(sample_record("cuda", "s")));
  EvidenceRecord run;
  run.binary = "cuda_backend_tests";
  run.commit = kCommit;
  run.stamped = true;
  run.tests = {{"A.b", "passed"}};
  write(dir + "/cuda/cuda_backend_tests.json", evidence_record_json(run));
  auto evidence = load_evidence(dir);
  ASSERT_TRUE(evidence.ok()) << evidence.status().to_string();
  ASSERT_EQ(evidence->size(), 1u);
  EXPECT_EQ(evidence->front().path, "evidence/cuda/cuda_backend_tests.json");
  auto records = load_backend_records(dir);
  ASSERT_TRUE(records.ok()) << records.status().to_string();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ(records->front().path, "evidence/cuda/backend-cuda.json");
}

// A backend this binary has but cannot create here (CUDA on a machine without a GPU), or "".
std::string absent_backend() {
  for (const BackendEntry& e : backend_registry())
    if (e.built && !create_backend(e.name).ok()) return e.name;
  return "";
}

TEST(BackendRecord, FillsTheEntryOfABackendWhoseDeviceIsAbsent) {
  const std::string name = absent_backend();
  if (name.empty()) GTEST_SKIP() << "SKIPPED: every backend built here can be created (none is absent)";
  const std::string dir = testing::temp_dir("backend-record-report") + "/evidence";
  const BackendRecord rec = sample_record(name, "shapes L");
  write(dir + "/" + name + "/backend-" + name + ".json", backend_record_json(rec));
  ReportOptions o;
  o.model = preset_config("tiny-chat").value();
  o.model_label = "shapes L";
  o.evidence_dir = dir;
  o.only_backend = name;
  o.canonical = true;
  auto entry = [&](const json& report) { return report["backends"].at(0); };
  auto backend_work = [&](const json& report) {
    int n = 0;
    for (const auto& w : report["open_coverage_work"]) n += w["kind"] == "backend";
    return n;
  };

  auto unknown = build_capability_report(o);  // no history: never fresh
  ASSERT_TRUE(unknown.ok()) << unknown.status().to_string();
  EXPECT_EQ(entry(*unknown)["status"], "recorded");
  EXPECT_EQ(entry(*unknown)["capabilities"], rec.section["capabilities"]);
  EXPECT_EQ(entry(*unknown)["facet_support"], rec.section["facet_support"]);
  EXPECT_EQ(entry(*unknown)["recorded"]["device"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(entry(*unknown)["recorded"]["freshness"], "unknown");
  ASSERT_EQ((*unknown)["fallback_policy"].size(), 1u);
  EXPECT_EQ((*unknown)["fallback_policy"][0], rec.fallback_policy);
  EXPECT_EQ(backend_work(*unknown), 1);
  EXPECT_NE(render_markdown(*unknown).find("recorded on NVIDIA H100 80GB HBM3 [sm_90a, 580.159.04]"), std::string::npos);

  TableHistory none({}), one({std::string(40, 'd')});
  o.history = &none;
  auto fresh = build_capability_report(o);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(entry(*fresh)["recorded"]["freshness"], "fresh");
  EXPECT_EQ(backend_work(*fresh), 0);
  // The record is the only evidence: its freshness is the one question, about its backend's
  // folder and the backend layer's shared files.
  EXPECT_EQ(none.asked, (std::vector<std::vector<std::string>>{{"src/backend/*", "src/backend/" + name + "/**"}}));
  o.history = &one;
  auto stale = build_capability_report(o);
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(entry(*stale)["recorded"]["freshness"], "stale");
  EXPECT_EQ(backend_work(*stale), 1);

  // A record made for other model shapes does not speak for this report's facet support.
  o.model_label = "shapes M";
  auto other = build_capability_report(o);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(entry(*other)["status"], "built, not evaluated");
  EXPECT_FALSE(entry(*other).contains("capabilities"));
}

}  // namespace
}  // namespace kiln
