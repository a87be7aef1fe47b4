// Regular expressions for workload patterns (names, output assertions, variable constraints),
// through PCRE2: linear-time-ish matching on large captured output without recursion limits.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln::qualify {

class Regex {
 public:
  // Compiles in byte mode (captured output need not be UTF-8); the error names the pattern and the offset PCRE2 complains about.
  static Result<Regex> compile(std::string_view pattern);
  // Whether the pattern matches somewhere in `text`.
  bool search(std::string_view text) const;
  // Whether the pattern matches all of `text`.
  bool full_match(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<Code> code_;
};

// Full match of a pattern known to be valid (the schema's own name patterns).
bool full_match(std::string_view pattern, std::string_view text);

}  // namespace kiln::qualify
