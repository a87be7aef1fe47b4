// Which proxy a Hub request goes through, read from the environment as curl and Python's requests
// read it: https_proxy / HTTPS_PROXY for https URLs, http_proxy / HTTP_PROXY for http URLs (the
// lower-case name first), no_proxy / NO_PROXY for the hosts reached directly. The proxy speaks
// plain HTTP: https requests are tunnelled through it with CONNECT (cpp-httplib's set_proxy).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "hub/url.h"

namespace kiln::hub {

struct ProxyAddress {
  std::string host;  // an IPv6 literal keeps its brackets
  int port = 0;
  std::string source;  // the variable it came from ("HTTPS_PROXY")
};

struct ProxyEnv {
  std::string http, https, no_proxy;  // the variables' values ("" when unset)
  std::string http_var = "HTTP_PROXY", https_var = "HTTPS_PROXY";  // which name each was read from

  static ProxyEnv from_env();

  // The proxy a request to `url` goes through; nullopt: straight to the server. A proxy URL Kiln
  // cannot use (another scheme than http, credentials, no host) is an error naming the variable,
  // never echoing what it holds after the scheme.
  Result<std::optional<ProxyAddress>> route(const Url& url) const;
};

// Whether `url`'s host is in a no_proxy list: comma- or space-separated entries, each `*` (every
// host), a domain (itself and its subdomains; a leading `.` or `*.` is dropped), an IP address
// (exactly), an IP range in CIDR form, optionally with `:port` (only that port). Case-insensitive.
bool no_proxy_matches(const std::string& no_proxy, const Url& url);

}  // namespace kiln::hub
