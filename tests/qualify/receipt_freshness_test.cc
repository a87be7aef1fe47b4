// A receipt is current while nothing its workload declares as input changed since its commit;
// the index picks the newest receipt of each workload, variant and host and names what the
// CPU-only CI must keep current.
#include <gtest/gtest.h>

#include <filesystem>

#include "qualify/receipt_freshness.h"
#include "qualify/receipt_index.h"
#include "qualify/runner.h"
#include "qualify/temp_repo.h"
#include "qualify/workload.h"
#include "qualify/workload_fixtures.h"

namespace kiln::qualify {
namespace {

using Json = nlohmann::ordered_json;

// The fixture environment workload (one cpu variant running `uname -a`) with inputs src/**.
class ReceiptFreshnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Json w = testing::load_fixture("environment");
    Json with_inputs;
    for (auto it = w.begin(); it != w.end(); ++it) {
      with_inputs[it.key()] = it.value();
      if (it.key() == "description") with_inputs["inputs"] = Json::array({"src/**"});
    }
    repo_.write("src/a.txt", "source\n");
    repo_.write("docs/a.md", "prose\n");
    repo_.write(kWorkload, with_inputs.dump(2) + "\n");
    repo_.commit_all();
    receipt_ = run("first.json");
  }
  Receipt run(const std::string& name) {
    RunRequest req;
    req.workload_path = repo_.path(kWorkload);
    req.variant_id = "cpu";
    req.host_id = "h1";
    req.command = {"kiln"};
    req.output_path = repo_.path("qualification/receipts/" + name);
    Result<RunOutcome> out = run_workload(req);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    Result<ReceiptCheck> c = check_receipt_file(out.ok() ? out->receipt_path : "");
    EXPECT_TRUE(c.ok() && c->issues.empty());
    return c.ok() ? c->receipt : Receipt{};
  }
  ReceiptFreshness freshness(const std::string& until = "") {
    Result<GitRepo> repo = GitRepo::discover(repo_.root());
    EXPECT_TRUE(repo.ok());
    return receipt_freshness(receipt_, *repo, until);
  }
  static constexpr const char* kWorkload = "qualification/workloads/fixture-environment-v1.json";
  testing::TempRepo repo_;
  Receipt receipt_;
};

TEST_F(ReceiptFreshnessTest, ChangesOutsideTheInputsKeepItCurrent) {
  EXPECT_EQ(freshness().state, ReceiptCurrency::kCurrent) << freshness().why;
  repo_.write("docs/a.md", "more prose\n");
  repo_.commit_all("docs only");
  repo_.write("qualification/receipts/other.json", "{}");
  EXPECT_EQ(freshness().state, ReceiptCurrency::kCurrent) << freshness().why;
}

TEST_F(ReceiptFreshnessTest, AnUncommittedOrCommittedInputChangeMakesItStaleAndIsNamed) {
  repo_.write("src/a.txt", "changed\n");
  ReceiptFreshness dirty = freshness();
  EXPECT_EQ(dirty.state, ReceiptCurrency::kStale);
  EXPECT_EQ(dirty.changed, std::vector<std::string>{"src/a.txt"});
  EXPECT_NE(dirty.why.find("1 input changed since " + receipt_.git_commit.substr(0, 12) + ": src/a.txt"),
            std::string::npos)
      << dirty.why;
  repo_.commit_all("new source");
  EXPECT_EQ(freshness().changed, std::vector<std::string>{"src/a.txt"});
  // Judged at the receipt's own commit, nothing had changed yet.
  EXPECT_EQ(freshness(receipt_.git_commit).state, ReceiptCurrency::kCurrent);
}

TEST_F(ReceiptFreshnessTest, ANewFileUnderAnInputGlobCountsOnceCommitted) {
  repo_.write("src/deep/b.cc", "int b;\n");
  EXPECT_EQ(freshness().state, ReceiptCurrency::kCurrent) << "untracked files are not source";
  repo_.commit_all("new file");
  EXPECT_EQ(freshness().changed, std::vector<std::string>{"src/deep/b.cc"});
}

TEST_F(ReceiptFreshnessTest, ARetiredOrMissingWorkloadMakesItStale) {
  std::filesystem::create_directories(repo_.path("qualification/workloads/retired"));
  std::filesystem::rename(repo_.path(kWorkload), repo_.path("qualification/workloads/retired/fixture-environment-v1.json"));
  ReceiptFreshness retired = freshness();
  EXPECT_EQ(retired.state, ReceiptCurrency::kStale);
  EXPECT_NE(retired.why.find("retired"), std::string::npos) << retired.why;
  std::filesystem::remove(repo_.path("qualification/workloads/retired/fixture-environment-v1.json"));
  ReceiptFreshness gone = freshness();
  EXPECT_EQ(gone.state, ReceiptCurrency::kStale);
  EXPECT_NE(gone.why.find("is not in qualification/workloads/"), std::string::npos) << gone.why;
}

TEST_F(ReceiptFreshnessTest, AnUnknownCommitCannotBeJudged) {
  receipt_.git_commit = std::string(40, 'e');
  EXPECT_EQ(freshness().state, ReceiptCurrency::kUnknown);
}

TEST_F(ReceiptFreshnessTest, TheIndexKeepsTheNewestReceiptOfAKindAndCountsTheOlder) {
  repo_.commit_all("first receipt");
  repo_.write("src/a.txt", "changed\n");
  repo_.commit_all("new source");
  Receipt second = run("second.json");
  repo_.commit_all("second receipt");
  Result<GitRepo> repo = GitRepo::discover(repo_.root());
  ASSERT_TRUE(repo.ok());
  Result<ReceiptIndex> index = index_receipts(*repo);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  ASSERT_EQ(index->newest.size(), 1u);
  EXPECT_EQ(index->newest[0].file, "qualification/receipts/second.json");
  EXPECT_EQ(index->newest[0].older, 1);
  EXPECT_EQ(index->newest[0].freshness.state, ReceiptCurrency::kCurrent) << index->newest[0].freshness.why;
  EXPECT_TRUE(index->unreceipted.empty());
  EXPECT_TRUE(cpu_receipt_breaches(*index, *repo).empty());
}

TEST_F(ReceiptFreshnessTest, BreachesNameAStaleCpuReceiptAndACpuVariantWithoutOne) {
  repo_.commit_all("first receipt");
  repo_.write("src/a.txt", "changed\n");
  Json other = testing::load_fixture("environment");
  other["workload_id"] = "fixture-environment-v2";
  repo_.write("qualification/workloads/fixture-environment-v2.json", other.dump(2) + "\n");
  repo_.commit_all("new source, a new workload");
  Result<GitRepo> repo = GitRepo::discover(repo_.root());
  ASSERT_TRUE(repo.ok());
  Result<ReceiptIndex> index = index_receipts(*repo);
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->unreceipted, std::vector<std::string>{"fixture-environment-v2/cpu (cpu)"});
  std::vector<std::string> breaches = cpu_receipt_breaches(*index, *repo);
  ASSERT_EQ(breaches.size(), 2u);
  EXPECT_NE(breaches[0].find("first.json: stale: 1 input changed"), std::string::npos) << breaches[0];
  EXPECT_EQ(breaches[1], "fixture-environment-v2/cpu: no receipt recorded without a GPU");
}

TEST(ReceiptFreshness, OnlyCpuAndLlvmpipeReceiptsAreRecordedWithoutAGpu) {
  auto device = [](const char* backend, const char* driver) {
    Receipt r;
    Result<JsonValue> d = parse_strict_json(std::string("{\"backend\": \"") + backend + "\", \"driver\": " +
                                            (driver ? std::string("\"") + driver + "\"" : "null") + "}");
    EXPECT_TRUE(d.ok());
    r.device = *d;
    return recorded_without_gpu(r);
  };
  EXPECT_TRUE(device("cpu", nullptr));
  EXPECT_TRUE(device("vulkan", "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)"));
  EXPECT_FALSE(device("vulkan", "NVIDIA 580.159.04"));
  EXPECT_FALSE(device("cuda", "580.159.04"));
}

}  // namespace
}  // namespace kiln::qualify
