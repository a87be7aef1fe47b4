#include "report/evidence_record.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/native_switches.h"
#include "backend/registry.h"
#include "core/build_stamp.h"

namespace kiln {

using nlohmann::json;

const EvidenceDevice* EvidenceRecord::device(std::string_view backend) const {
  for (const EvidenceDevice& d : devices)
    if (d.backend == backend) return &d;
  return nullptr;
}

json evidence_record_json(const EvidenceRecord& r) {
  json devices = json::array();
  for (const EvidenceDevice& d : r.devices)
    devices.push_back({{"backend", d.backend}, {"device", d.device}, {"driver", d.driver}, {"target", d.target}});
  return {{"schema", std::string(kEvidenceSchema)},
          {"binary", r.binary},
          {"build", {{"commit", r.commit}, {"dirty", r.dirty}}},
          {"timestamp_utc", r.timestamp},
          {"devices", devices},
          {"native_switches", r.switches},
          {"tests", r.tests}};
}

namespace {

std::string string_at(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// An unstamped record's host object: the CUDA device and target, the Vulkan device with its driver.
void read_unstamped_host(const json& host, EvidenceRecord& r) {
  if (const std::string cuda = string_at(host, "cuda_device"); !cuda.empty())
    r.devices.push_back({"cuda", cuda, "", string_at(host, "cuda_target")});
  if (const std::string vk = string_at(host, "vulkan_device"); !vk.empty()) r.devices.push_back({"vulkan", vk, "", ""});
}

}  // namespace

Result<EvidenceRecord> parse_evidence_record(const json& j, const std::string& where) {
  const std::string schema = string_at(j, "schema");
  if (schema != kEvidenceSchema && schema != kUnstampedEvidenceSchema)
    return format_error(where + ": not a " + std::string(kEvidenceSchema) + " (or " +
                        std::string(kUnstampedEvidenceSchema) + ") file");
  EvidenceRecord r;
  r.binary = string_at(j, "binary");
  r.timestamp = string_at(j, "timestamp_utc");
  r.stamped = schema == kEvidenceSchema;
  if (r.stamped) {
    const json build = j.value("build", json());
    if (!build.is_object() || !build.contains("commit") || !build["commit"].is_string() || !build.contains("dirty") ||
        !build["dirty"].is_boolean())
      return format_error(where + ": 'build' must hold a string 'commit' and a boolean 'dirty'");
    r.commit = build["commit"].get<std::string>();
    r.dirty = build["dirty"].get<bool>();
    const json devices = j.value("devices", json());
    if (!devices.is_array()) return format_error(where + ": 'devices' must be an array");
    for (const json& d : devices) {
      if (string_at(d, "backend").empty()) return format_error(where + ": a device without a 'backend'");
      r.devices.push_back({string_at(d, "backend"), string_at(d, "device"), string_at(d, "driver"), string_at(d, "target")});
    }
    const json switches = j.value("native_switches", json::object());
    if (!switches.is_object()) return format_error(where + ": 'native_switches' must be an object");
    for (auto it = switches.begin(); it != switches.end(); ++it) {
      if (!it->is_string()) return format_error(where + ": native switch '" + it.key() + "' is not a string");
      r.switches[it.key()] = it->get<std::string>();
    }
  } else {
    r.commit = string_at(j, "commit");
    read_unstamped_host(j.value("host", json()), r);
  }
  if (!j.contains("tests") || !j["tests"].is_object()) return format_error(where + ": no 'tests' object");
  for (auto it = j["tests"].begin(); it != j["tests"].end(); ++it) {
    if (!it->is_string()) return format_error(where + ": result of '" + it.key() + "' is not a string");
    r.tests[it.key()] = it->get<std::string>();
  }
  return r;
}

std::vector<EvidenceDevice> present_devices() {
  std::vector<EvidenceDevice> out;
  for (const BackendEntry& e : backend_registry()) {
    if (!e.built) continue;
    auto be = create_backend(e.name);
    if (!be.ok()) continue;
    const BackendCapabilities& c = be.value()->capabilities();
    std::string target = c.compute.target;
    // The driver compiled the kernels from the embedded PTX: no machine code for this device in the
    // build, or CUDA_FORCE_PTX_JIT=1.
    if (e.name == "cuda" && !c.startup.precompiles_kernels) target += " + PTX JIT";
    out.push_back({e.name, be.value()->identity().device_name, be.value()->identity().driver, target});
  }
  return out;
}

EvidenceRecord this_run(std::string binary) {
  EvidenceRecord r;
  r.binary = std::move(binary);
  const BuildStamp stamp = build_stamp();
  r.commit = std::string(stamp.commit);
  r.dirty = stamp.dirty;
  r.stamped = true;
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  r.timestamp = when;
  r.devices = present_devices();
  r.switches = native_switches_in_effect();
  return r;
}

Result<std::vector<JsonFile>> read_json_tree(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<JsonFile> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") paths.push_back(e.path().lexically_normal());
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string where = p.lexically_relative(fs::path(dir).lexically_normal().parent_path()).string();
    auto j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded()) return format_error(where + ": not JSON");
    out.push_back({where, std::move(j)});
  }
  return out;
}

}  // namespace kiln
