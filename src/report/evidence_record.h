// One test binary's recorded run (evidence/<folder>/<binary>.json), written by every test binary's
// main when KILN_EVIDENCE_DIR is set and read by the capability report: which build ran (the
// commit compiled into the binary), on which devices and drivers, and each test's result.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

inline constexpr std::string_view kEvidenceSchema = "kiln.test-evidence/2";
// Written before binaries carried their commit: its commit was git's at test time or an operator's.
inline constexpr std::string_view kUnstampedEvidenceSchema = "kiln.test-evidence/1";

// A backend that was really present in the run.
struct EvidenceDevice {
  std::string backend;  // cpu | cuda | vulkan
  std::string device;   // the backend's own description of it (emulation and memory limits included)
  std::string driver;   // the driver's name and version where the backend can tell; "" otherwise
  // What the kernels were chosen for: "sm_90a", "sm_86 (emulated on sm_90)", "+ PTX JIT" when the
  // driver compiled them from the embedded PTX; "" on the CPU and Vulkan.
  std::string target;
};

struct EvidenceRecord {
  std::string binary;
  std::string commit;     // the binary's build commit (40 hex) or "unknown"; unstamped: what was recorded
  bool dirty = false;     // the binary was built from a tree that differed from `commit`
  bool stamped = false;   // false: an unstamped record (kUnstampedEvidenceSchema)
  std::string timestamp;  // UTC, RFC 3339
  std::vector<EvidenceDevice> devices;
  std::map<std::string, std::string> switches;  // the native switches set in the run (backend/native_switches.h)
  std::map<std::string, std::string> tests;     // gtest full name -> passed | failed | skipped

  const EvidenceDevice* device(std::string_view backend) const;  // nullptr when it was not present
};

nlohmann::json evidence_record_json(const EvidenceRecord& r);
// Either schema; errors name `where` and the field at fault.
Result<EvidenceRecord> parse_evidence_record(const nlohmann::json& j, const std::string& where);

// Every backend of the registry that can be created here, as the record lists it.
std::vector<EvidenceDevice> present_devices();

// A record of a run of this binary, now: its build stamp, the time, the devices present and the
// native switches set; no tests yet.
EvidenceRecord this_run(std::string binary);

// Every *.json file under `dir` (missing dir: none), sorted by path, each with its path relative
// to the parent of `dir` (the repository, for committed evidence) so that a report reads the same
// wherever it is generated. A file that is not JSON is an error naming it.
struct JsonFile {
  std::string where;
  nlohmann::json value;
};
Result<std::vector<JsonFile>> read_json_tree(const std::string& dir);

}  // namespace kiln
