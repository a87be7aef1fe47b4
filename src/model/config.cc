#include "model/config.h"
#include "core/json_text.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace kiln {

using nlohmann::json;

int64_t ModelConfig::rotary_dim() const {
  int64_t d = static_cast<int64_t>(std::llround(static_cast<double>(head_dim) * partial_rotary_factor));
  return d - d % 2;
}

int64_t ModelConfig::count(LayerKind kind) const {
  int64_t n = 0;
  for (LayerKind k : layer_types) n += k == kind;
  return n;
}

namespace {

Result<json> read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) return not_found(path + ": no such file");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = parse_json(ss.str(), path);
  if (!j.ok()) return format_error(j.status().message());
  return std::move(*j);
}

Status get_int(const json& j, const char* key, int64_t& out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end()) return invalid_argument(src + ": missing key '" + key + "'");
  if (!it->is_number_integer()) return invalid_argument(src + ": key '" + key + "' must be an integer");
  out = it->get<int64_t>();
  return {};
}

template <typename T>
Status get_optional(const json& j, const char* key, T& out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    return invalid_argument(src + ": key '" + key + "' has the wrong type (" + it->dump() + ")");
  }
  return {};
}

void read_eos(const json& j, std::vector<int64_t>& out) {
  auto it = j.find("eos_token_id");
  if (it == j.end()) return;
  if (it->is_number_integer()) out.push_back(it->get<int64_t>());
  if (it->is_array())
    for (const auto& e : *it)
      if (e.is_number_integer()) out.push_back(e.get<int64_t>());
}

}  // namespace

Result<ModelConfig> ModelConfig::from_json(const json& root, const std::string& source) {
  if (!root.is_object()) return format_error(source + ": top level is not a JSON object");
  const json* j = &root;
  std::string src = source;
  if (auto tc = root.find("text_config"); tc != root.end() && tc->is_object()) {
    j = &*tc;
    src = source + " (text_config)";
  }
  ModelConfig c;
  KILN_RETURN_IF_ERROR(get_optional(*j, "model_type", c.model_type, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "vocab_size", c.vocab_size, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "hidden_size", c.hidden_size, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "intermediate_size", c.intermediate_size, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "num_hidden_layers", c.num_layers, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "num_attention_heads", c.num_heads, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "num_key_value_heads", c.num_kv_heads, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "head_dim", c.head_dim, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "linear_num_key_heads", c.linear_num_key_heads, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "linear_key_head_dim", c.linear_key_head_dim, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "linear_num_value_heads", c.linear_num_value_heads, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "linear_value_head_dim", c.linear_value_head_dim, src));
  KILN_RETURN_IF_ERROR(get_int(*j, "linear_conv_kernel_dim", c.linear_conv_kernel_dim, src));
  KILN_RETURN_IF_ERROR(get_optional(*j, "rms_norm_eps", c.rms_norm_eps, src));
  KILN_RETURN_IF_ERROR(get_optional(*j, "attn_output_gate", c.attn_output_gate, src));
  // Tied unless a checkpoint says otherwise; the weights loader also ties when lm_head is absent.
  bool tied = root.value("tie_word_embeddings", true);
  if (j->contains("tie_word_embeddings") && (*j)["tie_word_embeddings"].is_boolean())
    tied = (*j)["tie_word_embeddings"].get<bool>();
  c.tie_word_embeddings = tied;

  // rope_theta and partial_rotary_factor: top level (older files) or under rope_parameters.
  const json* rp = nullptr;
  if (auto it = j->find("rope_parameters"); it != j->end() && it->is_object()) rp = &*it;
  else if (auto it2 = j->find("rope_scaling"); it2 != j->end() && it2->is_object()) rp = &*it2;
  KILN_RETURN_IF_ERROR(get_optional(*j, "rope_theta", c.rope_theta, src));
  if (rp) KILN_RETURN_IF_ERROR(get_optional(*rp, "rope_theta", c.rope_theta, src + " rope_parameters"));
  if (c.rope_theta == 0) return invalid_argument(src + ": missing key 'rope_theta' (top level or in rope_parameters)");
  KILN_RETURN_IF_ERROR(get_optional(*j, "partial_rotary_factor", c.partial_rotary_factor, src));
  if (rp) KILN_RETURN_IF_ERROR(get_optional(*rp, "partial_rotary_factor", c.partial_rotary_factor, src + " rope_parameters"));

  if (auto lt = j->find("layer_types"); lt != j->end() && lt->is_array()) {
    for (const auto& e : *lt) {
      std::string s = e.is_string() ? e.get<std::string>() : e.dump();
      if (s == "linear_attention") c.layer_types.push_back(LayerKind::kLinearAttention);
      else if (s == "full_attention") c.layer_types.push_back(LayerKind::kFullAttention);
      else return invalid_argument(src + ": unknown layer type '" + s + "' in layer_types");
    }
  } else {
    int64_t interval = 4;
    KILN_RETURN_IF_ERROR(get_optional(*j, "full_attention_interval", interval, src));
    if (interval <= 0) return invalid_argument(src + ": full_attention_interval must be positive");
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention);
  }
  read_eos(*j, c.eos_token_ids);
  if (c.eos_token_ids.empty()) read_eos(root, c.eos_token_ids);
  KILN_RETURN_IF_ERROR(c.validate(src));
  return c;
}

Status ModelConfig::validate(const std::string& src) const {
  auto positive = [&](int64_t v, const char* name) -> Status {
    if (v <= 0) return invalid_argument(src + ": '" + name + "' must be positive, got " + std::to_string(v));
    return {};
  };
  KILN_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  KILN_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  KILN_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  KILN_RETURN_IF_ERROR(positive(num_layers, "num_hidden_layers"));
  KILN_RETURN_IF_ERROR(positive(num_heads, "num_attention_heads"));
  KILN_RETURN_IF_ERROR(positive(num_kv_heads, "num_key_value_heads"));
  KILN_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  KILN_RETURN_IF_ERROR(positive(linear_num_key_heads, "linear_num_key_heads"));
  KILN_RETURN_IF_ERROR(positive(linear_key_head_dim, "linear_key_head_dim"));
  KILN_RETURN_IF_ERROR(positive(linear_num_value_heads, "linear_num_value_heads"));
  KILN_RETURN_IF_ERROR(positive(linear_value_head_dim, "linear_value_head_dim"));
  if (linear_conv_kernel_dim < 2) return invalid_argument(src + ": 'linear_conv_kernel_dim' must be at least 2");
  if (num_heads % num_kv_heads != 0)
    return invalid_argument(src + ": num_attention_heads must be a multiple of num_key_value_heads");
  if (linear_num_value_heads % linear_num_key_heads != 0)
    return invalid_argument(src + ": linear_num_value_heads must be a multiple of linear_num_key_heads");
  if (static_cast<int64_t>(layer_types.size()) != num_layers)
    return invalid_argument(src + ": layer_types has " + std::to_string(layer_types.size()) + " entries for " +
                            std::to_string(num_layers) + " layers");
  if (rotary_dim() <= 0 || rotary_dim() > head_dim)
    return invalid_argument(src + ": partial_rotary_factor gives rotary_dim " + std::to_string(rotary_dim()));
  return {};
}

Result<ModelConfig> ModelConfig::load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  KILN_ASSIGN_OR_RETURN(json j, read_json(path));
  KILN_ASSIGN_OR_RETURN(ModelConfig c, from_json(j, path));
  // generation_config.json may name further end-of-sequence ids.
  auto gen = read_json(dir + "/generation_config.json");
  if (gen.ok()) {
    std::vector<int64_t> extra;
    read_eos(gen.value(), extra);
    for (int64_t id : extra)
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
        c.eos_token_ids.push_back(id);
  }
  return c;
}

json ModelConfig::to_json() const {
  json lt = json::array();
  for (LayerKind k : layer_types) lt.push_back(k == LayerKind::kFullAttention ? "full_attention" : "linear_attention");
  json j = {
      {"architectures", {"Qwen3_5ForCausalLM"}},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_layers},
      {"layer_types", lt},
      {"num_attention_heads", num_heads},
      {"num_key_value_heads", num_kv_heads},
      {"head_dim", head_dim},
      {"attn_output_gate", attn_output_gate},
      {"linear_num_key_heads", linear_num_key_heads},
      {"linear_key_head_dim", linear_key_head_dim},
      {"linear_num_value_heads", linear_num_value_heads},
      {"linear_value_head_dim", linear_value_head_dim},
      {"linear_conv_kernel_dim", linear_conv_kernel_dim},
      {"rms_norm_eps", rms_norm_eps},
      {"tie_word_embeddings", tie_word_embeddings},
      {"hidden_act", "silu"},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", rope_theta}, {"partial_rotary_factor", partial_rotary_factor}}},
  };
  if (!eos_token_ids.empty()) j["eos_token_id"] = eos_token_ids.size() == 1 ? json(eos_token_ids[0]) : json(eos_token_ids);
  return j;
}

}  // namespace kiln
