// StopMatcher: a request's stop strings matched on the generated text as it streams. It releases
// text that can no longer begin a stop string, holds back a suffix that still could, and on a
// match drops the stop string and everything after it (OpenAI: the stop sequence is not output).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored; with none left every delta passes straight through.
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds a delta of whole code points; returns the text that became final. The match that
  // stops is the first stop string to complete in the stream; of those completing at the same
  // byte, the one that starts earliest. After a match, and after finish(), returns "".
  std::string feed(std::string_view delta);
  // The end of generation: returns the held-back text (empty after a match).
  std::string finish();
  // True once a stop string matched.
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // a suffix of the text that is a proper prefix of some stop string
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace kiln
