#include "hub/proxy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

namespace kiln::hub {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// The first of `names` set to a non-empty value; `used` gets its name.
std::string first_set(std::initializer_list<const char*> names, std::string& used) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v != nullptr && *v != '\0') {
      used = n;
      return v;
    }
  return "";
}

std::string unbracket(const std::string& host) {
  return host.size() >= 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
}

// An IP address as bytes (4 or 16); empty when `s` is none.
std::string ip_bytes(const std::string& s) {
  unsigned char buf[16];
  if (::inet_pton(AF_INET, s.c_str(), buf) == 1) return std::string(reinterpret_cast<char*>(buf), 4);
  if (::inet_pton(AF_INET6, s.c_str(), buf) == 1) return std::string(reinterpret_cast<char*>(buf), 16);
  return "";
}

bool in_cidr(const std::string& host_ip, const std::string& net, int bits) {
  if (host_ip.empty() || host_ip.size() != net.size() || bits < 0 || bits > static_cast<int>(net.size() * 8)) return false;
  for (int i = 0; i < bits; ++i) {
    const int byte = i / 8, mask = 0x80 >> (i % 8);
    if ((host_ip[byte] & mask) != (net[byte] & mask)) return false;
  }
  return true;
}

bool entry_matches(std::string e, const std::string& host, int port) {
  // An optional port: "[v6]:p", "name:p", "v4:p" (a bare IPv6 literal has no port).
  int want_port = 0;
  if (!e.empty() && e[0] == '[') {
    const size_t close = e.find(']');
    if (close == std::string::npos) return false;
    if (close + 1 < e.size()) {
      if (e[close + 1] != ':') return false;
      want_port = std::atoi(e.c_str() + close + 2);
    }
    e = e.substr(1, close - 1);
  } else if (std::count(e.begin(), e.end(), ':') == 1) {
    const size_t colon = e.find(':');
    want_port = std::atoi(e.c_str() + colon + 1);
    e.resize(colon);
  }
  if (want_port != 0 && want_port != port) return false;
  if (const size_t slash = e.find('/'); slash != std::string::npos) {
    const std::string net = ip_bytes(e.substr(0, slash));
    const std::string bits = e.substr(slash + 1);
    if (net.empty() || bits.empty() || bits.size() > 3 || !std::all_of(bits.begin(), bits.end(), ::isdigit)) return false;
    return in_cidr(ip_bytes(host), net, std::stoi(bits));
  }
  if (const std::string ip = ip_bytes(e); !ip.empty()) return ip == ip_bytes(host);
  if (!ip_bytes(host).empty()) return false;  // an address is matched whole, never as a domain suffix
  if (e.rfind("*.", 0) == 0) e = e.substr(1);
  if (!e.empty() && e[0] == '.') e = e.substr(1);
  if (e.empty()) return false;
  return host == e || (host.size() > e.size() && host.ends_with(e) && host[host.size() - e.size() - 1] == '.');
}

}  // namespace

bool no_proxy_matches(const std::string& no_proxy, const Url& url) {
  const std::string host = lower(unbracket(url.host));
  std::string list = lower(no_proxy);
  std::replace_if(list.begin(), list.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }, ',');
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string e = list.substr(at, comma - at);
    at = comma + 1;
    if (e.empty()) continue;
    if (e == "*" || entry_matches(e, host, url.port)) return true;
  }
  return false;
}

ProxyEnv ProxyEnv::from_env() {
  ProxyEnv p;
  p.https = first_set({"https_proxy", "HTTPS_PROXY"}, p.https_var);
  p.http = first_set({"http_proxy", "HTTP_PROXY"}, p.http_var);
  std::string unused;
  p.no_proxy = first_set({"no_proxy", "NO_PROXY"}, unused);
  return p;
}

Result<std::optional<ProxyAddress>> ProxyEnv::route(const Url& url) const {
  const bool tls = url.scheme == "https";
  const std::string value = trim(tls ? https : http);
  const std::string& var = tls ? https_var : http_var;
  if (value.empty() || no_proxy_matches(no_proxy, url)) return std::optional<ProxyAddress>();
  std::string rest = value;
  if (const size_t sep = rest.find("://"); sep != std::string::npos) {
    const std::string scheme = lower(rest.substr(0, sep));
    if (scheme != "http")
      return invalid_argument(var + ": a " + scheme.substr(0, 16) +
                              ":// proxy is not supported; Kiln speaks to a proxy in plain http:// (HTTPS is tunnelled "
                              "through it with CONNECT)");
    rest = rest.substr(sep + 3);
  }
  const std::string authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.find('@') != std::string::npos)
    return invalid_argument(var + " holds credentials (user:password@): not supported, as the HTTP client would also "
                                  "send them to the Hub through the tunnel; use a proxy that needs none from this host");
  // The port the URL names, else 1080 as curl assumes.
  const size_t close = authority.rfind(']');
  const size_t colon = authority.rfind(':');
  const bool has_port = colon != std::string::npos && (close == std::string::npos || colon > close);
  auto parsed = parse_url("http://" + authority + (has_port ? "" : ":1080") + "/");
  if (!parsed.ok()) return invalid_argument(var + ": not a proxy URL (http://HOST:PORT): " + parsed.status().message());
  return std::optional<ProxyAddress>(ProxyAddress{parsed->host, parsed->port, var});
}

}  // namespace kiln::hub
