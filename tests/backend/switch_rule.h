// The rule the switch audit holds (switch_audit.h): a switch may pick among native paths but
// never turn a native op into a host fallback. Between native_switch_probe's run without switches
// (`base`) and its run under one setting (`run`): every request run natively in `base` is still
// native or declined (another native path then serves it: the fused GDN step's parts, f32 K/V),
// never host_fallback_allowed; predicates agree with methods; serving counts no host fallback.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::testing {

// A line for each break of the rule; empty when it holds.
inline std::vector<std::string> switch_rule_violations(const nlohmann::json& base, const nlohmann::json& run) {
  std::vector<std::string> out;
  if (run.contains("error")) return {"the probe failed: " + run["error"].get<std::string>()};
  if (run.value("mismatches", 0) != 0)
    out.push_back(std::to_string(run["mismatches"].get<int>()) + " predicates disagree with their methods");
  if (run.value("host_fallbacks", 0) != 0)
    out.push_back("serving counted " + std::to_string(run["host_fallbacks"].get<int>()) + " host fallbacks");
  const nlohmann::json& was = base["audit"];
  const nlohmann::json& now = run["audit"];
  if (was.size() != now.size())
    out.push_back("the support audit asked " + std::to_string(now.size()) + " requests, not " + std::to_string(was.size()));
  for (size_t i = 0; i < was.size() && i < now.size(); ++i) {
    const std::string request = now[i]["facet"].get<std::string>() + " " + now[i]["request"].get<std::string>();
    if (now[i]["request"] != was[i]["request"]) {
      out.push_back("request " + std::to_string(i) + " is " + request + ", not " + was[i]["request"].get<std::string>());
      continue;
    }
    const bool was_native = was[i]["support"] == "native" || was[i]["support"] == "native_with_constraints";
    if (was_native && now[i]["support"] == "host_fallback_allowed")
      out.push_back(request + " turned from " + was[i]["support"].get<std::string>() + " into a host fallback");
  }
  return out;
}

}  // namespace kiln::testing
