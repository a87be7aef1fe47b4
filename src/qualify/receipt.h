// A qualification receipt: the closed record of one run (source, platform, model, workload,
// results, artifacts) and the checks that make it trustworthy to read: shape, timestamps,
// verdict consistency and, on request, agreement with the local checkout.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qualify/issues.h"
#include "qualify/strict_json.h"

namespace kiln::qualify {

struct ReceiptMetric {
  std::string name;
  JsonValue value;  // a number, or a boolean for unit "bool"
  std::string unit;
  std::string aggregation;
  std::optional<bool> lower_is_better;
};

struct ReceiptResult {
  std::string id;
  bool required = true;
  std::string status;  // passed | failed | skipped
  double duration_seconds = 0;
  std::vector<ReceiptMetric> metrics;
  const ReceiptMetric* find_metric(const std::string& name) const;
};

struct ReceiptArtifact {
  std::string kind;
  std::string location;  // "local": path is relative to the repository root
  std::string path;
  std::string sha256;
  uint64_t bytes = 0;
};

// The typed view of a receipt that validation and comparison use; `document` keeps the rest.
struct Receipt {
  std::string receipt_id;
  std::string created_at_utc;
  std::string tree_hash;
  std::string git_commit;
  bool git_worktree_clean = false;
  std::string kind, backend, profile, verdict, started_at_utc, finished_at_utc;
  double duration_seconds = 0;
  std::string host_id;
  JsonValue os, host, device, runtime, compiler;  // environment sub-objects
  JsonValue model;                                 // null, or the model identity object
  std::string workload_id, workload_sha256;
  JsonValue seed, parameters;
  JsonValue effective_config;
  std::vector<ReceiptResult> results;
  std::vector<ReceiptArtifact> artifacts;
  size_t unsupported_count = 0;
  // How the cases were confined (schema_version 2; null in version 1 receipts, written before
  // sandboxing): network, processes, memory, each {limit, enforcement, reason}.
  JsonValue sandbox;
  JsonValue document;

  const ReceiptResult* find_result(const std::string& id) const;
};

struct ReceiptCheck {
  Receipt receipt;
  Issues issues;
};

// Shape, formats, timestamps ordered, duration consistent, verdict consistent with results.
ReceiptCheck check_receipt_text(std::string_view text);
// The same for a file; not_found when it cannot be read.
Result<ReceiptCheck> check_receipt_file(const std::string& path);

struct ReceiptRequirements {
  bool current_source = false;   // nothing its workload runs changed since (receipt_freshness.h)
  bool local_artifacts = false;  // every local artifact exists with the recorded sha256 and size
  bool known_commit = false;     // git_commit is a commit of this repository
  bool enforced = false;         // the cases ran without network, in a namespace of their own
};

// Checks against the repository containing `repo_path`; issues name the receipt's JSON paths.
void check_receipt_requirements(const Receipt& r, const ReceiptRequirements& req, const std::string& repo_path,
                                Issues& issues);

}  // namespace kiln::qualify
