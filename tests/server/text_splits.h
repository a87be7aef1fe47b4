// Ways to cut a text into streamed deltas, for the tests of the streaming text parsers: one code
// point or one byte at a time, two pieces at a position, or random pieces from a fixed seed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::testing {

inline std::vector<std::string> bytes_of(std::string_view s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

inline bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Whole code points (a lead byte with its continuation bytes).
inline std::vector<std::string> code_points_of(std::string_view s) {
  std::vector<std::string> out;
  for (char c : s) {
    if (out.empty() || !is_continuation(c)) out.emplace_back();
    out.back() += c;
  }
  return out;
}

// Random pieces of 1..max_len code points (empty pieces included now and then).
inline std::vector<std::string> random_split(std::string_view s, uint64_t seed, int max_len = 6) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(0, max_len);
  const std::vector<std::string> cps = code_points_of(s);
  std::vector<std::string> out;
  for (size_t i = 0; i < cps.size();) {
    std::string piece;
    for (int n = len(rng); n > 0 && i < cps.size(); --n) piece += cps[i++];
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace kiln::testing
