// An eval suite (docs/evals.md "Registering a suite", "Storage"): examples of a prompt
// (messages), an expected answer and a scorer (as registered, and resolved: auto-detection
// applied), plus the run defaults. Parsing validates everything and names the field at fault;
// the store keeps each suite as manifest.json + examples.jsonl under one directory, written to a
// staging directory and renamed into place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "eval/scorer.h"

namespace kiln {

struct EvalExample {
  nlohmann::json messages;  // [{role, content}, ...], the prompt
  nlohmann::json expected;  // a string, or any JSON value (json_validity), or a schema (json_schema)
  nlohmann::json scorer;    // as registered (null: the suite's default, else auto-detected)
  ScorerSpec resolved;
};

struct EvalSuite {
  std::string name;
  std::string description;
  int64_t max_tokens = 64;
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  nlohmann::json scorer;             // the suite's default scorer as registered, or null
  std::string source = "api";        // "api" | "synthesize"
  nlohmann::json holdout;            // null, or {fraction, seed, source_examples, source_indices}
  double created_at = 0;
  std::vector<EvalExample> examples;

  std::string examples_jsonl() const;  // the examples.jsonl bytes
  std::string sha256() const;          // of examples_jsonl(): the suite's identity in a run
  nlohmann::json manifest() const;     // manifest.json
  nlohmann::json summary() const;      // the API's summary (docs/evals.md)
  nlohmann::json detail() const;       // summary + examples
};

// Parses a registration body. `overwrite` receives the body's flag.
std::optional<FieldError> parse_suite(const nlohmann::json& body, EvalSuite& out, bool* overwrite = nullptr);

// Resolves every example's scorer (its own, else the suite's default, else auto-detection) and
// checks regexes that come from `expected`; errors name examples[i].
std::optional<FieldError> resolve_scorers(EvalSuite& suite);

Status check_suite_name(const std::string& name);

class SuiteStore {
 public:
  explicit SuiteStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }
  Status save(const EvalSuite& suite, bool overwrite);  // kFailedPrecondition when it exists and !overwrite
  Result<EvalSuite> load(const std::string& name) const;  // kNotFound naming it
  std::vector<EvalSuite> list() const;                   // by name; unreadable suites skipped (logged)
  Status remove(const std::string& name);                // kNotFound naming it

 private:
  std::string dir_;
};

}  // namespace kiln
