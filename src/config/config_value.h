// ConfigValue: the value of one configuration field, and its text form: parsing the strings that
// environment variables and flags carry, and printing a value the way kiln.toml would spell it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "core/status.h"

namespace kiln {

// kEnum values are strings restricted to the field's choices (checked by the schema).
enum class FieldType { kString, kInteger, kFloat, kBool, kEnum };

// "string", "integer", "float", "bool", "enum".
const char* field_type_name(FieldType type);

using ConfigValue = std::variant<std::string, int64_t, double, bool>;

// Parses the text of an environment variable or flag as a value of `type`. Integers and floats
// must be the whole text ("80x80" is refused); bools are exactly true, false, 1 or 0. The error
// message names the text ("'80x80' is not an integer").
Result<ConfigValue> parse_config_value(FieldType type, std::string_view text);

// The TOML spelling: 8420, 0.9, true, "127.0.0.1" (strings quoted and escaped).
std::string format_config_value(const ConfigValue& value);

}  // namespace kiln
