// Whether a receipt still speaks for the source: no file its workload runs (the workload's
// `inputs`, and the workload file itself) changed after the receipt's commit. A newer receipt
// of the same workload, variant and host supersedes an older one, which is kept as a record.
#pragma once

#include <string>
#include <vector>

#include "qualify/git_repo.h"
#include "qualify/receipt.h"

namespace kiln::qualify {

enum class ReceiptCurrency { kCurrent, kStale, kUnknown };
const char* currency_name(ReceiptCurrency c);  // current | stale | unknown

struct ReceiptFreshness {
  ReceiptCurrency state = ReceiptCurrency::kUnknown;
  std::string why;                   // empty when current
  std::vector<std::string> changed;  // the inputs that changed, when stale for that reason
};

// Where the workload a receipt names lives: qualification/workloads/<id>.json, or, for a workload
// no longer run, qualification/workloads/retired/<id>.json (its bytes kept for its receipts).
// Relative to the repository root; empty when neither exists.
std::string workload_file(const GitRepo& repo, const std::string& workload_id);
bool is_retired_workload(const std::string& relative_path);

// Compared with `until` (a commit), or with the worktree when `until` is empty.
ReceiptFreshness receipt_freshness(const Receipt& r, const GitRepo& repo, const std::string& until = "");

// Recorded on a machine without a GPU (the CPU backend, or Vulkan on Mesa's llvmpipe): the kind
// of receipt the CPU-only CI machine can renew, and so must keep current.
bool recorded_without_gpu(const Receipt& r);

}  // namespace kiln::qualify
