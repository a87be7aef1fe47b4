// TempDir: a fresh private folder under the temporary directory, gone with its contents when the
// object is, and owned by exactly one object after a move.
#include "core/temp_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(TempDir, IsAFreshPrivateFolderRemovedWithItsContents) {
  std::string path;
  {
    auto a = TempDir::create("kiln-temp-dir-test");
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    auto b = TempDir::create("kiln-temp-dir-test");
    ASSERT_TRUE(b.ok());
    path = a->path();
    EXPECT_NE(a->path(), b->path());
    EXPECT_EQ(fs::path(path).parent_path(), fs::temp_directory_path());
    EXPECT_EQ(fs::path(path).filename().string().rfind("kiln-temp-dir-test-", 0), 0u) << path;
    struct stat st{};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    fs::create_directories(path + "/adapters/x");
    std::ofstream(path + "/adapters/x/weights.bin") << "w";
  }
  EXPECT_FALSE(fs::exists(path)) << path;
}

TEST(TempDir, AMoveHandsTheFolderOnAndTheSourceRemovesNothing) {
  std::optional<TempDir> keeper;
  std::string path;
  {
    auto made = TempDir::create("kiln-temp-dir-test");
    ASSERT_TRUE(made.ok());
    path = made->path();
    TempDir moved = std::move(*made);
    EXPECT_TRUE(made->path().empty());
    keeper.emplace(std::move(moved));
  }
  EXPECT_TRUE(fs::is_directory(path)) << "removed by a moved-from object";
  auto other = TempDir::create("kiln-temp-dir-test");
  ASSERT_TRUE(other.ok());
  const std::string other_path = other->path();
  *keeper = std::move(*other);  // the assignment removes the folder it held
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(keeper->path(), other_path);
  keeper.reset();
  EXPECT_FALSE(fs::exists(other_path));
}

}  // namespace
}  // namespace kiln
