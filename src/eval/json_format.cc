#include "eval/json_format.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

namespace kiln {

namespace {

bool all_of_class(std::string_view s, const char* chars) {
  return !s.empty() && s.find_first_not_of(chars) == std::string_view::npos;
}

bool valid_date(const std::string& s) {
  int y = 0, m = 0, d = 0;
  char tail = 0;
  if (s.size() != 10 || std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3) return false;
  return s[4] == '-' && s[7] == '-' && m >= 1 && m <= 12 && d >= 1 && d <= 31;
}

bool valid_time(const std::string& s) {
  int h = 0, mi = 0, sec = 0;
  if (s.size() < 9 || std::sscanf(s.c_str(), "%2d:%2d:%2d", &h, &mi, &sec) != 3 || s[2] != ':' || s[5] != ':') return false;
  if (h > 23 || mi > 59 || sec > 59) return false;
  size_t i = 8;
  if (i < s.size() && s[i] == '.') {
    const size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == start) return false;
  }
  const std::string zone = s.substr(i);
  if (zone == "Z") return true;
  int zh = 0, zm = 0;
  return zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':' &&
         std::sscanf(zone.c_str() + 1, "%2d:%2d", &zh, &zm) == 2 && zh <= 23 && zm <= 59;
}

// P, then weeks alone, or date figures (Y M D, each optional but in order) and/or T with time
// figures (H M S likewise); at least one figure after P and after T.
bool valid_duration(const std::string& s) {
  if (s.size() < 3 || s[0] != 'P') return false;
  size_t i = 1;
  auto figures = [&](const char* units, bool* any) {
    const char* next = units;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      if (i == s.size()) return false;
      const char* unit = std::strchr(next, s[i]);
      if (unit == nullptr || *unit == '\0') return false;
      next = unit + 1;
      *any = true;
      ++i;
    }
    return true;
  };
  bool any_date = false, any_time = false;
  if (s.back() == 'W') return all_of_class(std::string_view(s).substr(1, s.size() - 2), "0123456789");
  if (!figures("YMD", &any_date)) return false;
  if (i < s.size()) {
    if (s[i++] != 'T' || !figures("HMS", &any_time) || !any_time) return false;
  }
  return i == s.size() && (any_date || any_time);
}

bool valid_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < 36; ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-') || (!dash && !std::isxdigit(static_cast<unsigned char>(s[i])))) return false;
  }
  return true;
}

// Four decimal octets up to 255, without leading zeros.
bool valid_ipv4(const std::string& s) {
  int parts = 0;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t dot = std::min(s.find('.', i), s.size());
    const std::string octet = s.substr(i, dot - i);
    if (!all_of_class(octet, "0123456789") || octet.size() > 3 || (octet.size() > 1 && octet[0] == '0') ||
        std::stoi(octet) > 255)
      return false;
    ++parts;
    i = dot + 1;
  }
  return parts == 4;
}

// Without an embedded IPv4 form.
bool valid_ipv6(const std::string& s) {
  unsigned char out[16];
  return s.find('.') == std::string::npos && inet_pton(AF_INET6, s.c_str(), out) == 1;
}

// Letters, digits, '-' and '.': labels of 1 to 63 characters not starting or ending with '-',
// 253 characters at most.
bool valid_hostname(const std::string& h) {
  if (!all_of_class(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") || h.size() > 253) return false;
  size_t i = 0;
  while (i <= h.size()) {
    const size_t dot = std::min(h.find('.', i), h.size());
    const std::string label = h.substr(i, dot - i);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    i = dot + 1;
  }
  return true;
}

// A dot-atom local part of letters, digits and ._+- (64 characters at most), '@', and a hostname
// with a dot.
bool valid_email(const std::string& s) {
  const size_t at = s.find('@');
  if (at == std::string::npos || at == 0 || s.find('@', at + 1) != std::string::npos) return false;
  const std::string local = s.substr(0, at), domain = s.substr(at + 1);
  if (local.size() > 64 || local.front() == '.' || local.back() == '.' || local.find("..") != std::string::npos) return false;
  return all_of_class(local, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-") &&
         valid_hostname(domain) && domain.find('.') != std::string::npos;
}

// A scheme starting with a letter, ':', then printable ASCII other than the characters RFC 3986
// never allows, with '%' only before two hex digits.
bool valid_uri(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (size_t i = colon + 1; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c <= 0x20 || c >= 0x7F || std::strchr("\"<>\\^`{|}", c) != nullptr) return false;
    if (c == '%' && !(i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
                      std::isxdigit(static_cast<unsigned char>(s[i + 2]))))
      return false;
  }
  return colon + 1 < s.size();
}

struct Format {
  std::string_view name;
  bool (*holds)(const std::string&);
};

constexpr Format kFormats[] = {
    {"date", valid_date},
    {"time", valid_time},
    {"date-time",
     [](const std::string& s) { return s.size() > 11 && s[10] == 'T' && valid_date(s.substr(0, 10)) && valid_time(s.substr(11)); }},
    {"duration", valid_duration},
    {"uuid", valid_uuid},
    {"ipv4", valid_ipv4},
    {"ipv6", valid_ipv6},
    {"hostname", valid_hostname},
    {"email", valid_email},
    {"uri", valid_uri},
};

const Format* find_format(std::string_view name) {
  for (const Format& f : kFormats)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

bool json_format_holds(std::string_view format, const std::string& s) {
  const Format* f = find_format(format);
  return f != nullptr && f->holds(s);
}

bool is_json_format(std::string_view format) { return find_format(format) != nullptr; }

}  // namespace kiln
