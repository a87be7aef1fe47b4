// URLs as the Hub client needs them: parsed into scheme, host, port and target, a redirect's
// Location resolved against the URL it answered, origins compared, path parts percent-encoded.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln::hub {

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;    // as written; an IPv6 literal keeps its brackets
  int port = 0;        // the scheme's default when none is written
  std::string target;  // path and query, starting with '/'

  std::string origin() const;  // "scheme://host:port", the unit a token is confined to
  std::string str() const;     // origin() + target
};

// Only http and https, a host, a port in 1..65535; no user info, no fragment kept.
Result<Url> parse_url(const std::string& text);

// `location` (absolute, scheme-relative or a path) against `base`.
Result<Url> resolve_location(const Url& base, const std::string& location);

// Percent-encodes everything but unreserved characters (and '/', when `keep_slash`).
std::string url_quote(std::string_view s, bool keep_slash);

}  // namespace kiln::hub
