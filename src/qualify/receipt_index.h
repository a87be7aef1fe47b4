// The committed receipts as a whole (qualification/receipts/): for each workload, variant and
// host the newest receipt and whether it is current, and each variant of a workload still run
// (qualification/workloads/, not retired/) that has no receipt at all.
#pragma once

#include <string>
#include <vector>

#include "qualify/git_repo.h"
#include "qualify/receipt_freshness.h"

namespace kiln::qualify {

struct ReceiptStanding {
  std::string file;  // relative to the repository root
  std::string workload_id, variant, host_id, backend, device, verdict, commit;
  bool without_gpu = false;  // recorded_without_gpu
  ReceiptFreshness freshness;
  int older = 0;  // older receipts of the same workload, variant and host, kept as records
};

struct ReceiptIndex {
  std::vector<ReceiptStanding> newest;  // sorted by workload, variant, host
  std::vector<std::string> unreceipted;  // "workload/variant (backend)" with no receipt
  std::vector<std::string> invalid;      // "file: problems" for receipts that do not validate
};

// `until`: a commit to judge freshness at, or empty for the worktree. With a commit, receipts
// recorded at commits that are not it or its ancestors are left out: the index speaks for that
// commit, so receipts recorded later do not change it.
Result<ReceiptIndex> index_receipts(const GitRepo& repo, const std::string& until = "");

// What the CPU-only CI machine must keep true: every receipt recorded without a GPU that is the
// newest of its kind passed and is current, every cpu variant of a workload still run has one, and
// every receipt validates. One line per breach; empty when all hold.
std::vector<std::string> cpu_receipt_breaches(const ReceiptIndex& index, const GitRepo& repo);

}  // namespace kiln::qualify
