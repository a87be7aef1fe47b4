// The commit this binary was built from, compiled in (cmake/build_stamp.cmake generates the one
// source that holds it), so that what the binary records names its own source, not an operator's.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln {

struct BuildStamp {
  std::string_view commit;  // 40 hex digits; "unknown" when built outside a git checkout
  bool dirty = false;       // tracked files differed from the commit at build time
  bool known() const { return commit != "unknown"; }
};

BuildStamp build_stamp();  // defined in the generated source

// "commit <40 hex>", with ", modified" when dirty, or "commit unknown": the stamp for people
// (kiln --version).
std::string build_stamp_label();

// {"commit": "<40 hex or unknown>", "dirty": bool}: the stamp in every document a binary writes.
nlohmann::json build_stamp_json();

}  // namespace kiln
