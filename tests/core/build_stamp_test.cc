// cmake/build_stamp.cmake, the generator of the build stamp, against throwaway repositories: the
// commit a checkout is at, dirty only for changed tracked files outside evidence/, "unknown" for a
// tree that is not its own checkout, and the source rewritten only when the stamp changes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "qualify/temp_repo.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using qualify::testing::TempRepo;

// Runs the generator for `source_dir` into `out`; returns the generated text.
std::string stamp_of(const std::string& source_dir, const std::string& out) {
  const std::string cmd = std::string(KILN_CMAKE_COMMAND) + " -DSOURCE_DIR='" + source_dir + "' -DOUT='" + out + "' -P '" +
                          KILN_SOURCE_DIR + "/cmake/build_stamp.cmake' > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string head_of(const TempRepo& repo) {
  std::string head;
  if (FILE* p = popen(("git -C '" + repo.root() + "' rev-parse HEAD").c_str(), "r")) {
    char buf[64];
    while (fgets(buf, sizeof buf, p) != nullptr) head += buf;
    pclose(p);
  }
  while (!head.empty() && head.back() == '\n') head.pop_back();
  EXPECT_EQ(head.size(), 40u);
  return head;
}

TEST(BuildStamp, ACleanCheckoutGivesItsCommitUnmodified) {
  TempRepo repo;
  repo.write("src/a.cc", "int a;\n");
  repo.commit_all();
  const std::string out = testing::temp_dir("stamp") + "/build_stamp_data.cc";
  const std::string text = stamp_of(repo.root(), out);
  EXPECT_NE(text.find("return {\"" + head_of(repo) + "\", false};"), std::string::npos) << text;
}

TEST(BuildStamp, ChangedTrackedFilesMarkItModifiedButEvidenceAndUntrackedDoNot) {
  TempRepo repo;
  repo.write("src/a.cc", "int a;\n");
  repo.write("evidence/cpu/x.json", "{}\n");
  repo.commit_all();
  const std::string out = testing::temp_dir("stamp") + "/build_stamp_data.cc";
  repo.write("evidence/cpu/x.json", "{\"new\": 1}\n");
  repo.write("src/untracked.cc", "int u;\n");
  EXPECT_NE(stamp_of(repo.root(), out).find("\", false};"), std::string::npos);
  repo.write("src/a.cc", "int a = 1;\n");
  EXPECT_NE(stamp_of(repo.root(), out).find("return {\"" + head_of(repo) + "\", true};"), std::string::npos);
}

TEST(BuildStamp, ATreeThatIsNotItsOwnCheckoutIsUnknown) {
  const std::string out = testing::temp_dir("stamp") + "/build_stamp_data.cc";
  EXPECT_NE(stamp_of(testing::temp_dir("stamp-plain"), out).find("return {\"unknown\", false};"), std::string::npos);
  // A copied tree that happens to sit inside another repository must not take its commit.
  TempRepo outer;
  outer.write("copy/src/a.cc", "int a;\n");
  outer.commit_all();
  EXPECT_NE(stamp_of(outer.path("copy"), out).find("return {\"unknown\", false};"), std::string::npos);
}

TEST(BuildStamp, TheSourceIsRewrittenOnlyWhenTheStampChanges) {
  TempRepo repo;
  repo.write("src/a.cc", "int a;\n");
  repo.commit_all();
  const std::string out = testing::temp_dir("stamp") + "/build_stamp_data.cc";
  stamp_of(repo.root(), out);
  const auto before = fs::last_write_time(out);
  fs::last_write_time(out, before - std::chrono::hours(1));  // so that a rewrite could not hide in the clock's grain
  const auto aged = fs::last_write_time(out);
  stamp_of(repo.root(), out);
  EXPECT_EQ(fs::last_write_time(out), aged) << "an unchanged stamp must not touch the source (no rebuild)";
  repo.write("src/a.cc", "int a = 2;\n");
  repo.commit_all("second");
  stamp_of(repo.root(), out);
  EXPECT_NE(fs::last_write_time(out), aged);
}

}  // namespace
}  // namespace kiln
