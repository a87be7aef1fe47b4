// The Vulkan backend: serving on any GPU with a Vulkan 1.2 driver (buffer device addresses,
// timeline semaphores, 16-bit storage). make_vulkan_backend fails naming the cause where no such
// device exists.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/vulkan/context.h"

namespace kiln {

Result<std::unique_ptr<Backend>> make_vulkan_backend(const vulkan::DeviceChoice& choice);

// Counters beside the Backend interface (tests, bench): driver allocations and pool bytes,
// dispatches, submissions and replays so far. An error for a backend that is not Vulkan's.
struct VulkanStats {
  vulkan::MemoryStats memory;
  uint64_t dispatches = 0, submits = 0, replays = 0;  // replays: recorded command buffers submitted
};
Result<VulkanStats> vulkan_backend_stats(Backend& backend);

}  // namespace kiln
