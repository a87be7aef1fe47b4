#include "model/lora_config.h"
#include "core/json_text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

namespace kiln {

using nlohmann::json;

namespace {

struct TargetInfo {
  LoraTarget target;
  std::string_view name, parent;
};
constexpr std::array<TargetInfo, kLoraTargetCount> kTargets = {{
    {LoraTarget::kQProj, "q_proj", "self_attn"},
    {LoraTarget::kKProj, "k_proj", "self_attn"},
    {LoraTarget::kVProj, "v_proj", "self_attn"},
    {LoraTarget::kOProj, "o_proj", "self_attn"},
    {LoraTarget::kInProjQkv, "in_proj_qkv", "linear_attn"},
    {LoraTarget::kInProjZ, "in_proj_z", "linear_attn"},
    {LoraTarget::kOutProj, "out_proj", "linear_attn"},
    {LoraTarget::kGateProj, "gate_proj", "mlp"},
    {LoraTarget::kUpProj, "up_proj", "mlp"},
    {LoraTarget::kDownProj, "down_proj", "mlp"},
}};

// A key that must be absent or "off" (null, false, empty): each changes what the adapter computes
// in a way Kiln does not implement, or (the *_config initialisers such as LoftQ) rewrites base weights.
constexpr std::array kMustBeUnset = {
    "use_dora", "lora_bias", "fan_in_fan_out", "modules_to_save", "rank_pattern", "alpha_pattern",
    "layer_replication", "target_parameters", "trainable_token_indices", "use_qalora",
    "alora_invocation_tokens", "exclude_modules", "use_bdlora",
};

bool is_set(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Status not_supported(const std::string& src, const std::string& key, const json& v, const std::string& why) {
  return unsupported(src + ": " + key + " = " + v.dump() + " is not supported" + (why.empty() ? "" : " (" + why + ")"));
}

Status check_unsupported(const json& j, const std::string& src) {
  for (const char* key : kMustBeUnset)
    if (j.contains(key) && is_set(j[key])) return not_supported(src, key, j[key], "");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (ends_with(it.key(), "_config") && is_set(it.value()))
      return not_supported(src, it.key(), it.value(), "adapters that need an initialiser's base-weight changes or routing");
  if (j.contains("peft_type") && j["peft_type"] != "LORA")
    return not_supported(src, "peft_type", j["peft_type"], "LORA only");
  if (j.contains("bias") && !j["bias"].is_null() && j["bias"] != "none")
    return not_supported(src, "bias", j["bias"], "only \"none\"");
  if (j.contains("init_lora_weights")) {
    const json& v = j["init_lora_weights"];
    // PiSSA, OLoRA, CorDA, LoftQ and the like leave the base weights changed; only plain inits are adapters alone.
    if (!v.is_boolean() && v != "gaussian")
      return not_supported(src, "init_lora_weights", v, "only true, false or \"gaussian\"");
  }
  return {};
}

Result<double> get_number(const json& j, const char* key, const std::string& src) {
  if (!j.contains(key)) return invalid_argument(src + ": missing " + key);
  if (!j[key].is_number()) return invalid_argument(src + ": " + key + " must be a number, got " + j[key].dump());
  return j[key].get<double>();
}

}  // namespace

std::string_view lora_target_name(LoraTarget t) { return kTargets[static_cast<int>(t)].name; }
std::string_view lora_target_parent(LoraTarget t) { return kTargets[static_cast<int>(t)].parent; }

std::optional<LoraTarget> parse_lora_target(std::string_view name) {
  for (const auto& info : kTargets)
    if (info.name == name) return info.target;
  return std::nullopt;
}

bool lora_target_in_layer(LoraTarget t, LayerKind kind) {
  const std::string_view parent = lora_target_parent(t);
  if (parent == "self_attn") return kind == LayerKind::kFullAttention;
  if (parent == "linear_attn") return kind == LayerKind::kLinearAttention;
  return true;
}

LoraDims lora_target_dims(const ModelConfig& c, LoraTarget t) {
  const int64_t H = c.hidden_size, kv = c.num_kv_heads * c.head_dim;
  switch (t) {
    case LoraTarget::kQProj: return {H, c.q_proj_rows()};
    case LoraTarget::kKProj: return {H, kv};
    case LoraTarget::kVProj: return {H, kv};
    case LoraTarget::kOProj: return {c.num_heads * c.head_dim, H};
    case LoraTarget::kInProjQkv: return {H, c.gdn_conv_dim()};
    case LoraTarget::kInProjZ: return {H, c.gdn_value_dim()};
    case LoraTarget::kOutProj: return {c.gdn_value_dim(), H};
    case LoraTarget::kGateProj: return {H, c.intermediate_size};
    case LoraTarget::kUpProj: return {H, c.intermediate_size};
    case LoraTarget::kDownProj: return {c.intermediate_size, H};
  }
  return {};
}

float LoraConfig::scale() const {
  const double r = static_cast<double>(rank);
  return static_cast<float>(use_rslora ? alpha / std::sqrt(r) : alpha / r);
}

bool LoraConfig::has_target(LoraTarget t) const { return std::find(targets.begin(), targets.end(), t) != targets.end(); }

bool LoraConfig::has_layer(int64_t layer) const {
  return layers.empty() || std::find(layers.begin(), layers.end(), layer) != layers.end();
}

Result<LoraConfig> LoraConfig::from_json(const json& j, const std::string& src) {
  if (!j.is_object()) return format_error(src + ": not a JSON object");
  KILN_RETURN_IF_ERROR(check_unsupported(j, src));
  LoraConfig c;
  if (!j.contains("r")) return invalid_argument(src + ": missing r");
  if (!j["r"].is_number_integer()) return invalid_argument(src + ": r must be an integer, got " + j["r"].dump());
  c.rank = j["r"].get<int64_t>();
  KILN_ASSIGN_OR_RETURN(c.alpha, get_number(j, "lora_alpha", src));
  if (j.contains("lora_dropout") && !j["lora_dropout"].is_null()) {
    KILN_ASSIGN_OR_RETURN(c.dropout, get_number(j, "lora_dropout", src));
  }
  if (j.contains("use_rslora") && !j["use_rslora"].is_null()) {
    if (!j["use_rslora"].is_boolean())
      return invalid_argument(src + ": use_rslora must be true or false, got " + j["use_rslora"].dump());
    c.use_rslora = j["use_rslora"].get<bool>();
  }
  if (j.contains("base_model_name_or_path") && !j["base_model_name_or_path"].is_null()) {
    if (!j["base_model_name_or_path"].is_string())
      return invalid_argument(src + ": base_model_name_or_path must be a string, got " +
                              j["base_model_name_or_path"].dump());
    c.base_model = j["base_model_name_or_path"].get<std::string>();
  }

  if (!j.contains("target_modules")) return invalid_argument(src + ": missing target_modules");
  const json& tm = j["target_modules"];
  if (tm.is_string())
    return not_supported(src, "target_modules", tm, "a regular expression or \"all-linear\"; list the module names");
  if (!tm.is_array()) return invalid_argument(src + ": target_modules must be a list of module names, got " + tm.dump());
  for (const json& name : tm) {
    auto t = name.is_string() ? parse_lora_target(name.get<std::string>()) : std::nullopt;
    if (!t)
      return not_supported(src, "target_modules entry", name,
                           "targets are q_proj k_proj v_proj o_proj in_proj_qkv in_proj_z out_proj gate_proj "
                           "up_proj down_proj");
    if (!c.has_target(*t)) c.targets.push_back(*t);
  }
  std::sort(c.targets.begin(), c.targets.end());

  if (j.contains("layers_to_transform") && !j["layers_to_transform"].is_null()) {
    const json& l = j["layers_to_transform"];
    auto add = [&](const json& v) -> Status {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        return invalid_argument(src + ": layers_to_transform entries must be non-negative integers, got " + v.dump());
      c.layers.push_back(v.get<int64_t>());
      return {};
    };
    if (l.is_array()) {
      for (const json& v : l) KILN_RETURN_IF_ERROR(add(v));
    } else {
      KILN_RETURN_IF_ERROR(add(l));
    }
    std::sort(c.layers.begin(), c.layers.end());
    c.layers.erase(std::unique(c.layers.begin(), c.layers.end()), c.layers.end());
  }
  KILN_RETURN_IF_ERROR(c.validate(src));
  return c;
}

Status LoraConfig::validate(const std::string& src) const {
  if (rank <= 0) return invalid_argument(src + ": r must be positive, got " + std::to_string(rank));
  if (!std::isfinite(alpha)) return invalid_argument(src + ": lora_alpha must be finite");
  if (!(dropout >= 0 && dropout < 1))
    return invalid_argument(src + ": lora_dropout must be in [0, 1), got " + std::to_string(dropout));
  if (targets.empty()) return invalid_argument(src + ": target_modules is empty");
  return {};
}

Result<LoraConfig> LoraConfig::load(const std::string& adapter_dir) {
  const std::string path = adapter_dir + "/adapter_config.json";
  std::ifstream f(path);
  if (!f) return not_found(path + ": cannot open (an adapter directory holds adapter_config.json)");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = parse_json(ss.str(), path);
  if (!j.ok()) return format_error(j.status().message());
  return from_json(*j, path);
}

json LoraConfig::to_json() const {
  json names = json::array();
  for (LoraTarget t : targets) names.push_back(std::string(lora_target_name(t)));
  // An integral alpha is written as an integer, as PEFT writes it.
  json a = alpha == std::floor(alpha) && std::fabs(alpha) < 1e15 ? json(static_cast<int64_t>(alpha)) : json(alpha);
  return json{
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", rank},
      {"lora_alpha", a},
      {"target_modules", names},
      {"use_rslora", use_rslora},
      {"base_model_name_or_path", base_model.empty() ? json(nullptr) : json(base_model)},
      {"lora_dropout", dropout},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_to_transform", layers.empty() ? json(nullptr) : json(layers)},
      {"layers_pattern", nullptr},
      {"modules_to_save", nullptr},
      {"rank_pattern", json::object()},
      {"alpha_pattern", json::object()},
      {"use_dora", false},
  };
}

}  // namespace kiln
