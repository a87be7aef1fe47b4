// The report's source history from git: commits after a run's commit that touched the covered
// paths (`*` within a folder, `**` below it), the report's commit, and errors naming the commit.
#include <gtest/gtest.h>

#include <cstdio>

#include "qualify/git_source_history.h"
#include "qualify/temp_repo.h"
#include "test_util.h"

namespace kiln::qualify {
namespace {

using testing::TempRepo;

std::string head_of(const TempRepo& repo) {
  std::string head;
  if (FILE* p = popen(("git -C '" + repo.root() + "' rev-parse HEAD").c_str(), "r")) {
    char buf[64];
    while (fgets(buf, sizeof buf, p) != nullptr) head += buf;
    pclose(p);
  }
  while (!head.empty() && head.back() == '\n') head.pop_back();
  return head;
}

TEST(GitSourceHistory, CountsOnlyLaterCommitsTouchingTheCoveredPaths) {
  TempRepo repo;
  repo.write("src/backend/registry.cc", "1\n");
  repo.write("src/backend/cpu/linear.cc", "1\n");
  repo.write("src/backend/cuda/linear.cc", "1\n");
  repo.commit_all("run");
  const std::string run = head_of(repo);
  repo.write("src/backend/cuda/linear.cc", "2\n");
  repo.commit_all("cuda only");
  repo.write("docs/x.md", "2\n");
  repo.commit_all("docs only");
  auto h = git_source_history(repo.root(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ((*h)->as_of(), head_of(repo));
  // `src/backend/*` is the folder's own files: the CUDA change below it does not count.
  auto cpu = (*h)->commits_touching(run, {"src/backend/*", "src/backend/cpu/**"});
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_TRUE(cpu->empty());
  repo.write("src/backend/cpu/linear.cc", "3\n");
  repo.commit_all("cpu");
  const std::string cpu_change = head_of(repo);
  auto later = git_source_history(repo.root(), "");
  ASSERT_TRUE(later.ok());
  auto touched = (*later)->commits_touching(run, {"src/backend/*", "src/backend/cpu/**"});
  ASSERT_TRUE(touched.ok()) << touched.status().to_string();
  EXPECT_EQ(*touched, std::vector<std::string>{cpu_change});
  auto cuda = (*later)->commits_touching(run, {"src/backend/cuda/**"});
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->size(), 1u);
  // Judged at the earlier commit, the CPU change has not happened yet.
  auto then = git_source_history(repo.root(), run);
  ASSERT_TRUE(then.ok());
  EXPECT_TRUE((*then)->commits_touching(run, {"src/backend/cpu/**"})->empty());
}

TEST(GitSourceHistory, AGlobLedByABangExcludesWhatItMatches) {
  TempRepo repo;
  repo.write("tests/cuda/parity_test.cc", "1\n");
  repo.write("tests/cuda/thresholds/h100.json", "1\n");
  repo.commit_all("run");
  const std::string run = head_of(repo);
  repo.write("tests/cuda/thresholds/h100.json", "2\n");
  repo.commit_all("thresholds only");
  const std::string thresholds = head_of(repo);
  auto h = git_source_history(repo.root(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto without = (*h)->commits_touching(run, {"tests/cuda/**", "!tests/cuda/thresholds/**"});
  ASSERT_TRUE(without.ok()) << without.status().to_string();
  EXPECT_TRUE(without->empty());
  EXPECT_EQ((*h)->commits_touching(run, {"tests/cuda/**"}).value(), std::vector<std::string>{thresholds});
  repo.write("tests/cuda/parity_test.cc", "2\n");
  repo.commit_all("a test");
  auto later = git_source_history(repo.root(), "");
  ASSERT_TRUE(later.ok());
  EXPECT_EQ((*later)->commits_touching(run, {"tests/cuda/**", "!tests/cuda/thresholds/**"}).value(),
            std::vector<std::string>{head_of(repo)});
}

TEST(GitSourceHistory, UnknownCommitsAreErrorsNamingThem) {
  TempRepo repo;
  repo.write("a", "1\n");
  repo.commit_all();
  auto h = git_source_history(repo.root(), "");
  ASSERT_TRUE(h.ok());
  const std::string missing(40, 'b');
  auto r = (*h)->commits_touching(missing, {"src/**"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(missing + " is not a commit of"), std::string::npos) << r.status().message();
  auto bad_as_of = git_source_history(repo.root(), missing);
  ASSERT_FALSE(bad_as_of.ok());
  EXPECT_EQ(bad_as_of.status().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(git_source_history(::kiln::testing::temp_dir("history"), "").ok());
}

}  // namespace
}  // namespace kiln::qualify
