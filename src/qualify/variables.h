// Resolves `--var NAME=VALUE` arguments against a workload's declared variables: unknown or
// repeated names, values of the wrong type or outside the constraints, and missing required
// variables are refusals; optional variables take their defaults.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "qualify/strict_json.h"
#include "qualify/workload.h"

namespace kiln::qualify {

struct ResolvedVariables {
  JsonValue parameters;                              // name -> typed value, sorted by name
  std::map<std::string, std::string> placeholder_values;  // name -> argv/environment text
};

Result<ResolvedVariables> resolve_variables(const Workload& w, const std::vector<std::pair<std::string, std::string>>& given);

// Splits "NAME=VALUE"; the error names the argument.
Result<std::pair<std::string, std::string>> parse_var_argument(const std::string& arg);

}  // namespace kiln::qualify
