// core/atomic_publish: files and folders replaced in one step, never overwritten in create-new
// mode, failures at each step leaving the old version and no staging entry; a child process
// killed before each step of a folder's publication leaves the old complete folder or the new
// one, never a mixture, and the sweep then clears every leftover (and puts back a version moved
// aside whose destination is missing).
#include "core/atomic_publish.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kiln-publish-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    set_publish_fault_hook(nullptr);
    fs::remove_all(path);
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every entry of `dir` (name -> its text, or "<dir>" with the texts of its files after it).
std::map<std::string, std::string> listing(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string v;
    if (e.is_directory()) {
      std::map<std::string, std::string> inner;
      for (const auto& f : fs::directory_iterator(e.path())) inner[f.path().filename().string()] = read_text(f.path());
      v = "<dir>";
      for (const auto& [n, t] : inner) v += " " + n + "=" + t;
    } else {
      v = read_text(e.path());
    }
    out[e.path().filename().string()] = v;
  }
  return out;
}

// A folder named "adapter" with two files, published (kReplace) into `parent`.
Result<std::string> publish_pair(const std::string& parent, const std::string& a, const std::string& b) {
  KILN_ASSIGN_OR_RETURN(StagedFolder staged, StagedFolder::create(parent, "adapter"));
  KILN_RETURN_IF_ERROR(write_file_atomically(staged.path() + "/a", a));
  KILN_RETURN_IF_ERROR(write_file_atomically(staged.path() + "/b", b));
  return staged.publish(PublishMode::kReplace);
}

// Fails the `n`-th step a publication enters (1-based) with `why`.
void fail_step(int n, Status why) {
  auto count = std::make_shared<int>(0);
  set_publish_fault_hook([count, n, why](PublishStep, const std::string&) { return ++*count == n ? why : Status(); });
}

TEST(AtomicPublish, AFileIsReplacedWholeAndNoStagingFileRemains) {
  TempDir t;
  const std::string path = t.path + "/receipt.json";
  ASSERT_TRUE(write_file_atomically(path, "first").ok());
  ASSERT_TRUE(write_file_atomically(path, "second").ok());
  EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{{"receipt.json", "second"}}));
}

TEST(AtomicPublish, CreateNewNeverOverwritesAnExistingFile) {
  TempDir t;
  const std::string path = t.path + "/receipt.json";
  ASSERT_TRUE(write_file_atomically(path, "first", PublishMode::kCreateNew).ok());
  const Status again = write_file_atomically(path, "second", PublishMode::kCreateNew);
  EXPECT_EQ(again.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(again.message().find(path + " already exists"), std::string::npos) << again.message();
  EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{{"receipt.json", "first"}}));
}

TEST(AtomicPublish, AFileInAMissingFolderIsAnIoErrorNamingIt) {
  const Status s = write_file_atomically("/nonexistent-kiln-dir/r.json", "x");
  EXPECT_EQ(s.code(), ErrorCode::kIoError);
  EXPECT_NE(s.message().find("/nonexistent-kiln-dir/"), std::string::npos) << s.message();
}

TEST(AtomicPublish, AFileWhoseSyncOrRenameFailsKeepsItsOldTextAndLeavesNoStagingFile) {
  for (int step : {1, 2}) {  // sync files, rename
    TempDir t;
    const std::string path = t.path + "/f";
    ASSERT_TRUE(write_file_atomically(path, "old").ok());
    fail_step(step, io_error("No space left on device"));
    const Status s = write_file_atomically(path, "new");
    EXPECT_EQ(s.message(), "No space left on device") << "step " << step;
    EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{{"f", "old"}})) << "step " << step;
  }
}

TEST(AtomicPublish, AFolderIsReplacedWholeAndCreateNewRefusesAnExistingOne) {
  TempDir t;
  auto first = publish_pair(t.path, "a1", "b1");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(*first, t.path + "/adapter");
  ASSERT_TRUE(publish_pair(t.path, "a2", "b2").ok());
  EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{{"adapter", "<dir> a=a2 b=b2"}}));

  auto staged = StagedFolder::create(t.path, "adapter");
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(write_file_atomically(staged->path() + "/a", "a3").ok());
  auto refused = staged->publish(PublishMode::kCreateNew);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kFailedPrecondition);
  staged = StagedFolder::create(t.path, "other");  // destroying the refused one removes its staging folder
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(staged->publish(PublishMode::kCreateNew).ok());
  EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{{"adapter", "<dir> a=a2 b=b2"}, {"other", "<dir>"}}));
}

TEST(AtomicPublish, AFolderWhosePublicationFailsBeforeTheRenameCanBeKeptAndTheSweepKeepsIt) {
  TempDir t;
  ASSERT_TRUE(publish_pair(t.path, "a1", "b1").ok());
  auto staged = StagedFolder::create(t.path, "adapter");
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(write_file_atomically(staged->path() + "/a", "a2").ok());
  fail_step(1, io_error("No space left on device"));  // its sync
  EXPECT_FALSE(staged->publish(PublishMode::kReplace).ok());
  set_publish_fault_hook(nullptr);
  auto kept = staged->keep();
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  const std::string name = fs::path(*kept).filename().string();
  EXPECT_EQ(name.rfind(".failed-adapter-", 0), 0u) << name;
  auto swept = sweep_staging(t.path);
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->kept, std::vector<std::string>{*kept});
  EXPECT_TRUE(swept->removed.empty());
  EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{{"adapter", "<dir> a=a1 b=b1"}, {name, "<dir> a=a2"}}));
}

// The child publishes a new version over the old one and is killed (_exit) before its `n`-th
// step; the parent then sees what a crash there leaves.
TEST(AtomicPublish, AFolderPublicationKilledBeforeEachStepLeavesTheOldOrTheNewFolderAndTheSweepClearsTheRest) {
  // Steps of a replacing publication: sync files, rename (exchange), sync parent, remove replaced.
  // Writing each of the two files is a file publication of its own inside the staging folder (3
  // steps each), so the folder's steps are calls 7 to 10.
  for (int n = 1; n <= 11; ++n) {
    TempDir t;
    ASSERT_TRUE(publish_pair(t.path, "a1", "b1").ok());
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto count = std::make_shared<int>(0);
      set_publish_fault_hook([count, n](PublishStep, const std::string&) -> Status {
        if (++*count == n) ::_exit(7);
        return {};
      });
      ::_exit(publish_pair(t.path, "a2", "b2").ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), n <= 10 ? 7 : 0) << "call " << n;
    const std::string want = n <= 8 ? "<dir> a=a1 b=b1" : "<dir> a=a2 b=b2";  // the rename is call 8
    auto before = listing(t.path);
    EXPECT_EQ(before["adapter"], want) << "killed before call " << n;
    if (n <= 10) {
      EXPECT_EQ(before.size(), 2u) << "a staging folder is left before call " << n;
    }
    auto swept = sweep_staging(t.path);
    ASSERT_TRUE(swept.ok()) << swept.status().to_string();
    EXPECT_EQ(swept->removed.size(), before.size() - 1) << "call " << n;
    EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{{"adapter", want}})) << "after the sweep, call " << n;
  }
}

TEST(AtomicPublish, TheSweepPutsBackAVersionMovedAsideWhoseNameIsFreeAndDeletesOneWhoseNameIsTaken) {
  TempDir t;
  const std::string suffix = "-0123456789abcdef";
  fs::create_directories(t.path + "/.replaced-lost" + suffix);
  std::ofstream(t.path + "/.replaced-lost" + suffix + "/a") << "old";
  fs::create_directories(t.path + "/.staging-lost" + suffix);  // the new version, never renamed in
  fs::create_directories(t.path + "/kept");
  std::ofstream(t.path + "/kept/a") << "new";
  fs::create_directories(t.path + "/.replaced-kept" + suffix);
  fs::create_directories(t.path + "/.removed-gone" + suffix);
  // One level down: a staging file of a rewritten receipt, and a checkpoint being written.
  std::ofstream(t.path + "/kept/.staging-a" + suffix) << "half";
  fs::create_directories(t.path + "/kept/.staging-step-4" + suffix);
  std::ofstream(t.path + "/plain.txt") << "untouched";

  auto swept = sweep_staging(t.path);
  ASSERT_TRUE(swept.ok()) << swept.status().to_string();
  EXPECT_EQ(swept->restored, std::vector<std::string>{t.path + "/lost"});
  EXPECT_EQ(swept->removed.size(), 5u) << swept->summary();
  EXPECT_EQ(listing(t.path), (std::map<std::string, std::string>{
                                 {"kept", "<dir> a=new"}, {"lost", "<dir> a=old"}, {"plain.txt", "untouched"}}));
  EXPECT_TRUE(sweep_staging(t.path + "/missing").ok());
  EXPECT_EQ(sweep_staging(t.path)->summary(), "");
}

TEST(AtomicPublish, ARemovalKilledAfterItsRenameLeavesNoFolderAndTheSweepDeletesTheRest) {
  TempDir t;
  ASSERT_TRUE(publish_pair(t.path, "a1", "b1").ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    set_publish_fault_hook([](PublishStep step, const std::string&) -> Status {
      if (step == PublishStep::kRemoveReplaced) ::_exit(7);
      return {};
    });
    ::_exit(remove_published(t.path, "adapter").ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_EQ(WEXITSTATUS(status), 7);
  auto before = listing(t.path);
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(before.begin()->first.rfind(".removed-adapter-", 0), 0u) << before.begin()->first;
  ASSERT_TRUE(sweep_staging(t.path).ok());
  EXPECT_TRUE(listing(t.path).empty());
  EXPECT_EQ(remove_published(t.path, "adapter").code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kiln
