// The tuning switches are listed once (tuning_switches.cc): docs/cuda.md holds the table that list
// renders, and every KILN_CUDA_* variable the backend's switch readers name is in the list.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "backend/cuda/tuning_switches.h"

namespace kiln::cuda {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TuningSwitches, DocsHoldTheTableTheListRenders) {
  const std::string doc = read(std::string(KILN_SOURCE_DIR) + "/docs/cuda.md");
  const std::string begin = "<!-- switches:begin", end = "<!-- switches:end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/cuda.md has no switches:begin marker";
  ASSERT_NE(e, std::string::npos) << "docs/cuda.md has no switches:end marker";
  const size_t first = doc.find('\n', b) + 1;
  EXPECT_EQ(doc.substr(first, e - first), tuning_switches_markdown())
      << "docs/cuda.md's switch table differs from tuning_switches.cc; between the markers it should read:\n"
      << tuning_switches_markdown();
}

TEST(TuningSwitches, EveryVariableTheReadersNameIsListedOnce) {
  std::set<std::string> listed;
  for (const TuningSwitch& s : tuning_switches())
    EXPECT_TRUE(listed.insert(std::string(switch_variable(s))).second) << s.setting << " is listed twice";
  // The reader: tuning.h, which reads each once.
  std::set<std::string> read_by_code;
  const std::regex quoted("\"(KILN_CUDA_[A-Z0-9_]+)\"");
  const std::string text = read(std::string(KILN_SOURCE_DIR) + "/src/backend/cuda/tuning.h");
  ASSERT_FALSE(text.empty());
  for (std::sregex_iterator it(text.begin(), text.end(), quoted), stop; it != stop; ++it) read_by_code.insert((*it)[1]);
  EXPECT_EQ(listed, read_by_code);
  EXPECT_GE(read_by_code.size(), 10u);  // the reader was found and parsed
}

}  // namespace
}  // namespace kiln::cuda
