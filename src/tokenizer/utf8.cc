// UTF-8 decoding per Unicode Table 3-7 (well-formed byte sequences).
#include "tokenizer/utf8.h"

namespace kiln::utf8 {
namespace {

// The allowed range of the second byte for each lead byte; later bytes are always 80..BF.
struct Lead {
  uint8_t length;  // 0: not a lead byte
  uint8_t lo, hi;  // range of the second byte
};

Lead lead_of(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

char32_t decode(std::string_view s, size_t pos, size_t* len) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  const Lead lead = lead_of(b0);
  if (lead.length == 0) {
    *len = 1;
    return kReplacement;
  }
  if (avail < 2 || p[1] < lead.lo || p[1] > lead.hi) {
    *len = 1;
    return kReplacement;
  }
  char32_t cp = b0 & (0xFF >> (lead.length + 1));
  cp = (cp << 6) | (p[1] & 0x3F);
  for (size_t i = 2; i < lead.length; ++i) {
    if (i >= avail || (p[i] & 0xC0) != 0x80) {
      *len = i;
      return kReplacement;
    }
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  *len = lead.length;
  return cp;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    if (decode(s, i, &len) == kReplacement) {
      // U+FFFD itself is well-formed (EF BF BD); anything else that decodes to it is not.
      if (!(len == 3 && static_cast<uint8_t>(s[i]) == 0xEF && static_cast<uint8_t>(s[i + 1]) == 0xBF &&
            static_cast<uint8_t>(s[i + 2]) == 0xBD)) {
        return false;
      }
    }
    i += len;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  if (is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    const char32_t cp = decode(s, i, &len);
    if (cp == kReplacement) {
      append(out, kReplacement);
    } else {
      out.append(s.data() + i, len);
    }
    i += len;
  }
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t settled_prefix_length(std::string_view s) {
  // Only the last three bytes can hold an incomplete sequence; find where it would start.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    const auto b = static_cast<uint8_t>(s[start]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for the lead
    const Lead lead = lead_of(b);
    if (lead.length <= back) return n;  // ASCII, invalid lead, or complete: nothing pending
    // A lead byte with fewer bytes after it than it needs: pending only if they are valid.
    size_t len;
    decode(s, start, &len);
    return len == back ? start : n;
  }
  return n;
}

size_t length(std::string_view s) {
  size_t count = 0;
  for (unsigned char c : s) count += (c & 0xC0) != 0x80;
  return count;
}

bool is_python_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace kiln::utf8
