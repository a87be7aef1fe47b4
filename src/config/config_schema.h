// The configuration schema: one row per field of KilnConfig with its dotted name, type, default,
// constraints, help text and accessors into the struct. Everything that reads, checks, prints or
// documents configuration walks this one table (config_schema.cc).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_value.h"
#include "config/kiln_config.h"
#include "core/status.h"

namespace kiln {

// One end of a numeric range.
struct Bound {
  double value = 0;
  bool inclusive = true;
};

struct ConfigField {
  std::string_view section;  // "prefix_cache"
  std::string_view key;      // "max_blocks"
  FieldType type = FieldType::kString;
  std::optional<Bound> min, max;          // integers and floats
  std::vector<std::string_view> choices;  // enums
  std::string_view help;                  // one line
  bool secret = false;                    // renderings show whether it is set, never the value
  ConfigValue (*get)(const KilnConfig&) = nullptr;
  void (*set)(KilnConfig&, const ConfigValue&) = nullptr;  // the value holds the field's alternative

  std::string name() const;             // "prefix_cache.max_blocks"
  std::string env_var() const;          // "KILN_PREFIX_CACHE_MAX_BLOCKS"
  ConfigValue default_value() const;    // read from a default-constructed KilnConfig
  // "0..65535", ">= 16", "(0, 1]", "stable | experimental | maintenance"; "" when unconstrained.
  std::string constraint() const;
  // Range and enum checks (and finiteness of floats). The message names the value and the allowed
  // ones ("70000 is outside 0..65535"), not the field: callers add the field and where it came from.
  Status check(const ConfigValue& value) const;
};

// Every field, section by section in KilnConfig's order.
const std::vector<ConfigField>& config_schema();

// The field named `name` ("server.port"), or nullptr.
const ConfigField* find_config_field(std::string_view name);

// Section names in schema order ("server", "model", ..., "prefix_cache", ...).
const std::vector<std::string_view>& config_sections();

}  // namespace kiln
