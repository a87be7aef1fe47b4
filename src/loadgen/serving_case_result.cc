#include "loadgen/serving_case_result.h"

#include <fstream>

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

Status write_case_result(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("case result " + path + " cannot be written");
  out << doc.dump(2) << "\n";
  out.close();
  if (!out) return io_error("case result " + path + " could not be written completely");
  return {};
}

}  // namespace kiln::loadgen
