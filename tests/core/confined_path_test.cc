#include "core/confined_path.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/names.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class ConfinedPath : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kiln-confined-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "data" / "sub");
    std::ofstream(root_ / "data" / "train.jsonl") << "{\"a\": 1}\n";
    std::ofstream(root_ / "data" / "sub" / "more.jsonl") << "{}\n";
    std::ofstream(root_ / "secret.txt") << "outside\n";
    fs::create_symlink(root_ / "secret.txt", root_ / "data" / "link-out");
    fs::create_symlink(root_ / "data" / "train.jsonl", root_ / "data" / "link-in");
    ::mkfifo((root_ / "data" / "fifo").c_str(), 0600);
    folder_ = {(root_ / "data").string(), "training.data_dir"};
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_;
  ConfinedFolder folder_;
};

TEST_F(ConfinedPath, FilesInsideTheFolderResolveByRelativeOrAbsolutePath) {
  auto a = confined_file(folder_, "train.jsonl", "dataset_path", 1 << 20);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(*a, fs::canonical(root_ / "data" / "train.jsonl").string());
  EXPECT_TRUE(confined_file(folder_, (root_ / "data" / "sub" / "more.jsonl").string(), "dataset_path", 1 << 20).ok());
  EXPECT_TRUE(confined_file(folder_, "link-in", "dataset_path", 1 << 20).ok());  // a link that stays inside
  EXPECT_TRUE(confined_dir(folder_, "sub", "path").ok());
}

TEST_F(ConfinedPath, EveryWayOutIsRefusedNamingTheField) {
  struct Case {
    std::string path;
    ErrorCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {(root_ / "secret.txt").string(), ErrorCode::kInvalidArgument, "is outside training.data_dir"},
      {"../secret.txt", ErrorCode::kInvalidArgument, "holds '..'"},
      {"sub/../../secret.txt", ErrorCode::kInvalidArgument, "holds '..'"},
      {"link-out", ErrorCode::kInvalidArgument, "is outside training.data_dir"},
      {"/dev/zero", ErrorCode::kInvalidArgument, "is outside"},
      {"/etc/passwd", ErrorCode::kInvalidArgument, "is outside"},
      {"fifo", ErrorCode::kInvalidArgument, "is not a regular file"},
      {"sub", ErrorCode::kInvalidArgument, "is not a regular file (it is a folder)"},
      {"absent.jsonl", ErrorCode::kNotFound, "nothing there"},
      {"/nowhere/absent.jsonl", ErrorCode::kInvalidArgument, "is outside"},
      {"", ErrorCode::kInvalidArgument, "dataset_path is empty"},
      {std::string("a\0b", 3), ErrorCode::kInvalidArgument, "NUL"},
  };
  for (const Case& c : cases) {
    auto r = confined_file(folder_, c.path, "dataset_path", 1 << 20);
    ASSERT_FALSE(r.ok()) << c.path;
    EXPECT_EQ(r.status().code(), c.code) << c.path << ": " << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.path << ": " << r.status().message();
    if (!c.path.empty()) EXPECT_EQ(r.status().message().rfind("dataset_path '", 0), 0u) << r.status().message();
  }
  EXPECT_FALSE(confined_dir(folder_, folder_.path, "path").ok()) << "the folder itself is not inside it";
  EXPECT_FALSE(confined_dir(folder_, "train.jsonl", "path").ok());
}

TEST_F(ConfinedPath, AFileOverTheCapIsRefusedWithItsSize) {
  auto r = confined_file(folder_, "train.jsonl", "dataset_path", 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is 9 bytes; at most 4 are read"), std::string::npos) << r.status().message();
}

TEST(FolderNames, StartWithALetterOrDigitAndHoldNoSeparator) {
  for (const char* ok : {"a", "Z9", "my-adapter_v1.2", "0day"}) EXPECT_TRUE(check_folder_name("adapter name", ok).ok()) << ok;
  for (const char* bad : {"", ".", "..", ".staging-x", "-x", "_x", "a/b", "a b", "a\\b"})
    EXPECT_FALSE(check_folder_name("adapter name", bad).ok()) << bad;
  EXPECT_FALSE(check_folder_name("suite name", std::string(65, 'a')).ok());
  EXPECT_EQ(check_folder_name("suite name", ".x").message(), "suite name '.x' must start with a letter or a digit");
  EXPECT_TRUE(is_reserved_adapter_name("job.checkpoints"));
  EXPECT_TRUE(is_reserved_adapter_name("post-eval.mine"));
  EXPECT_FALSE(is_reserved_adapter_name("checkpoints"));
  EXPECT_FALSE(is_reserved_adapter_name("post-evaluation"));
}

}  // namespace
}  // namespace kiln
