#include "core/names.h"

namespace kiln {

namespace {

bool alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

}  // namespace

Status check_folder_name(std::string_view kind, const std::string& name) {
  const std::string what = std::string(kind) + " '" + name + "'";
  if (name.empty() || name.size() > 64)
    return invalid_argument(what + " must be 1 to 64 characters, got " + std::to_string(name.size()));
  for (char c : name)
    if (!alnum(c) && c != '.' && c != '_' && c != '-')
      return invalid_argument(what + " may hold only letters, digits, '.', '_' and '-'");
  if (!alnum(name.front())) return invalid_argument(what + " must start with a letter or a digit");
  return {};
}

bool is_reserved_adapter_name(const std::string& name) {
  constexpr std::string_view kCheckpoints = ".checkpoints";
  return name.rfind("post-eval.", 0) == 0 ||
         (name.size() >= kCheckpoints.size() && name.compare(name.size() - kCheckpoints.size(), kCheckpoints.size(), kCheckpoints) == 0);
}

}  // namespace kiln
