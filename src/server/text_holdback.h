// What streaming text parsers hold back between deltas: a suffix that may still grow into a
// marker (a stop string, a tag), and whitespace that may turn out to end a trimmed span.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

// The length of the longest suffix of `text` that is a proper prefix of `marker` (0 if none):
// the bytes that must wait for the next delta before they can be released.
size_t marker_prefix_suffix(std::string_view text, std::string_view marker);

// True for the ASCII whitespace the parsers trim: space, \t, \n, \r.
bool is_trim_space(char c);

// Streams one span of text with its edges trimmed of ASCII whitespace (is_trim_space).
// Leading whitespace is dropped. With kBoth, a whitespace run is held back until non-whitespace
// follows it (then it is released with it) or the span ends (then it is dropped).
class EdgeTrimmer {
 public:
  enum class Edges { kLeading, kBoth };
  explicit EdgeTrimmer(Edges edges = Edges::kBoth) : edges_(edges) {}

  // The text of `delta` that is final.
  std::string feed(std::string_view delta);
  // Ends the span: held whitespace is dropped and the next feed starts a new span.
  void end_span();

 private:
  Edges edges_;
  bool at_start_ = true;  // nothing but whitespace seen in this span
  std::string held_;      // trailing whitespace not yet released (kBoth)
};

}  // namespace kiln
