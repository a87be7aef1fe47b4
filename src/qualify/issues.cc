#include "qualify/issues.h"

namespace kiln::qualify {

std::string Issue::to_string() const { return path + ": [" + rule + "] " + message; }

void Issues::add(std::string path, std::string rule, std::string message) {
  items_.push_back({std::move(path), std::move(rule), std::move(message)});
}

bool Issues::has(const std::string& path, const std::string& rule) const {
  for (const Issue& i : items_) {
    if (i.path == path && i.rule == rule) return true;
  }
  return false;
}

std::string Issues::to_string() const {
  std::string out;
  for (const Issue& i : items_) out += i.to_string() + "\n";
  return out;
}

Status Issues::to_status(const std::string& context) const {
  if (items_.empty()) return Status::ok_status();
  std::string msg = context + ": " + std::to_string(items_.size()) + " problem(s):\n" + to_string();
  if (!msg.empty() && msg.back() == '\n') msg.pop_back();
  return format_error(msg);
}

}  // namespace kiln::qualify
