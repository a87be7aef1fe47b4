// `kiln qualify validate`: each invalid workload below breaks one rule of the spec and must be
// rejected for that reason, at that JSON path; the committed fixtures are accepted.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "core/regex.h"
#include "qualify/workload.h"
#include "qualify/workload_fixtures.h"

namespace kiln::qualify {
namespace {

using Json = nlohmann::ordered_json;
using testing::load_fixture;

struct InvalidWorkload {
  const char* name;
  const char* base;  // fixture the mutation starts from
  std::function<void(Json&)> mutate;
  const char* path;
  const char* rule;
};

void PrintTo(const InvalidWorkload& w, std::ostream* os) { *os << w.name; }

Json& v0case(Json& w) { return w["variants"][0]["cases"][0]; }
Json& v1case(Json& w) { return w["variants"][1]["cases"][0]; }
Json& policy(Json& w) { return w["comparison_policy"]; }
Json& rule0(Json& w) { return w["comparison_policy"]["metric_rules"][0]; }
Json& rule1(Json& w) { return w["comparison_policy"]["metric_rules"][1]; }
Json& metrics0(Json& w) { return v0case(w)["result_protocol"]["declared_metrics"]; }
Json& constraints0(Json& w) { return w["variables"][0]["constraints"]; }

Json unused_variable(const char* name) {
  return Json{{"name", name}, {"type", "string"}, {"required", false}, {"default", "x"},
              {"constraints", {{"allowed_values", nullptr}, {"minimum", nullptr}, {"maximum", nullptr}, {"pattern", nullptr}}}};
}

const InvalidWorkload kInvalid[] = {
    // Top level.
    {"unknown_top_key", "correctness", [](Json& w) { w["extra"] = 1; }, "$.extra", "unknown-key"},
    {"missing_description", "correctness", [](Json& w) { w.erase("description"); }, "$.description", "missing-key"},
    {"schema_version_2", "correctness", [](Json& w) { w["schema_version"] = 2; }, "$.schema_version", "schema-version"},
    {"schema_version_string", "correctness", [](Json& w) { w["schema_version"] = "1"; }, "$.schema_version", "type"},
    {"workload_id_upper", "correctness", [](Json& w) { w["workload_id"] = "Core-V1"; }, "$.workload_id", "workload-id"},
    {"workload_id_short", "correctness", [](Json& w) { w["workload_id"] = "ab"; }, "$.workload_id", "workload-id"},
    {"kind_unknown", "correctness", [](Json& w) { w["kind"] = "benchmark"; }, "$.kind", "enum"},
    {"description_blank", "correctness", [](Json& w) { w["description"] = "  "; }, "$.description", "non-empty"},
    // Inputs: optional, but when present a sorted, unique list of globs inside the repository.
    {"inputs_empty", "correctness", [](Json& w) { w["inputs"] = Json::array(); }, "$.inputs", "non-empty"},
    {"inputs_not_strings", "correctness", [](Json& w) { w["inputs"] = {1}; }, "$.inputs[0]", "type"},
    {"inputs_parent", "correctness", [](Json& w) { w["inputs"] = {"src/../etc/**"}; }, "$.inputs[0]", "input"},
    {"inputs_absolute", "correctness", [](Json& w) { w["inputs"] = {"/etc/passwd"}; }, "$.inputs[0]", "input"},
    {"inputs_space", "correctness", [](Json& w) { w["inputs"] = {"src/a b.cc"}; }, "$.inputs[0]", "input"},
    {"inputs_unsorted", "correctness", [](Json& w) { w["inputs"] = {"tests/**", "src/**"}; }, "$.inputs[1]", "sorted"},
    {"variants_empty", "environment", [](Json& w) { w["variants"] = Json::array(); }, "$.variants", "non-empty"},
    // Determinism.
    {"repetitions_zero", "correctness", [](Json& w) { w["determinism"]["repetitions"] = 0; }, "$.determinism.repetitions", "range"},
    {"repetitions_too_many", "correctness", [](Json& w) { w["determinism"]["repetitions"] = 1001; }, "$.determinism.repetitions", "range"},
    {"case_order_random", "correctness", [](Json& w) { w["determinism"]["case_order"] = "random"; }, "$.determinism.case_order", "case-order"},
    {"parallel_cases", "correctness", [](Json& w) { w["determinism"]["max_parallel_cases"] = 2; }, "$.determinism.max_parallel_cases", "serial"},
    {"network_allowed", "correctness", [](Json& w) { w["determinism"]["network_access"] = "allowed"; }, "$.determinism.network_access", "network-access"},
    {"seed_delivery_unknown", "correctness", [](Json& w) { w["determinism"]["seed_delivery"] = "stdin"; }, "$.determinism.seed_delivery", "enum"},
    {"correctness_without_seed", "correctness", [](Json& w) { w["determinism"]["seed"] = nullptr; }, "$.determinism.seed", "seed-required"},
    {"correctness_seed_not_applicable", "correctness", [](Json& w) { w["determinism"]["seed_delivery"] = "not_applicable"; }, "$.determinism.seed_delivery", "seed-delivery"},
    {"environment_with_seed", "environment", [](Json& w) { w["determinism"]["seed"] = 3; }, "$.determinism.seed", "environment-seed"},
    {"environment_seed_delivery", "environment", [](Json& w) { w["determinism"]["seed_delivery"] = "fixed_fixture"; }, "$.determinism.seed_delivery", "environment-seed"},
    {"seed_negative", "correctness", [](Json& w) { w["determinism"]["seed"] = -1; }, "$.determinism.seed", "range"},
    {"seed_fractional", "correctness", [](Json& w) { w["determinism"]["seed"] = 1.5; }, "$.determinism.seed", "type"},
    {"argv_seed_not_used", "correctness", [](Json& w) { v1case(w)["command"][2] = "7"; }, "$.variants[1]", "seed-delivery-argv"},
    {"environment_seed_not_used", "ab", [](Json& w) { v1case(w)["environment"] = Json::object(); }, "$.variants[1]", "seed-delivery-environment"},
    {"fixed_fixture_but_seed_in_argv", "correctness", [](Json& w) { w["determinism"]["seed_delivery"] = "fixed_fixture"; }, "$.variants[0]", "seed-delivery-mismatch"},
    {"argv_seed_also_in_environment", "correctness", [](Json& w) { v0case(w)["environment"]["KILN_SEED"] = "${seed}"; }, "$.variants[0]", "seed-delivery-mismatch"},
    {"determinism_unknown_key", "correctness", [](Json& w) { w["determinism"]["jitter"] = true; }, "$.determinism.jitter", "unknown-key"},
    // Variables.
    {"variable_name_upper", "correctness", [](Json& w) { w["variables"][0]["name"] = "Threads"; }, "$.variables[0].name", "variable-name"},
    {"variable_reserved_seed", "ab", [](Json& w) { w["variables"][0]["name"] = "seed"; }, "$.variables[0].name", "reserved-variable"},
    {"variable_reserved_model_path", "ab", [](Json& w) { w["variables"][0]["name"] = "model_path"; }, "$.variables[0].name", "reserved-variable"},
    {"variables_unsorted", "correctness",
     [](Json& w) {
       w["variables"].push_back(unused_variable("alpha"));
       v0case(w)["environment"]["ALPHA"] = "${alpha}";
     },
     "$.variables[1]", "sorted"},
    {"variables_duplicate", "correctness", [](Json& w) { w["variables"].push_back(w["variables"][0]); }, "$.variables[1]", "unique"},
    {"variable_type_unknown", "correctness", [](Json& w) { w["variables"][0]["type"] = "float"; }, "$.variables[0].type", "enum"},
    {"required_with_default", "correctness", [](Json& w) { w["variables"][0]["required"] = true; }, "$.variables[0].default", "required-default"},
    {"optional_without_default", "correctness", [](Json& w) { w["variables"][0]["default"] = nullptr; }, "$.variables[0].default", "optional-default"},
    {"default_wrong_type", "correctness", [](Json& w) { w["variables"][0]["default"] = "two"; }, "$.variables[0].default", "default-type"},
    {"default_not_integer", "correctness", [](Json& w) { w["variables"][0]["default"] = 1.5; }, "$.variables[0].default", "default-type"},
    {"minimum_on_string", "ab", [](Json& w) { constraints0(w)["minimum"] = 1; }, "$.variables[0].constraints.minimum", "constraint-applicability"},
    {"minimum_above_maximum", "correctness", [](Json& w) { constraints0(w)["minimum"] = 100; }, "$.variables[0].constraints.minimum", "constraint-range"},
    {"pattern_on_integer", "correctness", [](Json& w) { constraints0(w)["pattern"] = "[0-9]+"; }, "$.variables[0].constraints.pattern", "constraint-applicability"},
    {"pattern_does_not_compile", "ab", [](Json& w) { constraints0(w)["pattern"] = "(bf16"; }, "$.variables[0].constraints.pattern", "pattern-compile"},
    {"default_above_maximum", "correctness", [](Json& w) { w["variables"][0]["default"] = 100; }, "$.variables[0].default", "default-constraint"},
    {"allowed_values_empty", "ab", [](Json& w) { constraints0(w)["allowed_values"] = Json::array(); }, "$.variables[0].constraints.allowed_values", "non-empty"},
    {"allowed_values_wrong_type", "ab", [](Json& w) { constraints0(w)["allowed_values"] = Json::array({1}); }, "$.variables[0].constraints.allowed_values[0]", "constraint-type"},
    {"allowed_values_repeated", "ab", [](Json& w) { constraints0(w)["allowed_values"] = Json::array({"f32", "f32"}); }, "$.variables[0].constraints.allowed_values[1]", "unique"},
    {"variable_unused", "correctness", [](Json& w) { w["variables"].push_back(unused_variable("zeta")); }, "$.variables[1]", "unused-variable"},
    {"required_variable_missing_in_variant", "ab", [](Json& w) { v1case(w)["command"][6] = "f32"; }, "$.variants[1]", "required-variable-unused"},
    {"constraints_missing_pattern", "correctness", [](Json& w) { constraints0(w).erase("pattern"); }, "$.variables[0].constraints.pattern", "missing-key"},
    // Variants.
    {"variant_id_upper", "correctness", [](Json& w) { w["variants"][0]["id"] = "CPU"; }, "$.variants[0].id", "variant-id"},
    {"variants_unsorted", "correctness", [](Json& w) { std::swap(w["variants"][0], w["variants"][1]); }, "$.variants[1]", "sorted"},
    {"variants_duplicate", "ab", [](Json& w) { w["variants"][1]["id"] = "batch1"; }, "$.variants[1]", "unique"},
    {"backend_unknown", "correctness", [](Json& w) { w["variants"][1]["backend"] = "opencl"; }, "$.variants[1].backend", "enum"},
    {"cuda_without_device", "correctness", [](Json& w) { w["variants"][1]["device_requirement"] = "none"; }, "$.variants[1].device_requirement", "device-required"},
    {"cpu_requires_device", "correctness", [](Json& w) { w["variants"][0]["device_requirement"] = "required"; }, "$.variants[0].device_requirement", "cpu-device"},
    {"device_required_but_skip", "correctness", [](Json& w) { w["variants"][1]["skip_policy"] = "skip"; }, "$.variants[1].skip_policy", "skip-policy"},
    {"skip_policy_unknown", "correctness", [](Json& w) { w["variants"][0]["skip_policy"] = "ignore"; }, "$.variants[0].skip_policy", "enum"},
    {"effective_config_array_leaf", "correctness", [](Json& w) { w["variants"][0]["effective_config"]["dtype"] = Json::array({"f32"}); }, "$.variants[0].effective_config.dtype", "effective-config-shape"},
    {"effective_config_bad_key", "correctness", [](Json& w) { w["variants"][0]["effective_config"]["backend"]["Name"] = "x"; }, "$.variants[0].effective_config.backend.Name", "effective-config-shape"},
    {"effective_config_not_object", "correctness", [](Json& w) { w["variants"][0]["effective_config"] = "cpu"; }, "$.variants[0].effective_config", "effective-config-shape"},
    {"cases_empty", "correctness", [](Json& w) { w["variants"][0]["cases"] = Json::array(); }, "$.variants[0].cases", "non-empty"},
    {"variant_unknown_key", "correctness", [](Json& w) { w["variants"][0]["priority"] = 1; }, "$.variants[0].priority", "unknown-key"},
    // Cases.
    {"case_id_bad", "correctness", [](Json& w) { v0case(w)["id"] = "Parity!"; }, "$.variants[0].cases[0].id", "case-id"},
    {"case_id_repeated", "correctness", [](Json& w) { w["variants"][0]["cases"].push_back(v0case(w)); }, "$.variants[0].cases[1].id", "unique"},
    {"command_empty", "correctness", [](Json& w) { v0case(w)["command"] = Json::array(); }, "$.variants[0].cases[0].command", "command-empty"},
    {"command_not_strings", "correctness", [](Json& w) { v0case(w)["command"][1] = 5; }, "$.variants[0].cases[0].command[1]", "type"},
    {"argv0_placeholder", "correctness", [](Json& w) { v0case(w)["command"][0] = "${threads}"; }, "$.variants[0].cases[0].command[0]", "argv0-placeholder"},
    {"sh_dash_c", "environment", [](Json& w) { v0case(w)["command"] = Json::array({"sh", "-c", "uname -a"}); }, "$.variants[0].cases[0].command[0]", "no-shell"},
    {"bash_by_path", "environment", [](Json& w) { v0case(w)["command"] = Json::array({"/bin/bash", "run.sh"}); }, "$.variants[0].cases[0].command[0]", "no-shell"},
    {"env_wrapped_shell", "environment", [](Json& w) { v0case(w)["command"] = Json::array({"/usr/bin/env", "bash", "-c", "uname"}); }, "$.variants[0].cases[0].command[1]", "no-shell"},
    {"setsid_escape", "environment", [](Json& w) { v0case(w)["command"] = Json::array({"setsid", "uname"}); }, "$.variants[0].cases[0].command[0]", "no-escape"},
    {"placeholder_inside_element", "correctness", [](Json& w) { v0case(w)["command"][4] = "--threads=${threads}"; }, "$.variants[0].cases[0].command[4]", "placeholder-whole-element"},
    {"placeholder_unknown", "correctness", [](Json& w) { v0case(w)["command"][4] = "${nthreads}"; }, "$.variants[0].cases[0].command[4]", "unknown-placeholder"},
    {"working_directory_absolute", "correctness", [](Json& w) { v0case(w)["working_directory"] = "/tmp"; }, "$.variants[0].cases[0].working_directory", "working-directory"},
    {"working_directory_dotdot", "correctness", [](Json& w) { v0case(w)["working_directory"] = "build/../../etc"; }, "$.variants[0].cases[0].working_directory", "working-directory"},
    {"working_directory_empty_component", "correctness", [](Json& w) { v0case(w)["working_directory"] = "a//b"; }, "$.variants[0].cases[0].working_directory", "working-directory"},
    {"working_directory_empty", "correctness", [](Json& w) { v0case(w)["working_directory"] = ""; }, "$.variants[0].cases[0].working_directory", "working-directory"},
    {"environment_name_lower", "correctness", [](Json& w) { v0case(w)["environment"]["omp"] = "1"; }, "$.variants[0].cases[0].environment.omp", "environment-name"},
    {"environment_reserved", "correctness", [](Json& w) { v0case(w)["environment"]["KILN_QUALIFICATION_CASE_RESULT"] = "/tmp/x"; }, "$.variants[0].cases[0].environment.KILN_QUALIFICATION_CASE_RESULT", "reserved-environment"},
    {"environment_partial_placeholder", "correctness", [](Json& w) { v0case(w)["environment"]["OMP_NUM_THREADS"] = "x${threads}"; }, "$.variants[0].cases[0].environment.OMP_NUM_THREADS", "placeholder-whole-element"},
    {"environment_value_not_string", "correctness", [](Json& w) { v0case(w)["environment"]["OMP_NUM_THREADS"] = 4; }, "$.variants[0].cases[0].environment.OMP_NUM_THREADS", "type"},
    {"timeout_zero", "correctness", [](Json& w) { v0case(w)["timeout_seconds"] = 0; }, "$.variants[0].cases[0].timeout_seconds", "timeout-range"},
    {"timeout_over_a_day", "correctness", [](Json& w) { v0case(w)["timeout_seconds"] = 100000; }, "$.variants[0].cases[0].timeout_seconds", "timeout-range"},
    {"timeout_fractional", "correctness", [](Json& w) { v0case(w)["timeout_seconds"] = 1.5; }, "$.variants[0].cases[0].timeout_seconds", "type"},
    {"exit_codes_empty", "correctness", [](Json& w) { v0case(w)["expected_exit_codes"] = Json::array(); }, "$.variants[0].cases[0].expected_exit_codes", "non-empty"},
    {"exit_code_out_of_range", "correctness", [](Json& w) { v0case(w)["expected_exit_codes"] = Json::array({256}); }, "$.variants[0].cases[0].expected_exit_codes[0]", "exit-code-range"},
    {"exit_codes_unsorted", "correctness", [](Json& w) { v0case(w)["expected_exit_codes"] = Json::array({1, 0}); }, "$.variants[0].cases[0].expected_exit_codes[1]", "sorted"},
    {"exit_codes_repeated", "correctness", [](Json& w) { v0case(w)["expected_exit_codes"] = Json::array({0, 0}); }, "$.variants[0].cases[0].expected_exit_codes[1]", "unique"},
    {"assertion_stream_unknown", "correctness", [](Json& w) { v0case(w)["output_assertions"][0]["stream"] = "stdin"; }, "$.variants[0].cases[0].output_assertions[0].stream", "enum"},
    {"assertion_match_unknown", "correctness", [](Json& w) { v0case(w)["output_assertions"][0]["match"] = "maybe"; }, "$.variants[0].cases[0].output_assertions[0].match", "enum"},
    {"assertion_pattern_bad", "correctness", [](Json& w) { v0case(w)["output_assertions"][0]["pattern"] = "skipp(ed"; }, "$.variants[0].cases[0].output_assertions[0].pattern", "pattern-compile"},
    {"assertion_pattern_empty", "correctness", [](Json& w) { v0case(w)["output_assertions"][0]["pattern"] = ""; }, "$.variants[0].cases[0].output_assertions[0].pattern", "non-empty"},
    {"assertion_repeated", "correctness", [](Json& w) { v0case(w)["output_assertions"].push_back(v0case(w)["output_assertions"][0]); }, "$.variants[0].cases[0].output_assertions[1]", "unique"},
    {"producer_unknown", "correctness", [](Json& w) { v0case(w)["result_protocol"]["producer"] = "plugin"; }, "$.variants[0].cases[0].result_protocol.producer", "enum"},
    {"runner_metric_redefined", "correctness", [](Json& w) { metrics0(w)[0]["unit"] = "count"; }, "$.variants[0].cases[0].result_protocol.declared_metrics[0]", "runner-metric-definition"},
    {"runner_case_with_command_metric", "environment",
     [](Json& w) {
       v0case(w)["result_protocol"]["declared_metrics"].push_back(
           Json{{"name", "uptime"}, {"unit", "s"}, {"aggregation", "mean"}, {"lower_is_better", nullptr}});
     },
     "$.variants[0].cases[0].result_protocol.declared_metrics[2].name", "command-metric-producer"},
    {"metric_name_upper", "correctness", [](Json& w) { metrics0(w)[1]["name"] = "MaxAbs"; }, "$.variants[0].cases[0].result_protocol.declared_metrics[1].name", "metric-name"},
    {"metric_aggregation_unknown", "correctness", [](Json& w) { metrics0(w)[1]["aggregation"] = "median"; }, "$.variants[0].cases[0].result_protocol.declared_metrics[1].aggregation", "aggregation"},
    {"metric_unit_empty", "correctness", [](Json& w) { metrics0(w)[1]["unit"] = ""; }, "$.variants[0].cases[0].result_protocol.declared_metrics[1].unit", "metric-unit"},
    {"metrics_unsorted", "correctness", [](Json& w) { std::swap(metrics0(w)[0], metrics0(w)[1]); }, "$.variants[0].cases[0].result_protocol.declared_metrics[1]", "sorted"},
    {"case_unknown_key", "correctness", [](Json& w) { v0case(w)["shell"] = true; }, "$.variants[0].cases[0].shell", "unknown-key"},
    {"result_protocol_missing_metrics", "correctness", [](Json& w) { v0case(w)["result_protocol"].erase("declared_metrics"); }, "$.variants[0].cases[0].result_protocol.declared_metrics", "missing-key"},
    {"serving_without_model", "ab", [](Json& w) { w["kind"] = "serving"; }, "$.variants[0]", "model-required"},
    // Comparison policy.
    {"policy_null_for_correctness", "correctness", [](Json& w) { w["comparison_policy"] = nullptr; }, "$.comparison_policy", "comparison-policy-required"},
    {"policy_mode_unknown", "correctness", [](Json& w) { policy(w)["mode"] = "fastest"; }, "$.comparison_policy.mode", "enum"},
    {"cross_backend_not_equal", "correctness", [](Json& w) { rule1(w)["operator"] = "not_greater"; }, "$.comparison_policy.metric_rules[1]", "cross-backend-equal"},
    {"cross_backend_performance_class", "correctness", [](Json& w) { rule1(w)["class"] = "performance"; }, "$.comparison_policy.metric_rules[1]", "cross-backend-equal"},
    {"cross_backend_with_variant_pairs", "correctness",
     [](Json& w) { policy(w)["variant_pairs"] = Json::array({Json{{"baseline", "cpu"}, {"candidate", "cuda"}, {"allowed_effective_config_differences", Json::array()}}}); },
     "$.comparison_policy.variant_pairs", "mode-field"},
    {"backend_pair_same", "correctness", [](Json& w) { policy(w)["backend_pairs"][0]["candidate"] = "cpu"; }, "$.comparison_policy.backend_pairs[0]", "pair-distinct"},
    {"backend_pair_without_variant", "correctness", [](Json& w) { policy(w)["backend_pairs"][0]["candidate"] = "rocm"; }, "$.comparison_policy.backend_pairs[0].candidate", "backend-variant"},
    {"environment_difference_unknown", "correctness", [](Json& w) { policy(w)["allowed_environment_differences"][0] = "gpu"; }, "$.comparison_policy.allowed_environment_differences[0]", "enum"},
    {"environment_differences_unsorted", "correctness", [](Json& w) { policy(w)["allowed_environment_differences"] = Json::array({"driver", "device"}); }, "$.comparison_policy.allowed_environment_differences[1]", "sorted"},
    {"rule_unknown_result", "correctness", [](Json& w) { rule1(w)["result_id"] = "prefill"; }, "$.comparison_policy.metric_rules[1].result_id", "unknown-result"},
    {"rule_undeclared_metric", "correctness", [](Json& w) { rule1(w)["metric"] = "mean_abs_error"; }, "$.comparison_policy.metric_rules[1].metric", "undeclared-metric"},
    {"rule_unit_mismatch", "correctness", [](Json& w) { rule1(w)["unit"] = "rel"; }, "$.comparison_policy.metric_rules[1]", "metric-definition-mismatch"},
    {"rules_unsorted", "correctness", [](Json& w) { std::swap(rule0(w), rule1(w)); }, "$.comparison_policy.metric_rules[1]", "sorted"},
    {"rules_repeated", "correctness", [](Json& w) { rule0(w) = rule1(w); }, "$.comparison_policy.metric_rules[1]", "unique"},
    {"tolerance_negative", "correctness", [](Json& w) { rule1(w)["absolute_tolerance"] = -0.1; }, "$.comparison_policy.metric_rules[1].absolute_tolerance", "tolerance"},
    {"rule_class_unknown", "ab", [](Json& w) { rule0(w)["class"] = "vibes"; }, "$.comparison_policy.metric_rules[0].class", "enum"},
    {"ab_unknown_variant", "ab", [](Json& w) { policy(w)["variant_pairs"][0]["candidate"] = "batch64"; }, "$.comparison_policy.variant_pairs[0].candidate", "unknown-variant"},
    {"ab_undeclared_difference", "ab", [](Json& w) { policy(w)["variant_pairs"][0]["allowed_effective_config_differences"] = Json::array(); }, "$.comparison_policy.variant_pairs[0].allowed_effective_config_differences", "undeclared-config-difference"},
    {"ab_declared_leaf_unchanged", "ab", [](Json& w) { policy(w)["variant_pairs"][0]["allowed_effective_config_differences"].push_back("kv.block"); }, "$.comparison_policy.variant_pairs[0].allowed_effective_config_differences[1]", "config-leaf-unchanged"},
    {"ab_pair_same_variant", "ab", [](Json& w) { policy(w)["variant_pairs"][0]["candidate"] = "batch1"; }, "$.comparison_policy.variant_pairs[0]", "pair-distinct"},
    {"ab_wrong_direction", "ab", [](Json& w) { rule0(w)["operator"] = "not_greater"; }, "$.comparison_policy.metric_rules[0].operator", "operator-direction"},
    {"ab_with_backend_pairs", "ab", [](Json& w) { policy(w)["backend_pairs"] = Json::array({Json{{"baseline", "cpu"}, {"candidate", "cuda"}}}); }, "$.comparison_policy.backend_pairs", "mode-field"},
    {"ab_different_backends", "ab",
     [](Json& w) {
       w["variants"][1]["backend"] = "cuda";
       w["variants"][1]["device_requirement"] = "required";
     },
     "$.comparison_policy.variant_pairs[0]", "pair-backend"},
    {"ab_different_cases", "ab", [](Json& w) { v1case(w)["id"] = "decode2"; }, "$.comparison_policy.variant_pairs[0]", "pair-cases"},
    {"ab_rules_empty", "ab", [](Json& w) { policy(w)["metric_rules"] = Json::array(); }, "$.comparison_policy.metric_rules", "non-empty"},
    {"policy_unknown_key", "ab", [](Json& w) { policy(w)["baseline"] = "batch1"; }, "$.comparison_policy.baseline", "unknown-key"},
    {"same_environment_with_pairs", "ab", [](Json& w) { policy(w)["mode"] = "same_environment_performance"; }, "$.comparison_policy.variant_pairs", "mode-field"},
};

class InvalidWorkloads : public ::testing::TestWithParam<InvalidWorkload> {};

TEST_P(InvalidWorkloads, RejectedForItsReasonAtItsPath) {
  const InvalidWorkload& c = GetParam();
  Json doc = load_fixture(c.base);
  c.mutate(doc);
  WorkloadCheck check = check_workload_text(doc.dump(2));
  EXPECT_TRUE(check.issues.has(c.path, c.rule))
      << "expected [" << c.rule << "] at " << c.path << ", got:\n" << check.issues.to_string();
}

INSTANTIATE_TEST_SUITE_P(Spec, InvalidWorkloads, ::testing::ValuesIn(kInvalid),
                         [](const ::testing::TestParamInfo<InvalidWorkload>& info) { return std::string(info.param.name); });

TEST(InvalidWorkloadTable, HasAtLeastSixtyDistinctCases) {
  EXPECT_GE(std::size(kInvalid), 60u);
}

// Text-level defects the JSON model cannot express.
struct RawDefect {
  const char* name;
  const char* find;
  const char* replace;
  const char* path;
};

class RawWorkloadDefects : public ::testing::TestWithParam<RawDefect> {};

TEST_P(RawWorkloadDefects, RejectedByStrictJsonAtPath) {
  std::string text = testing::read_text(testing::fixture_path("correctness"));
  size_t at = text.find(GetParam().find);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string(GetParam().find).size(), GetParam().replace);
  WorkloadCheck check = check_workload_text(text);
  EXPECT_TRUE(check.issues.has(GetParam().path, "json")) << check.issues.to_string();
}

INSTANTIATE_TEST_SUITE_P(
    Spec, RawWorkloadDefects,
    ::testing::Values(RawDefect{"duplicate_key", "\"kind\": \"correctness\",", "\"kind\": \"correctness\", \"kind\": \"soak\",", "$.kind"},
                      RawDefect{"nan", "\"repetitions\": 2", "\"repetitions\": NaN", "$.determinism.repetitions"},
                      RawDefect{"infinity_tolerance", "\"absolute_tolerance\": 0.001", "\"absolute_tolerance\": Infinity",
                                "$.comparison_policy.metric_rules[1].absolute_tolerance"},
                      RawDefect{"not_round_trip", "\"seed\": 7", "\"seed\": 7.00000000000000000001", "$.determinism.seed"},
                      RawDefect{"overflow", "\"seed\": 7", "\"seed\": 7e999", "$.determinism.seed"}),
    [](const ::testing::TestParamInfo<RawDefect>& info) { return std::string(info.param.name); });

TEST(ValidWorkloads, CommittedFixturesAreAccepted) {
  for (const char* name : {"correctness", "environment", "ab"}) {
    WorkloadCheck check = check_workload_text(testing::read_text(testing::fixture_path(name)));
    EXPECT_TRUE(check.issues.empty()) << name << ":\n" << check.issues.to_string();
  }
}

TEST(ValidWorkloads, AcceptedVariations) {
  std::vector<std::function<void(Json&)>> variations = {
      [](Json& w) { w["determinism"]["seed_delivery"] = "fixed_fixture";
                    for (auto& v : w["variants"]) v["cases"][0]["command"] = Json::array({"./t", "--threads", "${threads}"}); },
      [](Json& w) { w["variants"][1]["cases"][0]["output_assertions"].push_back(
                        Json{{"stream", "stderr"}, {"match", "required"}, {"pattern", "(?<=max )error"}}); },
      [](Json& w) { w["variables"][0]["required"] = true; w["variables"][0]["default"] = nullptr; },
      [](Json& w) { w["variants"][0]["effective_config"] = Json::object(); },
  };
  for (size_t i = 0; i < variations.size(); ++i) {
    Json doc = load_fixture("correctness");
    variations[i](doc);
    WorkloadCheck check = check_workload_text(doc.dump());
    EXPECT_TRUE(check.issues.empty()) << "variation " << i << ":\n" << check.issues.to_string();
  }
}

TEST(WorkloadModel, ParsesEveryFieldOfTheFixture) {
  WorkloadCheck check = check_workload_text(testing::read_text(testing::fixture_path("correctness")));
  ASSERT_TRUE(check.issues.empty()) << check.issues.to_string();
  const Workload& w = check.workload;
  EXPECT_EQ(w.workload_id, "fixture-correctness-v1");
  EXPECT_EQ(w.determinism.seed, 7);
  EXPECT_EQ(w.determinism.repetitions, 2);
  ASSERT_EQ(w.variants.size(), 2u);
  const WorkloadCase& c = w.variants[0].cases[0];
  EXPECT_EQ(c.command.size(), 5u);
  EXPECT_EQ(c.command[2], "${seed}");
  ASSERT_EQ(c.environment.size(), 1u);
  EXPECT_EQ(c.environment[0].first, "OMP_NUM_THREADS");
  EXPECT_EQ(c.declared_metrics[1].lower_is_better, true);
  ASSERT_TRUE(w.comparison_policy.has_value());
  EXPECT_DOUBLE_EQ(w.comparison_policy->metric_rules[1].absolute_tolerance, 0.001);
  EXPECT_EQ(w.digest.substr(0, 7), "sha256:");
  EXPECT_EQ(w.digest.size(), 7u + 64u);
}

TEST(ProjectWorkloads, EveryCommittedWorkloadValidates) {
  size_t seen = 0;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(std::string(KILN_SOURCE_DIR) + "/qualification/workloads")) {
    if (e.path().extension() != ".json") continue;
    ++seen;
    WorkloadCheck check = check_workload_text(testing::read_text(e.path().string()));
    EXPECT_TRUE(check.issues.empty()) << e.path() << ":\n" << check.issues.to_string();
    EXPECT_EQ(check.workload.workload_id + ".json", e.path().filename().string()) << "file name follows the workload id";
  }
  EXPECT_GE(seen, 4u);
}

TEST(ProjectWorkloads, CoreSuiteTreatsSkipMarkersNotTestNamesAsSkips) {
  Result<Workload> w = load_workload(std::string(KILN_SOURCE_DIR) + "/qualification/workloads/correctness-core-v4.json");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const WorkloadCase& tests = w->variants[0].cases[1];
  ASSERT_EQ(tests.id, "core-tests");
  ASSERT_EQ(tests.output_assertions[0].match, "forbidden");
  Result<Regex> skip = Regex::compile(tests.output_assertions[0].pattern);
  ASSERT_TRUE(skip.ok());
  auto found = [&](std::string_view text) { return skip->find(text).value().has_value(); };
  EXPECT_TRUE(found("  5/20 Test  #5: Gdn.Chunked ......................***Skipped   0.01 sec\n"));
  EXPECT_TRUE(found("[  SKIPPED ] Cuda.Parity (0 ms)\n"));
  EXPECT_TRUE(found("ok\nSKIPPED: no CUDA device\n"));
  EXPECT_FALSE(found("12/20 Test #12: RunnerTest.CommandReportingSkippedCannotPass ....   Passed\n"));
  // The cuda variant runs the binaries itself (scripts/run-test-binaries): a gtest skip fails it too.
  const Variant& cuda = w->variants[1];
  ASSERT_EQ(cuda.id, "cuda");
  ASSERT_EQ(cuda.cases[1].id, "core-tests");
  Result<Regex> cuda_skip = Regex::compile(cuda.cases[1].output_assertions[0].pattern);
  ASSERT_TRUE(cuda_skip.ok());
  EXPECT_TRUE(cuda_skip->find("[  SKIPPED ] CudaLatency.LmHeadM1 (0 ms)\n").value().has_value());
  EXPECT_TRUE(cuda_skip->find("x\nSKIPPED: no thresholds are locked for NVIDIA A100\n").value().has_value());
  EXPECT_FALSE(cuda_skip->find("cuda_latency_tests rc=0 12s [  PASSED  ] 11 tests.\n").value().has_value());
}

TEST(WorkloadValidation, ReportsEveryProblemNotJustTheFirst) {
  Json doc = load_fixture("correctness");
  doc["kind"] = "benchmark";
  v0case(doc)["timeout_seconds"] = 0;
  policy(doc)["mode"] = "fastest";
  WorkloadCheck check = check_workload_text(doc.dump());
  EXPECT_TRUE(check.issues.has("$.kind", "enum"));
  EXPECT_TRUE(check.issues.has("$.variants[0].cases[0].timeout_seconds", "timeout-range"));
  EXPECT_TRUE(check.issues.has("$.comparison_policy.mode", "enum"));
}

}  // namespace
}  // namespace kiln::qualify
