#include "core/json_text.h"

#include <string>

namespace kiln {

Status check_json_depth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return invalid_argument("nests deeper than " + std::to_string(max_depth) + " levels (byte " + std::to_string(i) + ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return {};
}

namespace {

template <class Json>
Result<Json> parse_limited(std::string_view text, std::string_view what) {
  if (Status st = check_json_depth(text); !st.ok()) return invalid_argument(std::string(what) + " " + st.message());
  try {
    return Json::parse(text);
  } catch (const typename Json::exception& e) {
    return invalid_argument(std::string(what) + " is not valid JSON: " + e.what());
  }
}

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, std::string_view what) {
  return parse_limited<nlohmann::json>(text, what);
}

Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text, std::string_view what) {
  return parse_limited<nlohmann::ordered_json>(text, what);
}

}  // namespace kiln
