// Every rule violation found in a qualification document, each with the JSON path it concerns and
// the name of the rule it breaks, so that all problems are reported at once, not just the first.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::qualify {

struct Issue {
  std::string path;     // "$.variants[0].cases[1].command[0]"
  std::string rule;     // short stable rule name, e.g. "placeholder-whole-element"
  std::string message;  // what is wrong, naming the bad value
  std::string to_string() const;  // "PATH: [rule] message"
};

class Issues {
 public:
  void add(std::string path, std::string rule, std::string message);
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  const std::vector<Issue>& items() const { return items_; }
  bool has(const std::string& path, const std::string& rule) const;
  // One issue per line.
  std::string to_string() const;
  // OK when empty; otherwise kFormatError "<context>: N problem(s):\n<lines>".
  Status to_status(const std::string& context) const;

 private:
  std::vector<Issue> items_;
};

}  // namespace kiln::qualify
