// JSON Schema's "format" as an assertion: whether a string has the form a format names, each
// checked by reading its fields (dates and times per RFC 3339, durations per its appendix A,
// addresses per their RFCs, IPv6 through inet_pton).
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// Whether `s` is a `format`: date, time, date-time, duration, uuid, ipv4, ipv6, hostname, email
// or uri. Any other format name is false (is_json_format tells them apart).
bool json_format_holds(std::string_view format, const std::string& s);

// Whether `format` is one json_format_holds knows.
bool is_json_format(std::string_view format);

}  // namespace kiln
