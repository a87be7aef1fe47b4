// The capability report renders from the live registry, and the checked-in copy is fresh.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/native_switches.h"
#include "backend/registry.h"

namespace kiln {
namespace {

// Runs kiln with `args`, after `prefix` (an `env ...` changing its environment) when given.
std::pair<int, std::string> kiln_cmd(const std::string& args, const std::string& prefix = "") {
  std::string cmd = (prefix.empty() ? "" : prefix + " ") + std::string(KILN_BINARY_PATH) + " " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = p ? pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(Capabilities, ReportComesFromTheLiveRegistry) {
  auto [code, out] = kiln_cmd("capabilities --json --evidence " + std::string(KILN_SOURCE_DIR) + "/evidence");
  ASSERT_EQ(code, 0) << out;
  auto j = nlohmann::json::parse(out);
  std::vector<std::string> names;
  for (const auto& b : j["backends"]) names.push_back(b["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"cpu", "cuda", "vulkan", "rocm", "metal"}));
  const auto& cpu = j["backends"][0];
  EXPECT_EQ(cpu["status"], "evaluated");
  EXPECT_EQ(cpu["support_audit"]["mismatches"], 0);
  // The CPU answers for the 4B shapes: bf16 K/V is declined with its reason, the rest native.
  bool saw_bf16_kv_decline = false;
  for (const auto& s : cpu["facet_support"])
    if (s["facet"] == "attention" && s["request"].get<std::string>().find("kv=bf16") != std::string::npos) {
      EXPECT_EQ(s["support"], "declined");
      EXPECT_EQ(s["constraint"], "the cpu backend attends in f32");
      saw_bf16_kv_decline = true;
    }
  EXPECT_TRUE(saw_bf16_kv_decline);
  for (const auto& b : j["backends"]) {
    if (b["name"] == "rocm" || b["name"] == "metal") {
      EXPECT_EQ(b["status"], "not_built");
    }
    // Vulkan is built where libvulkan-dev and glslc were found, evaluated where a device is.
    if (b["name"] == "vulkan") {
      EXPECT_EQ(b["status"], !b["built"].get<bool>()                 ? "not_built"
                             : create_backend("vulkan").ok() ? "evaluated"
                                                             : "built, not evaluated");
    }
  }
  EXPECT_NE(j["read_this_first"].dump().find("contains no throughput figures"), std::string::npos);
  EXPECT_EQ(j["fallback_policy"][0]["decode_hot_path"], "correctness_allowed");
}

TEST(Capabilities, MarkdownListsOpenWorkBeforeTheTables) {
  auto [code, out] = kiln_cmd("capabilities --canonical --backend cpu --evidence /nonexistent");
  ASSERT_EQ(code, 0) << out;
  auto open = out.find("## Open coverage work"), backends = out.find("## Compiled backends");
  ASSERT_NE(open, std::string::npos);
  EXPECT_LT(open, backends);
  EXPECT_NE(out.find("| conformance gate | optimizer_parity (cpu) | pending"), std::string::npos) << out;
}

TEST(Capabilities, CheckedInReportIsFresh) {
  if (auto cuda = create_backend("cuda"); cuda.ok())
    GTEST_SKIP() << "SKIPPED: a CUDA device is present; the checked-in report is the CPU machine's rendering";
  for (const BackendEntry& e : backend_registry())
    if (e.name == "cuda" && !e.built)
      GTEST_SKIP() << "SKIPPED: CUDA is not compiled into this build (" << e.build_flags
                   << "); the checked-in report is the rendering of a build with it";
  // The checked-in report evaluates Vulkan on lavapipe, Mesa's CPU driver (what CI installs).
  for (const BackendEntry& e : backend_registry())
    if (e.name == "vulkan") {
      auto vk = create_backend("vulkan");
      if (!e.built || !vk.ok() || vk.value()->identity().device_name.find("(CPU,") == std::string::npos)
        GTEST_SKIP() << "SKIPPED: the checked-in report is the rendering of a build with Vulkan on lavapipe";
    }
  const std::string src = KILN_SOURCE_DIR;
  // The checked-in report is rendered with every native switch at its default, whatever this
  // process's environment sets.
  std::string unset;
  for (const NativeSwitch& s : native_switches()) unset += " -u " + std::string(switch_variable(s));
  auto [code, out] = kiln_cmd("capabilities --evidence " + src + "/evidence --check " + src + "/docs", "env" + unset);
  EXPECT_EQ(code, 0) << out;
}

TEST(Capabilities, TheReportListsEveryNativeSwitchWithTheValueInEffect) {
  auto [code, out] = kiln_cmd("capabilities --json --evidence /nonexistent", "env -u KILN_VULKAN_PROFILE KILN_CUDA_GEMV=0");
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["native_switches"].size(), native_switches().size());
  std::map<std::string, nlohmann::json> in_effect;
  for (const auto& s : j["native_switches"]) in_effect[s["variable"]] = s["in_effect"];
  EXPECT_EQ(in_effect.at("KILN_CUDA_GEMV"), "0");
  EXPECT_TRUE(in_effect.at("KILN_VULKAN_PROFILE").is_null());
  // Never into the checked-in report.
  auto [refused, why] = kiln_cmd("capabilities --evidence /nonexistent --write /nonexistent", "env KILN_CUDA_PDL=0");
  EXPECT_NE(refused, 0);
  EXPECT_NE(why.find("native switches are set (KILN_CUDA_PDL=0)"), std::string::npos) << why;
}

}  // namespace
}  // namespace kiln
