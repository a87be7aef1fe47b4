#include "model/model_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/json_text.h"
#include "model/config.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxJsonBytes = 64u << 20;

bool read_json_file(const fs::path& p, nlohmann::json& out, std::string& problem) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) return false;
  if (size > kMaxJsonBytes) {
    problem = p.filename().string() + " is larger than 64 MiB";
    return false;
  }
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = parse_json(ss.str(), p.string());
  if (!j.ok()) {
    problem = j.status().message();
    return false;
  }
  out = std::move(*j);
  return true;
}

}  // namespace

const std::vector<std::string>& optional_serving_files() {
  static const std::vector<std::string> kNames = {"generation_config.json", "tokenizer_config.json",
                                                  "special_tokens_map.json", "chat_template.jinja", "chat_template.json"};
  return kNames;
}

bool is_serving_metadata_file(const std::string& name) {
  const auto& optional = optional_serving_files();
  return name == "config.json" || name == "tokenizer.json" ||
         std::find(optional.begin(), optional.end(), name) != optional.end();
}

bool is_servable_architecture(const std::string& a) {
  return a == "Qwen3_5ForConditionalGeneration" || a == "Qwen3_5ForCausalLM";
}

ServableCheck check_servable(const std::string& dir) {
  ServableCheck c;
  const fs::path base(dir);
  std::error_code ec;
  auto need = [&](const std::string& name) {
    if (!fs::exists(base / name, ec)) c.missing.push_back(name);
  };
  nlohmann::json config;
  if (!fs::exists(base / "config.json", ec)) {
    c.missing.push_back("config.json");
  } else if (read_json_file(base / "config.json", config, c.problem)) {
    if (auto a = config.find("architectures"); a != config.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
      c.architecture = (*a)[0].get<std::string>();
    if (!c.architecture.empty() && !is_servable_architecture(c.architecture)) {
      c.problem = "architecture " + c.architecture + " (Kiln serves Qwen3_5ForConditionalGeneration and Qwen3_5ForCausalLM)";
    } else if (auto parsed = ModelConfig::from_json(config, "config.json"); !parsed.ok()) {
      c.problem = parsed.status().message();
    }
  } else if (c.problem.empty()) {
    c.problem = "config.json cannot be read";
  }
  need("tokenizer.json");
  if (fs::exists(base / kSafetensorsIndex, ec)) {
    nlohmann::json index;
    std::string index_problem;
    if (!read_json_file(base / kSafetensorsIndex, index, index_problem) || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      if (c.problem.empty()) c.problem = std::string(kSafetensorsIndex) + " is not a safetensors index";
    } else {
      std::set<std::string> shards;
      for (const auto& v : index["weight_map"])
        if (v.is_string()) shards.insert(v.get<std::string>());
      for (const auto& s : shards) need(s);
    }
  } else if (!fs::exists(base / kSingleSafetensors, ec)) {
    c.missing.push_back(std::string(kSingleSafetensors) + " (or " + kSafetensorsIndex + " and its shards)");
  }
  if (c.problem.empty() && !c.missing.empty()) {
    c.problem = "missing ";
    for (size_t i = 0; i < c.missing.size(); ++i) c.problem += (i ? ", " : "") + c.missing[i];
  }
  c.servable = c.problem.empty();
  return c;
}

}  // namespace kiln
