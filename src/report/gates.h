// Conformance gates as data: what each gate requires, the exact command that proves it, the
// tests behind it per backend, the source paths those tests cover, and a status derived only from
// recorded test results (evidence files written by the test binaries) and how fresh they are at
// the report's commit, never from the existence of files.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "report/evidence_record.h"
#include "report/freshness.h"

namespace kiln {

// kStale: every test passed, but in runs that do not speak for the report's commit (code they cover
// changed since, or the binary was unstamped or modified); kUnknown: every test passed, and whether
// the runs are fresh cannot be told (no git history, a commit this repository lacks).
enum class GateState : uint8_t { kCovered, kStale, kUnknown, kPartial, kPending, kNotApplicable };
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
  // Source the tests rest on beyond each backend's own folder, the shared backend files and core
  // (gate_source_paths), as git glob pathspecs under src/; the mirrored tests/ paths are added.
  std::vector<std::string> covers;
  // Whether its tests read kRunTimeTestData; the other gates' evidence outlives changes to it.
  bool reads_run_time_data = false;
};

// What test binaries read from the checkout when they run, compiled into none of them (a glob):
// the latency thresholds locked on each device. scripts/run-test-binaries leaves the same folder
// out of its build stamps.
inline constexpr const char* kRunTimeTestData = "tests/backend/cuda/latency_thresholds/**";

const std::vector<Gate>& conformance_gates();

// The git glob pathspecs of a backend's own code: the backend layer's shared files and the
// backend's folder. A recorded backend section is stale after changes to these.
std::vector<std::string> backend_source_paths(const std::string& backend);

// The git glob pathspecs whose changes make a run's evidence for this gate and backend stale:
// core, backend_source_paths, the gate's covers, and their tests/ mirrors; then, unless the gate
// reads it, "!" and kRunTimeTestData.
std::vector<std::string> gate_source_paths(const Gate& gate, const std::string& backend);

// One test binary's recorded run, and where it was read from.
struct EvidenceFile {
  std::string path;  // as given to the loader (relative to the repository when committed)
  EvidenceRecord record;
};

// Reads every *.json under `dir` (missing dir: no evidence). Malformed files are errors.
Result<std::vector<EvidenceFile>> load_evidence(const std::string& dir);

struct GateStatus {
  GateState state = GateState::kPending;
  std::string reason;
  std::string command;                  // what re-verifies it
  std::vector<std::string> evidence;    // files whose results were used
  // CUDA targets (EvidenceDevice::target), or Vulkan devices with their drivers
  // (EvidenceDevice::device), on which every test passed; " (stale)" or " (unknown)" follows one
  // whose freshest runs are not fresh
  std::vector<std::string> targets;
};

// Each test's proof is its freshest passing run with the backend present; `history` (may be null:
// nothing is then fresh) decides freshness for gate_source_paths.
GateStatus evaluate_gate(const Gate& gate, const GateBackend& backend, const std::vector<EvidenceFile>& evidence,
                         const SourceHistory* history);

// The command that runs exactly these tests for this backend.
std::string gate_command(const GateBackend& backend);

}  // namespace kiln
