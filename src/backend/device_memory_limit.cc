#include "backend/device_memory_limit.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMostGiB = 1 << 20;  // a PiB: beyond any device, so a typo in the units is refused

}  // namespace

Result<std::optional<DeviceMemoryLimit>> parse_device_memory_limit(std::string_view text) {
  if (text.empty()) return std::optional<DeviceMemoryLimit>();
  const std::string quoted = std::string(kCudaMemoryLimitEnv) + "=\"" + std::string(text) + "\"";
  double gib = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), gib, std::chars_format::fixed);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(gib))
    return invalid_argument(quoted + " is not a number of GiB (e.g. 24 or 48)");
  if (!(gib > 0) || gib > kMostGiB)
    return invalid_argument(quoted + " is out of range: give a positive number of GiB up to " +
                            std::to_string(static_cast<int64_t>(kMostGiB)));
  DeviceMemoryLimit l;
  l.limit_bytes = static_cast<uint64_t>(gib * kGiB);
  if (l.limit_bytes <= kCudaOutsidePoolBytes)
    return invalid_argument(quoted + " (" + format_gib(l.limit_bytes) + ") leaves nothing for the memory pools after the " +
                            format_gib(kCudaOutsidePoolBytes) + " set aside for the CUDA context");
  l.pool_bytes = l.limit_bytes - kCudaOutsidePoolBytes;
  return std::optional<DeviceMemoryLimit>(l);
}

Result<std::optional<DeviceMemoryLimit>> device_memory_limit_from_env() {
  const char* v = std::getenv(kCudaMemoryLimitEnv);
  return parse_device_memory_limit(v == nullptr ? std::string_view() : std::string_view(v));
}

std::string format_gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / kGiB);
  return buf;
}

std::string over_limit_message(const DeviceMemoryLimit& limit, uint64_t request, uint64_t pools_hold,
                               uint64_t in_use, uint64_t cached) {
  return "cuda: cannot allocate " + format_gib(request) + " (" + std::to_string(request) + " bytes): the memory pools " +
         "would hold " + format_gib(pools_hold + request) + ", over their " + format_gib(limit.pool_bytes) + " under " +
         kCudaMemoryLimitEnv + " (" + format_gib(limit.limit_bytes) + ", less " + format_gib(kCudaOutsidePoolBytes) +
         " for the CUDA context); " + format_gib(in_use) + " in use, " + format_gib(cached) + " cached";
}

}  // namespace kiln
