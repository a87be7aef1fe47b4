// Scorers (docs/evals.md "Scorers"): does one generated output answer an example's expected
// answer? Each scorer is a small pure function of (spec, expected, output) with a `detail` that
// says why, so an outcome can be read without re-running it. A reasoning block is removed from
// the output before any scorer sees it; auto-detection picks a scorer from the expected answer
// when neither the example nor its suite names one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

enum class ScorerType { kExact, kContains, kRegex, kNumericTolerance, kMultipleChoice, kJsonValidity, kJsonSchema, kAll, kAny };
const char* scorer_type_name(ScorerType t);

struct ScorerSpec {
  ScorerType type = ScorerType::kExact;
  std::optional<bool> case_sensitive;  // unset: the type's default (regex true, others false)
  std::string pattern;                 // regex: "" uses the expected answer
  double tolerance = 1e-6;             // numeric_tolerance: absolute
  double relative = 0;                 // numeric_tolerance: times |expected|
  std::string choices = "ABCDE";       // multiple_choice
  std::optional<bool> require_match;   // json_validity: unset: when expected is non-empty
  nlohmann::json schema;               // json_schema: the JSON Schema (null: the expected answer is the schema)
  std::vector<ScorerSpec> of;          // all / any
  std::vector<std::optional<nlohmann::json>> of_expected;  // per member: its own expected, if given

  nlohmann::json to_json() const;  // the canonical object form
};

// A field of a request at fault, by its JSON path ("examples[3].scorer.type").
struct FieldError {
  std::string field;
  std::string message;
};

// Parses a scorer given as a string ("exact") or an object ({"type": ..., options}); `path` names
// it in errors.
std::optional<FieldError> parse_scorer(const nlohmann::json& j, const std::string& path, ScorerSpec& out);

// The scorer auto-detection picks for `expected` (docs/evals.md "Auto-detection").
ScorerSpec auto_scorer(const nlohmann::json& expected);

struct ScoreResult {
  bool passed = false;
  std::string detail;
};

// Scores `output` against `expected` (a string, or any JSON value for json_validity; the schema for
// json_schema when its spec carries none).
ScoreResult score(const ScorerSpec& spec, const nlohmann::json& expected, const std::string& output);

// The pieces, exposed for tests and reuse. Those that run a regular expression return the error
// of a match that hit its limit (docs/evals.md "Patterns").
std::string strip_reasoning(const std::string& output);  // drops everything up to the last </think>
std::string normalize_text(const std::string& s, bool case_sensitive);  // trim, collapse whitespace, fold case
Result<std::optional<double>> parse_number_exact(const std::string& s);  // the whole trimmed string as a number
Result<std::optional<double>> last_number(const std::string& s);        // the last number in free text
Result<std::optional<double>> expected_number(const std::string& expected);  // the whole text, else its last number
Result<std::optional<char>> chosen_letter(const std::string& output, const std::string& choices);
std::string expected_text(const nlohmann::json& expected);              // a string as is, else its JSON dump

}  // namespace kiln
