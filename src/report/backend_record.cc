#include "report/backend_record.h"

namespace kiln {

using nlohmann::json;

bool is_backend_record(const json& j) {
  return j.is_object() && j.contains("schema") && j["schema"] == std::string(kBackendRecordSchema);
}

json backend_record_json(const BackendRecord& r) {
  // The run's fields as test evidence writes them (without tests), under this schema.
  json j = evidence_record_json(r.run);
  j.erase("tests");
  j["schema"] = std::string(kBackendRecordSchema);
  j["backend"] = r.backend;
  j["model_shapes"] = r.model_shapes;
  j["section"] = r.section;
  j["fallback_policy"] = r.fallback_policy;
  return j;
}

Result<BackendRecord> parse_backend_record(const json& j, const std::string& where) {
  if (!is_backend_record(j)) return format_error(where + ": not a " + std::string(kBackendRecordSchema) + " file");
  BackendRecord r;
  r.path = where;
  json run = j;
  run["schema"] = std::string(kEvidenceSchema);
  run["tests"] = json::object();
  KILN_ASSIGN_OR_RETURN(r.run, parse_evidence_record(run, where));
  for (const char* key : {"backend", "model_shapes"})
    if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
      return format_error(where + ": '" + key + "' must be a non-empty string");
  r.backend = j["backend"];
  r.model_shapes = j["model_shapes"];
  if (!j.contains("section") || !j["section"].is_object() || !j["section"].contains("capabilities") ||
      !j["section"].contains("facet_support"))
    return format_error(where + ": 'section' must be an object holding 'capabilities' and 'facet_support'");
  if (!j.contains("fallback_policy") || !j["fallback_policy"].is_object() ||
      j["fallback_policy"].value("backend", "") != r.backend)
    return format_error(where + ": 'fallback_policy' must be an object naming backend '" + r.backend + "'");
  r.section = j["section"];
  r.fallback_policy = j["fallback_policy"];
  return r;
}

Result<std::vector<BackendRecord>> load_backend_records(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(std::vector<JsonFile> files, read_json_tree(dir));
  std::vector<BackendRecord> out;
  for (const JsonFile& f : files) {
    if (!is_backend_record(f.value)) continue;
    KILN_ASSIGN_OR_RETURN(BackendRecord r, parse_backend_record(f.value, f.where));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln
