// Whole-value matches of the qualification schema's own patterns (ids, names, digests), through
// core's Regex.
#pragma once

#include <string_view>

namespace kiln::qualify {

// Whether `pattern` matches all of `text`; false when it does not compile or hits a limit.
bool full_match(std::string_view pattern, std::string_view text);

}  // namespace kiln::qualify
