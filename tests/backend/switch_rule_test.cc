// The switch audit's rule (switch_rule.h) on probe results written by hand: native may become
// declined, never host_fallback_allowed; mismatches, host fallbacks and probe failures break it.
#include <gtest/gtest.h>

#include "backend/switch_rule.h"

namespace kiln::testing {
namespace {

using nlohmann::json;

json probe(std::vector<std::pair<const char*, const char*>> rows, int mismatches = 0, int host_fallbacks = 0) {
  json audit = json::array();
  for (const auto& [request, support] : rows) audit.push_back({{"facet", "gdn.decode"}, {"request", request}, {"support", support}});
  return {{"audit", audit}, {"mismatches", mismatches}, {"host_fallbacks", host_fallbacks}};
}

const json kBase = probe({{"a", "native"}, {"b", "native_with_constraints"}, {"c", "declined"}});

TEST(SwitchRule, PickingAnotherNativePathHolds) {
  EXPECT_TRUE(switch_rule_violations(kBase, probe({{"a", "declined"}, {"b", "native"}, {"c", "host_fallback_allowed"}})).empty())
      << "declining is another native path; c was never native";
}

TEST(SwitchRule, ANativeRequestTurnedHostFallbackBreaksIt) {
  const auto v = switch_rule_violations(kBase, probe({{"a", "native"}, {"b", "host_fallback_allowed"}, {"c", "declined"}}));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "gdn.decode b turned from native_with_constraints into a host fallback");
}

TEST(SwitchRule, MismatchesHostFallbacksAndFailuresBreakIt) {
  EXPECT_EQ(switch_rule_violations(kBase, probe({{"a", "native"}, {"b", "native"}, {"c", "declined"}}, 1, 0)),
            std::vector<std::string>{"1 predicates disagree with their methods"});
  EXPECT_EQ(switch_rule_violations(kBase, probe({{"a", "native"}, {"b", "native"}, {"c", "declined"}}, 0, 3)),
            std::vector<std::string>{"serving counted 3 host fallbacks"});
  EXPECT_EQ(switch_rule_violations(kBase, json{{"error", "no CUDA device"}}),
            std::vector<std::string>{"the probe failed: no CUDA device"});
  EXPECT_EQ(switch_rule_violations(kBase, probe({{"a", "native"}})).size(), 1u) << "fewer requests asked";
}

}  // namespace
}  // namespace kiln::testing
