// The committed valid workload fixtures, loaded as mutable JSON for tests that break one rule at a time.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::qualify::testing {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// name: "correctness", "environment" or "ab" (tests/fixtures/qualify/valid_<name>.json).
inline std::string fixture_path(const std::string& name) {
  return std::string(KILN_FIXTURES_DIR) + "/qualify/valid_" + name + ".json";
}

inline nlohmann::ordered_json load_fixture(const std::string& name) {
  return nlohmann::ordered_json::parse(read_text(fixture_path(name)));
}

}  // namespace kiln::qualify::testing
