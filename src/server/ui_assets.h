// The dashboard's static files (ui/), compiled into the binary by src/server/embed_ui.cmake, and
// the content type each is served with.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace kiln {

struct UiAsset {
  const char* name;            // the file's name in ui/, served at /ui/<name>
  const unsigned char* data;   // its bytes (followed by a 0 that is not part of them)
  size_t size;
};

// Every embedded file, sorted by name.
std::span<const UiAsset> ui_assets();

// The embedded file called `name`, or null.
const UiAsset* find_ui_asset(std::string_view name);

// "text/html; charset=utf-8" etc. by extension; application/octet-stream for unknown ones.
std::string_view ui_content_type(std::string_view name);

}  // namespace kiln
