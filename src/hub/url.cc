#include "hub/url.h"

#include <cctype>

namespace kiln::hub {

namespace {
constexpr size_t kMaxUrlChars = 8192;
}

std::string Url::origin() const { return scheme + "://" + host + ":" + std::to_string(port); }
std::string Url::str() const { return origin() + target; }

Result<Url> parse_url(const std::string& text) {
  auto bad = [&](const std::string& why) { return invalid_argument("URL '" + text.substr(0, 200) + "': " + why); };
  if (text.size() > kMaxUrlChars) return bad("longer than 8192 characters");
  for (char c : text)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return bad("holds a space or control character");
  Url u;
  const size_t sep = text.find("://");
  if (sep == std::string::npos) return bad("no scheme");
  u.scheme = text.substr(0, sep);
  for (char& c : u.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.scheme != "http" && u.scheme != "https") return bad("scheme must be http or https");
  std::string rest = text.substr(sep + 3);
  if (size_t hash = rest.find('#'); hash != std::string::npos) rest.resize(hash);
  const size_t path_at = rest.find_first_of("/?");
  std::string authority = rest.substr(0, path_at);
  u.target = path_at == std::string::npos ? "/" : rest.substr(path_at);
  if (u.target[0] == '?') u.target = "/" + u.target;
  if (authority.find('@') != std::string::npos) return bad("user information in a URL is not accepted");
  std::string port_text;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unterminated IPv6 literal");
    u.host = authority.substr(0, close + 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return bad("junk after the IPv6 literal");
      port_text = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) port_text = authority.substr(colon + 1);
  }
  if (u.host.empty()) return bad("no host");
  for (char& c : u.host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  u.port = u.scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    if (port_text.size() > 5) return bad("bad port");
    int p = 0;
    for (char c : port_text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return bad("bad port");
      p = p * 10 + (c - '0');
    }
    if (p < 1 || p > 65535) return bad("port out of range");
    u.port = p;
  }
  return u;
}

Result<Url> resolve_location(const Url& base, const std::string& location) {
  if (location.empty()) return invalid_argument("a redirect without a Location");
  if (location.find("://") != std::string::npos && location.find("://") < location.find_first_of("/?"))
    return parse_url(location);
  if (location.rfind("//", 0) == 0) return parse_url(base.scheme + ":" + location);
  if (location[0] == '/') return parse_url(base.origin() + location);
  // A relative path: beside the base's last segment.
  std::string dir = base.target.substr(0, base.target.find('?'));
  dir = dir.substr(0, dir.rfind('/') + 1);
  return parse_url(base.origin() + dir + location);
}

std::string url_quote(std::string_view s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace kiln::hub
