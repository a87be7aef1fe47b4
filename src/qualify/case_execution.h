// Executes one case of a variant, every repetition, and turns the raw outcomes into the
// receipt's result row: exit codes, deadlines, capture limits, leftover descendants, output
// assertions and the command's case-result document all decide whether it passed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qualify/sandbox.h"
#include "qualify/strict_json.h"
#include "qualify/workload.h"

namespace kiln::qualify {

struct RunnerLimits {
  uint64_t capture_limit_bytes = 8u << 20;  // per stream per repetition
  double interrupt_grace_seconds = 5;
  double terminate_grace_seconds = 5;
};

struct CaseContext {
  const Workload* workload = nullptr;
  const Variant* variant = nullptr;
  std::string repo_root;  // absolute
  std::string run_dir;    // absolute: .qualification/runs/<id>
  std::map<std::string, std::string> placeholders;  // variables, seed, model_path
  RunnerLimits limits;
  const SandboxPlan* sandbox = nullptr;  // how every repetition's processes are confined
};

struct EvidenceFile {
  std::string kind;  // stdout | stderr | outcome | case_result | evidence
  std::string path;  // absolute
};

struct CaseRun {
  JsonValue result;  // one entry of the receipt's results[]
  bool passed = false;
  std::vector<EvidenceFile> evidence;
};

CaseRun execute_case(const CaseContext& ctx, const WorkloadCase& c);

}  // namespace kiln::qualify
