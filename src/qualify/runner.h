// `kiln qualify run`: binds a committed workload, one variant and its variables to this source
// tree, platform and model; runs the cases serially; and writes the evidence and a new receipt.
// Refusals (dirty tree, uncommitted workload, bad variables or output, existing receipt) are
// errors, and then nothing runs and no receipt is written.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "qualify/case_execution.h"
#include "qualify/sandbox.h"

namespace kiln::qualify {

struct RunRequest {
  std::string workload_path;
  std::string variant_id;
  std::string host_id;
  std::vector<std::pair<std::string, std::string>> variables;  // --var NAME=VALUE, in order given
  std::optional<std::string> model_dir;
  std::string model_id;                  // label; defaults to the model directory's name
  std::optional<std::string> output_path;  // default .qualification/receipts/<receipt id>.json
  std::vector<std::string> command;      // the invoking argv, recorded in the receipt
  RunnerLimits limits;
  // Processes and memory each case may use; the network is cut where the workload forbids it.
  SandboxPolicy sandbox;
};

struct RunOutcome {
  std::string verdict;  // passed | failed | skipped
  std::string receipt_path;  // absolute
  std::string run_dir;       // absolute
  std::string receipt_id;
};

Result<RunOutcome> run_workload(const RunRequest& request);

}  // namespace kiln::qualify
