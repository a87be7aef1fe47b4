#include "qualify/effective_config.h"

#include <algorithm>
#include <map>

#include "qualify/regex.h"

namespace kiln::qualify {
namespace {

void check_node(const JsonValue& node, const std::string& path, Issues& issues) {
  if (node.object.empty()) {
    issues.add(path, "effective-config-shape", "nested configuration objects may not be empty");
  }
  for (const auto& [k, v] : node.object) {
    std::string child = json_path_key(path, k);
    if (!full_match("[a-z][a-z0-9_]{0,63}", k)) {
      issues.add(child, "effective-config-shape", "configuration key \"" + k + "\" must match ^[a-z][a-z0-9_]{0,63}$");
    }
    if (v.is_object()) {
      check_node(v, child, issues);
    } else if (v.is_array() || v.is_null()) {
      issues.add(child, "effective-config-shape",
                 std::string("configuration leaves are strings, numbers or booleans, not ") + json_type_name(v.type));
    }
  }
}

void collect(const JsonValue& node, const std::string& prefix,
             std::vector<std::pair<std::string, const JsonValue*>>& out) {
  for (const auto& [k, v] : node.object) {
    std::string path = prefix.empty() ? k : prefix + "." + k;
    if (v.is_object()) {
      collect(v, path, out);
    } else {
      out.emplace_back(path, &v);
    }
  }
}

}  // namespace

void check_effective_config(const JsonValue& config, const std::string& path, Issues& issues) {
  if (!config.is_object()) {
    issues.add(path, "effective-config-shape", std::string("expected an object, found ") + json_type_name(config.type));
    return;
  }
  if (config.object.empty()) return;  // a variant may have no tunable configuration
  check_node(config, path, issues);
}

std::vector<std::pair<std::string, const JsonValue*>> config_leaves(const JsonValue& config) {
  std::vector<std::pair<std::string, const JsonValue*>> out;
  if (config.is_object()) collect(config, "", out);
  return out;
}

std::vector<std::string> config_differences(const JsonValue& a, const JsonValue& b) {
  std::map<std::string, const JsonValue*> la, lb;
  for (const auto& [p, v] : config_leaves(a)) la[p] = v;
  for (const auto& [p, v] : config_leaves(b)) lb[p] = v;
  std::vector<std::string> out;
  for (const auto& [p, v] : la) {
    auto it = lb.find(p);
    if (it == lb.end() || !json_equal(*v, *it->second)) out.push_back(p);
  }
  for (const auto& [p, v] : lb) {
    if (la.find(p) == la.end()) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kiln::qualify
