// Device memory of the Vulkan backend. Every buffer is made with a device address, and a tensor's
// storage `data()` is that address: shaders take pointers, as CUDA kernels do. Activations, K/V
// blocks and GDN slots come from a caching pool: sizes rounded to classes (a quarter of their
// power of two), blocks kept in per-class free lists when released and handed out again, carved
// from 64 MiB chunks (larger ones get their own allocation, kept as well), so that a steady state
// (the decode loop) asks the driver for nothing. The weights get one allocation of their own
// (`dedicated`), freed when the model goes. While a recording is made (replay), blocks come from
// free lists of their own, which eager work never takes from, so a recording's temporaries never
// alias memory that eager work uses between its replays. Release needs no event: the one queue runs every
// command after a barrier, so later work that reuses a block is ordered after earlier work.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln::vulkan {

// An error naming `what` for a failed Vulkan call (out of memory, device lost, ...).
Status vk_status(VkResult r, std::string_view what);

// Where a tensor's bytes are, for copy commands.
struct BufferSpan {
  VkBuffer buffer = VK_NULL_HANDLE;
  size_t offset = 0;
};

// Host-visible, coherent memory (the staging ring).
struct HostBlock {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  void* mapped = nullptr;
  size_t bytes = 0;
};

struct MemoryStats {
  uint64_t driver_allocations = 0;  // vkAllocateMemory calls so far
  uint64_t reserved_bytes = 0;      // held from the driver (pool chunks, large blocks, weights)
  uint64_t in_use_bytes = 0, peak_in_use_bytes = 0;  // handed out and not yet released
};

class Memory {
 public:
  // `before_free` runs before memory goes back to the driver (it waits for the device).
  Memory(VkPhysicalDevice physical, VkDevice device, std::function<void()> before_free);
  ~Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  Status init();

  // A pool block of at least `bytes`; `owner` (the context) is kept alive as long as it is.
  Result<std::shared_ptr<Storage>> allocate(size_t bytes, std::shared_ptr<void> owner);
  // An allocation of its own, returned to the driver when its storage goes.
  Result<std::shared_ptr<Storage>> dedicated(size_t bytes, std::shared_ptr<void> owner);
  Result<HostBlock> host_block(size_t bytes);
  void free_host(HostBlock& b);

  // Whether allocations are a recording's (Context::begin_recording / end_recording).
  void set_recording(bool on);

  MemoryStats stats() const;
  bool unified() const { return unified_; }
  uint64_t device_local_bytes() const { return device_local_bytes_; }

 private:
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceAddress address = 0;
    size_t bytes = 0;
  };
  friend class PoolStorage;
  Result<Block> make_block(size_t bytes, uint32_t type, VkBufferUsageFlags extra_usage);
  void destroy_block(Block& b);
  void release(const Block& chunk, size_t offset, size_t size_class, bool recorded);  // back to its free list
  void release_dedicated(Block b);

  VkPhysicalDevice physical_;
  VkDevice device_;
  std::function<void()> before_free_;
  uint32_t device_type_ = 0, host_type_ = 0;
  bool unified_ = false;
  uint64_t device_local_bytes_ = 0;

  mutable std::mutex mu_;
  std::vector<Block> chunks_;  // the pool's chunks and its large blocks
  size_t chunk_used_ = 0;      // bytes handed out of chunks_.back() when it is a chunk
  bool last_is_chunk_ = false;
  struct Free {
    size_t chunk;  // index in chunks_
    size_t offset;
  };
  std::map<size_t, std::vector<Free>> free_, recorded_free_;  // by size class: eager work's, recordings'
  bool recording_ = false;
  MemoryStats stats_;
};

// A Vulkan tensor's buffer and offset.
BufferSpan locate(const Tensor& t);

}  // namespace kiln::vulkan
