// --var resolution: types, constraints, defaults and refusals that name the variable.
#include <gtest/gtest.h>

#include "qualify/variables.h"
#include "qualify/workload_fixtures.h"

namespace kiln::qualify {
namespace {

Workload fixture(const std::string& name) {
  WorkloadCheck c = check_workload_text(testing::read_text(testing::fixture_path(name)));
  EXPECT_TRUE(c.issues.empty()) << c.issues.to_string();
  return c.workload;
}

TEST(Variables, DefaultsFillOptionalVariables) {
  Result<ResolvedVariables> r = resolve_variables(fixture("correctness"), {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->placeholder_values.at("threads"), "2");
  EXPECT_EQ(r->parameters.find("threads")->integer, 2);
}

TEST(Variables, GivenValuesAreTyped) {
  Result<ResolvedVariables> r = resolve_variables(fixture("correctness"), {{"threads", "16"}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->parameters.find("threads")->is_integer);
  EXPECT_EQ(r->placeholder_values.at("threads"), "16");
}

struct Refusal {
  const char* fixture;
  const char* name;
  const char* value;
  const char* message;
};

class VariableRefusals : public ::testing::TestWithParam<Refusal> {};

TEST_P(VariableRefusals, NameTheVariableAndTheReason) {
  Result<ResolvedVariables> r = resolve_variables(fixture(GetParam().fixture), {{GetParam().name, GetParam().value}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(GetParam().message), std::string::npos) << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Spec, VariableRefusals,
    ::testing::Values(Refusal{"correctness", "threads", "1.5", "--var threads=1.5: not an integer"},
                      Refusal{"correctness", "threads", "four", "--var threads=four: not a JSON number"},
                      Refusal{"correctness", "threads", "0", "below the minimum 1"},
                      Refusal{"correctness", "threads", "65", "above the maximum 64"},
                      Refusal{"correctness", "thread", "4", "--var thread: workload fixture-correctness-v1 declares no such variable"},
                      Refusal{"ab", "precision", "fp8", "allowed values are bf16, f32"}));

TEST(Variables, RepeatedAndMissingAreRefused) {
  Result<ResolvedVariables> twice = resolve_variables(fixture("correctness"), {{"threads", "2"}, {"threads", "3"}});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("given twice"), std::string::npos);
  Result<ResolvedVariables> missing = resolve_variables(fixture("ab"), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("required variable precision is missing"), std::string::npos);
}

TEST(Variables, VarArgumentNeedsNameAndEquals) {
  EXPECT_FALSE(parse_var_argument("threads").ok());
  EXPECT_FALSE(parse_var_argument("=4").ok());
  Result<std::pair<std::string, std::string>> kv = parse_var_argument("path=a=b");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->first, "path");
  EXPECT_EQ(kv->second, "a=b");
}

}  // namespace
}  // namespace kiln::qualify
