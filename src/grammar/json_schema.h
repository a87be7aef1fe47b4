// JSON Schema as a grammar of the JSON texts that validate: types, properties / required /
// additionalProperties, enum and const, arrays with prefixItems / items / minItems / maxItems,
// anyOf, $ref into the document ($defs, definitions, any pointer), string lengths, patterns and
// formats that are regular, and number bounds a grammar can express. Every other keyword is
// refused, naming its JSON pointer path (docs/grammar.md lists both).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kiln::grammar {

struct JsonSchemaOptions {
  // Whitespace bytes allowed between two JSON tokens (0: compact JSON). Bounded so that
  // generation closes the document instead of running on in whitespace.
  int max_whitespace = 4;
  // Digits allowed in a number's integer part and fraction where bounds do not limit them.
  int max_digits = 16;
};

// Errors are kUnsupported for a keyword or value this compiler cannot express ("/properties/age/
// multipleOf is not supported") and kInvalidArgument for a malformed schema, each naming the path.
// An object's properties are written in the schema's order; additionalProperties absent means
// none (strict mode's rule).
Result<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});
Result<Grammar> json_schema_grammar(std::string_view schema_text, const JsonSchemaOptions& options = {});

// JSON Schema values as expressions of a grammar that holds more than one document (a tool call
// wraps its arguments in other text): `of` adds the rules of `schema`, a part of `root` whose
// pointer is `path` ("" for root itself; $ref resolves within root), to `g`.
class JsonSchemaExprs {
 public:
  JsonSchemaExprs(Grammar& g, const nlohmann::ordered_json& root, const JsonSchemaOptions& options = {});
  ~JsonSchemaExprs();
  Result<ExprId> of(const nlohmann::ordered_json& schema, const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A key as a JSON pointer token ('~' as "~0", '/' as "~1").
std::string pointer_escape(std::string_view token);

// Any JSON value (what a schema of `true` allows).
Grammar any_json_grammar(const JsonSchemaOptions& options = {});

}  // namespace kiln::grammar
