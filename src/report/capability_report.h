// `kiln capabilities`: the backend capability report, built from the live registry, the
// backends' own support predicates on representative requests of the served model's shapes,
// their immutable capabilities, the fallback counters, and the conformance gates' evidence.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config.h"
#include "report/backend_record.h"
#include "report/freshness.h"

namespace kiln {

struct ReportOptions {
  ModelConfig model;             // whose shapes the representative requests use
  std::string model_label;       // how the report names it ("qwen3.5-4b preset", a directory)
  std::string evidence_dir;      // committed test results (evidence/)
  std::string only_backend;      // empty: all
  bool canonical = false;        // leave out what differs between machines of the same build
  // The repository's history: which commit the report speaks for and what changed since each run's
  // commit. Null: no gate is covered, only stale or unknown.
  const SourceHistory* history = nullptr;
  // The qualification receipts as of the history's commit, as `kiln capabilities` lists them
  // ({"newest": [...], "without_receipt": [...]}); null leaves the section out.
  nlohmann::json receipts;
};

// A report built on a machine without a backend's device shows that backend's newest record
// (backend_record.h) made for the same model shapes, with its freshness, where one exists.
Result<nlohmann::json> build_capability_report(const ReportOptions& opts);
// `name`'s section of the report as this machine's device answers it, for `kiln capabilities --record`.
Result<BackendRecord> record_backend(const std::string& name, const ReportOptions& opts);
std::string render_markdown(const nlohmann::json& report);

}  // namespace kiln
