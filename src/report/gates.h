// Conformance gates as data: what each gate requires, the exact command that proves it, the
// tests behind it per backend, and a status derived only from recorded test results
// (evidence files written by the test binaries), never from the existence of files.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

enum class GateState : uint8_t { kCovered, kPartial, kPending, kNotApplicable };
std::string_view gate_state_name(GateState s);

struct GateBackend {
  std::string backend;
  std::vector<std::string> tests;  // gtest full names that must pass; empty: no test yet
  std::string not_applicable;      // non-empty: the gate does not apply to this backend, and why
};

struct Gate {
  std::string name;
  std::string requirement;
  std::vector<GateBackend> backends;
};

const std::vector<Gate>& conformance_gates();

// One test binary's recorded run (tests/evidence_main.cc writes them).
struct EvidenceFile {
  std::string path;  // as given to the loader (relative to the repository when committed)
  std::string binary, commit, timestamp;
  std::string cuda_device;  // empty when no CUDA device was present
  // What the CUDA kernels were chosen for in that run ("sm_90a", "sm_86 (emulated on sm_90)",
  // "+ PTX JIT" when the driver compiled every kernel from the embedded PTX); empty in files
  // written before the field existed, and where no CUDA device was present.
  std::string cuda_target;
  std::string vulkan_device;  // "<name> (<type>, <driver>)"; empty when no Vulkan device was present
  std::map<std::string, std::string> tests;  // name -> passed | failed | skipped
};

// Reads every *.json under `dir` (missing dir: no evidence). Malformed files are errors.
Result<std::vector<EvidenceFile>> load_evidence(const std::string& dir);

struct GateStatus {
  GateState state = GateState::kPending;
  std::string reason;
  std::string command;                  // what re-verifies it
  std::vector<std::string> evidence;    // files whose results were used
  // CUDA targets (EvidenceFile::cuda_target), or Vulkan devices and drivers
  // (EvidenceFile::vulkan_device), on which every test passed
  std::vector<std::string> targets;
};

GateStatus evaluate_gate(const Gate& gate, const GateBackend& backend, const std::vector<EvidenceFile>& evidence);

// The command that runs exactly these tests for this backend.
std::string gate_command(const GateBackend& backend);

}  // namespace kiln
