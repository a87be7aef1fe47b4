// Whether a JSON value validates against a JSON Schema: the json_schema scorer's check, written
// independently of the grammar layer (whose schema compiler generates a narrower language: one
// property order, bounded whitespace), so that any valid document passes, however it was written.
// Keywords: type, enum, const, properties, required, additionalProperties, patternProperties,
// items (schema or false), prefixItems, minItems, maxItems, uniqueItems, contains, minLength,
// maxLength (characters), pattern (core's Regex, searched), minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, multipleOf, minProperties, maxProperties, anyOf, allOf, oneOf, not, and $ref
// to a JSON pointer inside the schema ("#", "#/$defs/x"). Other keywords (format, titles, ...) are
// annotations.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

// nullopt when `value` validates; otherwise why not, naming the value's JSON pointer ("/items/2:
// expected an integer").
std::optional<std::string> json_schema_violation(const nlohmann::json& schema, const nlohmann::json& value);

}  // namespace kiln
