// Text before the held suffix was already scanned and is released; any match that completes in a
// new delta therefore starts inside held_ + delta, so only that is searched.
#include "server/stop_matcher.h"

#include <algorithm>

#include "server/text_holdback.h"

namespace kiln {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::feed(std::string_view delta) {
  if (stopped_ || finished_) return {};
  held_.append(delta);
  size_t best_end = std::string::npos;
  size_t best_pos = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t pos = held_.find(s);  // the first occurrence also ends first
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
    }
  }
  if (best_pos != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best_pos);
    held_.clear();
    return out;
  }
  size_t keep = 0;
  for (const std::string& s : stops_) keep = std::max(keep, marker_prefix_suffix(held_, s));
  size_t cut = held_.size() - keep;
  // Stop strings are whole code points, so this only moves for a malformed one.
  while (cut > 0 && cut < held_.size() && (static_cast<unsigned char>(held_[cut]) & 0xC0) == 0x80) --cut;
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

std::string StopMatcher::finish() {
  finished_ = true;
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace kiln
