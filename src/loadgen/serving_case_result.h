// The case-result document (docs/qualification.md, "The case-result protocol") for one serving
// case: what `kiln bench serve` writes to KILN_QUALIFICATION_CASE_RESULT. The runner does not
// tell a command its case id or effective configuration; the caller derives them from its own
// arguments (serving_case_id, and the backend, weight dtype and prompt set it ran).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "loadgen/load_generator.h"

namespace kiln::loadgen {

// One metric of a case result: {"name", "value", "unit"}.
nlohmann::json case_metric(const std::string& name, double value, const std::string& unit);

// A case result of any command: schema_version 1, the case id, "passed" or "failed", the
// duration, the effective config, `metrics` (case_metric entries) sorted by name, no
// tolerances, and `details`.
nlohmann::json case_result(const std::string& case_id, bool passed, double duration_seconds,
                           nlohmann::json effective_config, nlohmann::json metrics, nlohmann::json details);

// "serve-c<concurrency>", the id the serving workloads give the case at that concurrency.
std::string serving_case_id(int64_t concurrency);

// Passed when at least one request ran, none failed and every one reported an output token.
bool serving_case_passed(const LoadResult& r);

// schema_version 1, the case id, status, duration, the effective config, and the metrics the
// serving workloads declare (the runner adds case_pass itself), sorted by name:
// inter_token_latency_p50_ms, inter_token_latency_p99_ms (ms), output_tokens_per_second (tok/s),
// ttft_p50_ms, ttft_p99_ms (ms); a latency with no samples is 0 (the status is then failed).
// `details` holds load_result_json(r).
nlohmann::json serving_case_result(const LoadResult& r, const std::string& case_id, const nlohmann::json& effective_config);

// `doc` as indented JSON text with every floating-point number in its shortest round-tripping
// form (what the qualification runner's strict reader requires).
std::string canonical_json_text(const nlohmann::json& doc);
// Writes the document (canonical_json_text) to `path`; the error names the path.
Status write_case_result(const std::string& path, const nlohmann::json& doc);

}  // namespace kiln::loadgen
