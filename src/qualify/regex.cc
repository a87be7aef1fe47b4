#include "qualify/regex.h"

#include "core/regex.h"

namespace kiln::qualify {

bool full_match(std::string_view pattern, std::string_view text) {
  Result<Regex> r = Regex::compile(pattern);
  return r.ok() && r->full_match(text).value_or(false);
}

}  // namespace kiln::qualify
