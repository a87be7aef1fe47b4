// UTC timestamps as receipts write them: "2026-07-28T14:03:05.123456Z".
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace kiln::qualify {

using WallTime = std::chrono::system_clock::time_point;

std::string format_utc(WallTime t);
// "20260728T140305Z", for ids and file names.
std::string compact_utc(WallTime t);
// Seconds since the epoch; nullopt unless `s` is exactly YYYY-MM-DDTHH:MM:SS[.fraction]Z with
// fields in range.
std::optional<double> parse_utc(const std::string& s);

}  // namespace kiln::qualify
