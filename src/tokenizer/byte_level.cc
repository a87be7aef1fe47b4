// Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes take
// the code points from U+0100 upwards, in byte order.
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace kiln {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  bytes_.fill(-1);
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    chars_[b] = cp;
    bytes_[cp] = static_cast<int16_t>(b);
    std::string enc;
    utf8::append(enc, cp);
    utf8_len_[b] = static_cast<uint8_t>(enc.size());
    for (size_t i = 0; i < enc.size(); ++i) utf8_[b][i] = enc[i];
  }
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out.append(utf8_of(b));
  return out;
}

}  // namespace kiln
