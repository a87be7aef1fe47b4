// The main() of every test binary. With KILN_EVIDENCE_DIR set, it also records each test's
// result, the commit compiled into this binary, the time, which devices were really present and
// the native switches set, as $KILN_EVIDENCE_DIR/<binary>.json (report/evidence_record.h): the
// evidence the capability report's gates are derived from.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "report/evidence_record.h"

namespace {

class EvidenceRecorder : public ::testing::EmptyTestEventListener {
 public:
  EvidenceRecorder(std::string dir, std::string binary) : dir_(std::move(dir)), binary_(std::move(binary)) {}

  void OnTestEnd(const ::testing::TestInfo& t) override {
    const auto* r = t.result();
    std::string state = r->Skipped() ? "skipped" : r->Passed() ? "passed" : "failed";
    tests_[std::string(t.test_suite_name()) + "." + t.name()] = state;
  }

  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    kiln::EvidenceRecord run = kiln::this_run(binary_);
    run.tests = std::move(tests_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/" + binary_ + ".json") << kiln::evidence_record_json(run).dump(1) << "\n";
  }

 private:
  std::string dir_, binary_;
  std::map<std::string, std::string> tests_;
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
