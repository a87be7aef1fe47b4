// The main() of every test binary. With KILN_EVIDENCE_DIR set, it also records each test's
// result, the commit compiled into this binary, the time, which devices were really present and
// the native switches set, as $KILN_EVIDENCE_DIR/<binary>.json (report/evidence_record.h): the
// evidence the capability report's gates are derived from.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/native_switches.h"
#include "core/build_stamp.h"
#include "report/evidence_record.h"

namespace {

class EvidenceRecorder : public ::testing::EmptyTestEventListener {
 public:
  EvidenceRecorder(std::string dir, std::string binary) : dir_(std::move(dir)) { record_.binary = std::move(binary); }

  void OnTestEnd(const ::testing::TestInfo& t) override {
    const auto* r = t.result();
    std::string state = r->Skipped() ? "skipped" : r->Passed() ? "passed" : "failed";
    record_.tests[std::string(t.test_suite_name()) + "." + t.name()] = state;
  }

  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    const kiln::BuildStamp stamp = kiln::build_stamp();
    record_.commit = std::string(stamp.commit);
    record_.dirty = stamp.dirty;
    record_.stamped = true;
    char when[32];
    std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    record_.timestamp = when;
    record_.devices = kiln::present_devices();
    record_.switches = kiln::native_switches_in_effect();
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/" + record_.binary + ".json") << kiln::evidence_record_json(record_).dump(1) << "\n";
  }

 private:
  std::string dir_;
  kiln::EvidenceRecord record_;
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
