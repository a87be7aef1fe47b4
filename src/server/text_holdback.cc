#include "server/text_holdback.h"

#include <algorithm>

namespace kiln {

size_t marker_prefix_suffix(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

bool is_trim_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string EdgeTrimmer::feed(std::string_view delta) {
  if (at_start_) {
    size_t i = 0;
    while (i < delta.size() && is_trim_space(delta[i])) ++i;
    delta.remove_prefix(i);
    if (delta.empty()) return {};
    at_start_ = false;
  }
  if (edges_ == Edges::kLeading) return std::string(delta);
  size_t end = delta.size();
  while (end > 0 && is_trim_space(delta[end - 1])) --end;
  std::string out;
  if (end > 0) {
    out = std::move(held_);
    out.append(delta.substr(0, end));
    held_.clear();
  }
  held_.append(delta.substr(end));
  return out;
}

void EdgeTrimmer::end_span() {
  held_.clear();
  at_start_ = true;
}

}  // namespace kiln
