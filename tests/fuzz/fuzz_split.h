// Cuts a fuzz input into the deltas of a stream, for the targets of the streaming parsers: the
// first byte says how many of the next bytes are piece lengths (up to 15); the rest is the text,
// cut by those lengths (0..63 bytes each, taken in turn) until it is used up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <string_view>
#include <vector>

namespace kiln::fuzz {

struct SplitInput {
  std::string_view text;               // the whole text
  std::vector<std::string_view> pieces;  // the same bytes as text, cut
};

inline SplitInput split_input(const uint8_t* data, size_t size) {
  SplitInput in;
  if (size == 0) return in;
  const size_t n_lengths = std::min<size_t>(data[0] % 16, size - 1);
  const uint8_t* lengths = data + 1;
  in.text = std::string_view(reinterpret_cast<const char*>(data + 1 + n_lengths), size - 1 - n_lengths);
  bool advances = false;
  for (size_t k = 0; k < n_lengths; ++k) advances |= lengths[k] % 64 != 0;
  if (!advances) {
    in.pieces.push_back(in.text);
    return in;
  }
  for (size_t pos = 0, k = 0; pos < in.text.size(); k = (k + 1) % n_lengths) {
    const size_t len = std::min<size_t>(lengths[k] % 64, in.text.size() - pos);
    in.pieces.push_back(in.text.substr(pos, len));
    pos += len;
  }
  return in;
}

}  // namespace kiln::fuzz
