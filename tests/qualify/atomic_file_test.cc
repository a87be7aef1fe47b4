// Receipts are published atomically and an existing file is never replaced.
#include <gtest/gtest.h>

#include <filesystem>

#include "qualify/atomic_file.h"
#include "qualify/workload_fixtures.h"

namespace kiln::qualify {
namespace {

TEST(AtomicFile, WritesOnceAndNeverOverwrites) {
  char tmpl[] = "/tmp/kiln-atomic-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string path = dir + "/receipt.json";
  ASSERT_TRUE(write_new_file_atomically(path, "first").ok());
  EXPECT_EQ(testing::read_text(path), "first");
  Status again = write_new_file_atomically(path, "second");
  EXPECT_EQ(again.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("already exists"), std::string::npos);
  EXPECT_EQ(testing::read_text(path), "first");
  // No temporary file is left behind by either call.
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 1u);
  std::filesystem::remove_all(dir);
}

TEST(AtomicFile, MissingDirectoryIsAnIoError) {
  Status s = write_new_file_atomically("/nonexistent-kiln-dir/r.json", "x");
  EXPECT_EQ(s.code(), ErrorCode::kIoError);
}

}  // namespace
}  // namespace kiln::qualify
