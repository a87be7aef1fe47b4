#include "qualify/placeholder.h"

#include "qualify/regex.h"

namespace kiln::qualify {

std::optional<std::string> whole_placeholder(std::string_view s) {
  if (s.size() < 4 || s.substr(0, 2) != "${" || s.back() != '}') return std::nullopt;
  std::string_view name = s.substr(2, s.size() - 3);
  if (!full_match("[a-z][a-z0-9_]{1,63}", name)) return std::nullopt;
  return std::string(name);
}

bool mentions_placeholder(std::string_view s) { return s.find("${") != std::string_view::npos; }

std::string expand_placeholder(const std::string& s, const std::map<std::string, std::string>& values) {
  std::optional<std::string> name = whole_placeholder(s);
  if (!name) return s;
  auto it = values.find(*name);
  return it == values.end() ? s : it->second;
}

}  // namespace kiln::qualify
