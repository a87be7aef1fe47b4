#include "loadgen/serving_case_result.h"

#include <charconv>
#include <fstream>
#include <string>

namespace kiln::loadgen {

std::string serving_case_id(int64_t concurrency) { return "serve-c" + std::to_string(concurrency); }

bool serving_case_passed(const LoadResult& r) {
  return r.requests > 0 && r.errors == 0 && r.requests_without_tokens == 0;
}

nlohmann::json serving_case_result(const LoadResult& r, const std::string& case_id, const nlohmann::json& effective_config) {
  auto metric = [](const char* name, double value, const char* unit) {
    return nlohmann::json{{"name", name}, {"value", value}, {"unit", unit}};
  };
  nlohmann::json metrics = nlohmann::json::array({
      metric("inter_token_latency_p50_ms", r.inter_token_latency_ms.p50, "ms"),
      metric("inter_token_latency_p99_ms", r.inter_token_latency_ms.p99, "ms"),
      metric("output_tokens_per_second", r.output_tokens_per_second(), "tok/s"),
      metric("ttft_p50_ms", r.ttft_ms.p50, "ms"),
      metric("ttft_p99_ms", r.ttft_ms.p99, "ms"),
  });
  return {{"schema_version", 1},
          {"case_id", case_id},
          {"status", serving_case_passed(r) ? "passed" : "failed"},
          {"duration_seconds", r.duration_s},
          {"effective_config", effective_config},
          {"metrics", std::move(metrics)},
          {"tolerances", nlohmann::json::array()},
          {"details", load_result_json(r)}};
}

namespace {

// `j` as JSON text whose floating-point numbers are in their shortest round-tripping form
// (std::to_chars): the qualification runner's strict reader refuses any other spelling, and
// nlohmann's dump does not always give the shortest (0.35876542300000003 for 0.358765423).
void write_canonical(const nlohmann::json& j, int indent, int depth, std::string& out) {
  const std::string pad = "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ');
  const std::string end = "\n" + std::string(static_cast<size_t>(indent * depth), ' ');
  if (j.is_number_float()) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, j.get<double>());
    std::string text(buf, r.ptr);
    // A whole number keeps a fraction so that it reads back as a float.
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
    out += text;
  } else if (j.is_object()) {
    if (j.empty()) { out += "{}"; return; }
    out += "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      out += (first ? "" : ",") + pad + nlohmann::json(it.key()).dump() + ": ";
      write_canonical(it.value(), indent, depth + 1, out);
      first = false;
    }
    out += end + "}";
  } else if (j.is_array()) {
    if (j.empty()) { out += "[]"; return; }
    out += "[";
    for (size_t i = 0; i < j.size(); ++i) {
      out += (i ? "," : "") + pad;
      write_canonical(j[i], indent, depth + 1, out);
    }
    out += end + "]";
  } else {
    out += j.dump();
  }
}

}  // namespace

std::string canonical_json_text(const nlohmann::json& doc) {
  std::string out;
  write_canonical(doc, 2, 0, out);
  return out;
}

Status write_case_result(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("case result " + path + " cannot be written");
  out << canonical_json_text(doc) << "\n";
  out.close();
  if (!out) return io_error("case result " + path + " could not be written completely");
  return {};
}

}  // namespace kiln::loadgen
