// Effective configuration: a nested object of scalars that says how a variant is configured; two
// variants (or two receipts) differ exactly where their leaves differ.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "qualify/issues.h"
#include "qualify/strict_json.h"

namespace kiln::qualify {

// Records an issue for a non-object root, a bad key, an array/null leaf or an empty object.
void check_effective_config(const JsonValue& config, const std::string& path, Issues& issues);

// Leaves as (dotted path, value), in document order.
std::vector<std::pair<std::string, const JsonValue*>> config_leaves(const JsonValue& config);

// Dotted leaf paths whose values differ, or that exist on one side only; sorted.
std::vector<std::string> config_differences(const JsonValue& a, const JsonValue& b);

}  // namespace kiln::qualify
