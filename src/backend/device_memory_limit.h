// KILN_CUDA_MEMORY_LIMIT_GB: a cap on the device memory a backend's caching pools may hold, so that
// a large card behaves as a smaller one would (24 for a 24 GB card, 48 for a 48 GB one). The
// pools count only what they allocate; the CUDA context, its loaded modules and the cuBLAS
// handle's workspace live outside them, so the pools get the limit less a declared allowance
// for those (docs/cuda.md, "Memory limit").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln {

inline constexpr const char* kCudaMemoryLimitEnv = "KILN_CUDA_MEMORY_LIMIT_GB";

// Device memory a CUDA process holds outside its pools (the context, modules loaded on first
// use, the cuBLAS handle's workspace): what a limit sets aside before the pools get the rest.
inline constexpr uint64_t kCudaOutsidePoolBytes = uint64_t{768} << 20;

struct DeviceMemoryLimit {
  uint64_t limit_bytes = 0;  // the card size asked for: GB here means 2^30 bytes
  uint64_t pool_bytes = 0;   // what the pools may hold together: limit_bytes - kCudaOutsidePoolBytes
};

// The variable's text (a positive number of GiB, a fraction allowed: "24", "47.5") as a limit;
// errors name the variable and the text. An empty text is no limit.
Result<std::optional<DeviceMemoryLimit>> parse_device_memory_limit(std::string_view text);
// The environment's KILN_CUDA_MEMORY_LIMIT_GB, parsed; unset or empty: no limit.
Result<std::optional<DeviceMemoryLimit>> device_memory_limit_from_env();

// "23.25 GiB": bytes as GiB with two decimals, the unit of every message about the limit.
std::string format_gib(uint64_t bytes);

// Why a pool refuses `request` bytes (after giving its cache back): what the pools would hold,
// the limit and the pools' share of it, and what the refusing pool has in use and cached.
std::string over_limit_message(const DeviceMemoryLimit& limit, uint64_t request, uint64_t pools_hold,
                               uint64_t in_use, uint64_t cached);

}  // namespace kiln
