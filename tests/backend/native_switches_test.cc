// The native switches are listed once (backend/native_switches.cc): every KILN_ (and CUDA_)
// variable a backend reads is in the list and nothing else is, docs/cuda.md holds the table the
// CUDA rows render, and what is in effect is what the environment sets.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "backend/native_switches.h"

namespace kiln {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(NativeSwitches, EveryVariableTheBackendsReadIsListedOnce) {
  std::set<std::string> listed;
  for (const NativeSwitch& s : native_switches())
    EXPECT_TRUE(listed.insert(std::string(switch_variable(s))).second) << s.setting << " is listed twice";
  // A variable's name as a whole string literal is how every reader names it (getenv("..."), or a
  // constant passed to it); names inside messages and comments are not whole literals.
  const std::regex literal("\"((KILN|CUDA)_[A-Z0-9_]+)\"");
  std::set<std::string> read_by_code;
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(KILN_SOURCE_DIR) + "/src/backend")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh")) continue;
    if (e.path().filename() == "native_switches.cc") continue;  // the list itself
    ++files;
    const std::string text = read(e.path().string());
    for (std::sregex_iterator it(text.begin(), text.end(), literal), stop; it != stop; ++it) read_by_code.insert((*it)[1]);
  }
  ASSERT_GT(files, 50u) << "the backend sources were not found";
  EXPECT_EQ(listed, read_by_code);
}

TEST(NativeSwitches, DocsHoldTheTableTheCudaRowsRender) {
  const std::string doc = read(std::string(KILN_SOURCE_DIR) + "/docs/cuda.md");
  const std::string begin = "<!-- switches:begin", end = "<!-- switches:end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/cuda.md has no switches:begin marker";
  ASSERT_NE(e, std::string::npos) << "docs/cuda.md has no switches:end marker";
  const size_t first = doc.find('\n', b) + 1;
  EXPECT_EQ(doc.substr(first, e - first), native_switches_markdown("cuda"))
      << "docs/cuda.md's switch table differs from native_switches.cc; between the markers it should read:\n"
      << native_switches_markdown("cuda");
}

TEST(NativeSwitches, EachIsAuditedOrSaysWhyNot) {
  for (const NativeSwitch& s : native_switches()) {
    if (switch_audit_values(s).empty())
      EXPECT_NE(s.effect.find("not audited"), std::string_view::npos) << s.setting;
    else
      EXPECT_EQ(s.effect.find("not audited"), std::string_view::npos) << s.setting;
  }
  const NativeSwitch* target = nullptr;
  for (const NativeSwitch& s : native_switches())
    if (switch_variable(s) == "KILN_CUDA_TARGET") target = &s;
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(switch_audit_values(*target), (std::vector<std::string>{"sm80", "sm86", "sm89", "sm120"}));
}

TEST(NativeSwitches, InEffectAreTheListedVariablesSetNonEmpty) {
  ::setenv("KILN_VULKAN_PROFILE", "1", 1);
  ::setenv("KILN_CUDA_GRAPHS", "", 1);
  ::setenv("KILN_NOT_A_SWITCH", "1", 1);
  const std::map<std::string, std::string> on = native_switches_in_effect();
  ::unsetenv("KILN_VULKAN_PROFILE");
  ::unsetenv("KILN_CUDA_GRAPHS");
  ::unsetenv("KILN_NOT_A_SWITCH");
  EXPECT_EQ(on.count("KILN_VULKAN_PROFILE"), 1u);
  EXPECT_EQ(on.at("KILN_VULKAN_PROFILE"), "1");
  EXPECT_EQ(on.count("KILN_CUDA_GRAPHS"), 0u) << "an empty value leaves the default";
  EXPECT_EQ(on.count("KILN_NOT_A_SWITCH"), 0u);
}

}  // namespace
}  // namespace kiln
