// The main() of every test binary. With KILN_EVIDENCE_DIR set, it also records each test's
// result, the commit, the time and which devices were really present, as
// $KILN_EVIDENCE_DIR/<binary>.json: the evidence the capability report's gates are derived from.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/registry.h"

namespace {

std::string command_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

class EvidenceRecorder : public ::testing::EmptyTestEventListener {
 public:
  EvidenceRecorder(std::string dir, std::string binary) : dir_(std::move(dir)), binary_(std::move(binary)) {}

  void OnTestEnd(const ::testing::TestInfo& t) override {
    const auto* r = t.result();
    std::string state = r->Skipped() ? "skipped" : r->Passed() ? "passed" : "failed";
    results_[std::string(t.test_suite_name()) + "." + t.name()] = state;
  }

  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    const std::string src = KILN_SOURCE_DIR;
    std::string commit = command_output("git -C '" + src + "' rev-parse --short=12 HEAD 2>/dev/null");
    if (commit.empty()) {
      // A copy of the tree without its repository (the accelerator machine): the caller names
      // the commit it copied.
      const char* given = std::getenv("KILN_COMMIT");
      commit = given ? std::string(given) + " (given)" : "unknown";
    } else if (!command_output("git -C '" + src + "' status --porcelain --untracked-files=no -- src tests 2>/dev/null")
                    .empty()) {
      commit += "+modified";
    }
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    nlohmann::json host = {{"cuda_device", nullptr}};
    if (auto cuda = kiln::create_backend("cuda"); cuda.ok()) {
      host["cuda_device"] = cuda.value()->identity().device_name;
      // "+ PTX JIT" where the driver compiled the kernels from the embedded PTX (no machine code for
      // this device in the build, or CUDA_FORCE_PTX_JIT=1).
      const kiln::BackendCapabilities& c = cuda.value()->capabilities();
      host["cuda_target"] = c.compute.target + (c.startup.precompiles_kernels ? "" : " + PTX JIT");
    }
    // The Vulkan device and its driver (evidence stands apart by driver: lavapipe, NVIDIA, ...).
    if (auto vk = kiln::create_backend("vulkan"); vk.ok()) host["vulkan_device"] = vk.value()->identity().device_name;
    nlohmann::json j = {{"schema", "kiln.test-evidence/1"}, {"binary", binary_}, {"commit", commit},
                        {"timestamp_utc", stamp}, {"host", host}, {"tests", results_}};
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/" + binary_ + ".json") << j.dump(1) << "\n";
  }

 private:
  std::string dir_, binary_;
  std::map<std::string, std::string> results_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* dir = std::getenv("KILN_EVIDENCE_DIR"); dir && *dir) {
    std::string binary = std::filesystem::path(argv[0]).filename().string();
    ::testing::UnitTest::GetInstance()->listeners().Append(new EvidenceRecorder(dir, binary));
  }
  return RUN_ALL_TESTS();
}
