#include "loadgen/serving_case_result.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "qualify/strict_json.h"

namespace kiln::loadgen {

std::string serving_case_id(int64_t concurrency) { return "serve-c" + std::to_string(concurrency); }

bool serving_case_passed(const LoadResult& r) {
  return r.requests > 0 && r.errors == 0 && r.requests_without_tokens == 0;
}

nlohmann::json case_metric(const std::string& name, double value, const std::string& unit) {
  return {{"name", name}, {"value", value}, {"unit", unit}};
}

nlohmann::json case_result(const std::string& case_id, bool passed, double duration_seconds,
                           nlohmann::json effective_config, nlohmann::json metrics, nlohmann::json details) {
  std::sort(metrics.begin(), metrics.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["name"].get<std::string>() < b["name"].get<std::string>();
  });
  return {{"schema_version", 1},
          {"case_id", case_id},
          {"status", passed ? "passed" : "failed"},
          {"duration_seconds", duration_seconds},
          {"effective_config", std::move(effective_config)},
          {"metrics", std::move(metrics)},
          {"tolerances", nlohmann::json::array()},
          {"details", std::move(details)}};
}

nlohmann::json serving_case_result(const LoadResult& r, const std::string& case_id, const nlohmann::json& effective_config) {
  return case_result(case_id, serving_case_passed(r), r.duration_s, effective_config,
                     nlohmann::json::array({case_metric("inter_token_latency_p50_ms", r.inter_token_latency_ms.p50, "ms"),
                      case_metric("inter_token_latency_p99_ms", r.inter_token_latency_ms.p99, "ms"),
                      case_metric("output_tokens_per_second", r.output_tokens_per_second(), "tok/s"),
                      case_metric("ttft_p50_ms", r.ttft_ms.p50, "ms"), case_metric("ttft_p99_ms", r.ttft_ms.p99, "ms")}),
                     load_result_json(r));
}

namespace {

// `j` as the qualification module's document tree, whose writer spells every number in its
// shortest round-tripping form (nlohmann's dump does not always: 0.35876542300000003 for
// 0.358765423, which the runner's strict reader refuses).
qualify::JsonValue to_strict(const nlohmann::json& j) {
  using qualify::JsonValue;
  switch (j.type()) {
    case nlohmann::json::value_t::boolean: return JsonValue::make_bool(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return JsonValue::make_integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return JsonValue::make_integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return JsonValue::make_number(j.get<double>());
    case nlohmann::json::value_t::string: return JsonValue::make_string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      JsonValue a = JsonValue::make_array();
      for (const auto& e : j) a.array.push_back(to_strict(e));
      return a;
    }
    case nlohmann::json::value_t::object: {
      JsonValue o = JsonValue::make_object();
      for (auto it = j.begin(); it != j.end(); ++it) o.set(it.key(), to_strict(it.value()));
      return o;
    }
    default: return JsonValue::make_null();
  }
}

}  // namespace

std::string canonical_json_text(const nlohmann::json& doc) { return qualify::to_json_text(to_strict(doc), 2); }

Status write_case_result(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("case result " + path + " cannot be written");
  out << canonical_json_text(doc) << "\n";
  out.close();
  if (!out) return io_error("case result " + path + " could not be written completely");
  return {};
}

}  // namespace kiln::loadgen
