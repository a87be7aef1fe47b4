// A backend's section of the capability report, recorded where its device is present
// (`kiln capabilities --backend NAME --record FILE`, kept as evidence/<folder>/backend-NAME.json),
// so that a report generated on a machine without that device shows what the backend reported
// there (capabilities, facet support, support audit, fallback policy) with the run's build and
// freshness, instead of "built, not evaluated".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "report/evidence_record.h"

namespace kiln {

inline constexpr std::string_view kBackendRecordSchema = "kiln.backend-record/1";

struct BackendRecord {
  std::string path;              // where it was read from (relative to the repository when committed)
  EvidenceRecord run;            // the binary that recorded it: build, time, devices present, switches; no tests
  std::string backend;           // whose section it is
  std::string model_shapes;      // the report's model_shapes when recorded (facet support depends on it)
  nlohmann::json section;        // the backend's report entry: capabilities, facet_support, support_audit
  nlohmann::json fallback_policy;  // its fallback_policy row
};

bool is_backend_record(const nlohmann::json& j);
nlohmann::json backend_record_json(const BackendRecord& r);
// Errors name `where` and the field at fault.
Result<BackendRecord> parse_backend_record(const nlohmann::json& j, const std::string& where);
// Every backend record under `dir` (test evidence beside them is skipped).
Result<std::vector<BackendRecord>> load_backend_records(const std::string& dir);

}  // namespace kiln
