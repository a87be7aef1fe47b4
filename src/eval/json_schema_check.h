// Whether a JSON value validates against a JSON Schema: the json_schema scorer's check, written
// independently of the grammar layer (whose schema compiler generates a narrower language: one
// property order, bounded whitespace), so that any valid document passes, however it was written.
// Keywords: type, enum, const, properties, required, additionalProperties, patternProperties,
// items (schema or false), prefixItems, minItems, maxItems, uniqueItems, contains, minLength,
// maxLength (characters), pattern (core's Regex, searched), minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, multipleOf, minProperties, maxProperties, anyOf, allOf, oneOf, not, and $ref
// to a JSON pointer inside the schema ("#", "#/$defs/x"); format too when asked to assert it (the
// formats of eval/json_format). Other keywords (titles, ...) are annotations.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

struct JsonSchemaCheckOptions {
  // Whether "format" asserts (JSON Schema's format-assertion vocabulary; a format
  // json_format_holds does not know is then a violation) rather than annotates.
  bool assert_format = false;
};

// nullopt when `value` validates; otherwise why not, naming the value's JSON pointer ("/items/2:
// expected an integer").
std::optional<std::string> json_schema_violation(const nlohmann::json& schema, const nlohmann::json& value,
                                                 const JsonSchemaCheckOptions& options = {});

}  // namespace kiln
