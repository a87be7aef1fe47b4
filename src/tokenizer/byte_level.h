// The GPT-2 byte-to-character alphabet of byte-level BPE: each byte maps to one printable code
// point, so that any byte string becomes a string of vocabulary characters and back.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  // The code point standing for byte `b`, and its UTF-8 encoding.
  char32_t char_of(uint8_t b) const { return chars_[b]; }
  std::string_view utf8_of(uint8_t b) const { return {utf8_[b].data(), utf8_len_[b]}; }
  // The byte a code point stands for, or -1 when it is not in the alphabet.
  int byte_of(char32_t cp) const { return cp < kMaxChar ? bytes_[cp] : -1; }

  // Maps raw bytes to their alphabet string ("hi there" -> "hiĠthere").
  std::string encode(std::string_view bytes) const;

 private:
  ByteLevelAlphabet();
  static constexpr char32_t kMaxChar = 0x144;  // the alphabet's largest code point is U+0143
  std::array<char32_t, 256> chars_{};
  std::array<std::array<char, 2>, 256> utf8_{};
  std::array<uint8_t, 256> utf8_len_{};
  std::array<int16_t, kMaxChar> bytes_{};
};

}  // namespace kiln
