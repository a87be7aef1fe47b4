// The filtered environment a case starts from: a short allowlist copied from the runner's own
// environment; everything else (tokens, proxies, shell state) is withheld.
#pragma once

#include <string>
#include <vector>

namespace kiln::qualify {

// Names copied from the runner's environment when set.
const std::vector<std::string>& inherited_environment_names();

// "NAME=value" for each allowlisted name set in this process, in allowlist order.
std::vector<std::string> filtered_environment();

// Sets NAME=value in `env` (replacing an earlier NAME).
void set_environment(std::vector<std::string>& env, const std::string& name, const std::string& value);

}  // namespace kiln::qualify
