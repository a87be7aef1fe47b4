// A Retry-After header's wait (RFC 9110 section 10.2.3): delay-seconds, or an HTTP-date in the
// preferred IMF-fixdate form or the obsolete RFC 850 and asctime forms.
#pragma once

#include <ctime>
#include <optional>
#include <string>

namespace kiln::hub {

// Seconds to wait from `now`; a date already past waits 0. nullopt when `value` is neither form.
// The caller caps the result: the remote controls it.
std::optional<double> retry_after_seconds(const std::string& value, std::time_t now);

// An HTTP-date (any of the three forms) as seconds since the epoch, UTC. `now` places an RFC 850
// two-digit year: the most recent year with those digits that is not more than 50 years ahead.
std::optional<std::time_t> parse_http_date(const std::string& value, std::time_t now);

}  // namespace kiln::hub
