#include "backend/vulkan/memory.h"

#include <algorithm>
#include <bit>
#include <string>

namespace kiln::vulkan {

namespace {

constexpr size_t kAlign = 256;                 // every block's start (any dtype, any vector load)
constexpr size_t kChunkBytes = size_t{64} << 20;
constexpr size_t kLargeBytes = size_t{16} << 20;  // classes from here get a block of their own

// A quarter of the size's power of two: at most 25% rounding, few classes.
size_t size_class(size_t bytes) {
  bytes = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  const size_t p = std::bit_floor(bytes);
  const size_t step = std::max(kAlign, p / 4);
  return (bytes + step - 1) / step * step;
}

}  // namespace

// A block of the pool (or a dedicated allocation): data() is its device address.
class PoolStorage final : public Storage {
 public:
  PoolStorage(Memory* memory, std::shared_ptr<void> owner, const Memory::Block& chunk, size_t offset,
              size_t size_class, size_t bytes, bool dedicated, bool recorded)
      : Storage(reinterpret_cast<void*>(static_cast<uintptr_t>(chunk.address + offset)), bytes,
                Device{DeviceKind::kVulkan, 0}),
        memory_(memory), owner_(std::move(owner)), chunk_(chunk), offset_(offset), class_(size_class),
        dedicated_(dedicated), recorded_(recorded) {}
  ~PoolStorage() override {
    if (dedicated_) memory_->release_dedicated(chunk_);
    else memory_->release(chunk_, offset_, class_, recorded_);
  }
  BufferSpan span() const { return {chunk_.buffer, offset_}; }

 private:
  Memory* memory_;
  std::shared_ptr<void> owner_;
  Memory::Block chunk_;
  size_t offset_, class_;
  bool dedicated_, recorded_;
};

Status vk_status(VkResult r, std::string_view what) {
  if (r == VK_SUCCESS) return {};
  const std::string w(what);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY) return resource_exhausted(w + ": out of device memory");
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY) return resource_exhausted(w + ": out of host memory");
  if (r == VK_ERROR_DEVICE_LOST) return internal_error(w + ": the Vulkan device was lost");
  if (r == VK_TIMEOUT) return internal_error(w + ": timed out");
  return internal_error(w + ": VkResult " + std::to_string(static_cast<int>(r)));
}

BufferSpan locate(const Tensor& t) {
  auto* s = dynamic_cast<PoolStorage*>(t.storage().get());
  if (!s) return {};
  BufferSpan span = s->span();
  span.offset += t.offset_bytes();
  return span;
}

Memory::Memory(VkPhysicalDevice physical, VkDevice device, std::function<void()> before_free)
    : physical_(physical), device_(device), before_free_(std::move(before_free)) {}

Memory::~Memory() {
  for (Block& b : chunks_) destroy_block(b);
}

Status Memory::init() {
  VkPhysicalDeviceMemoryProperties props;
  vkGetPhysicalDeviceMemoryProperties(physical_, &props);
  int device = -1, host = -1, host_cached = -1;
  for (uint32_t i = 0; i < props.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = props.memoryTypes[i].propertyFlags;
    if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && device < 0) device = static_cast<int>(i);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    if ((f & hv) == hv) {
      if (host < 0) host = static_cast<int>(i);
      if ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) && host_cached < 0) host_cached = static_cast<int>(i);
    }
  }
  if (device < 0 || host < 0) return unsupported("the Vulkan device has no device-local or no host-visible memory type");
  device_type_ = static_cast<uint32_t>(device);
  // Cached host memory where there is some: the staging ring is read back by the host too.
  host_type_ = static_cast<uint32_t>(host_cached >= 0 ? host_cached : host);
  unified_ = props.memoryTypes[device_type_].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  for (uint32_t h = 0; h < props.memoryHeapCount; ++h)
    if (props.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      device_local_bytes_ = std::max<uint64_t>(device_local_bytes_, props.memoryHeaps[h].size);
  return {};
}

Result<Memory::Block> Memory::make_block(size_t bytes, uint32_t type, VkBufferUsageFlags extra_usage) {
  Block b;
  b.bytes = bytes;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = bytes;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT | extra_usage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KILN_RETURN_IF_ERROR(vk_status(vkCreateBuffer(device_, &bi, nullptr, &b.buffer),
                                "vkCreateBuffer of " + std::to_string(bytes) + " bytes"));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &flags};
  ai.allocationSize = req.size;
  b.bytes = req.size;
  ai.memoryTypeIndex = type;
  if (!(req.memoryTypeBits & (1u << type))) {
    vkDestroyBuffer(device_, b.buffer, nullptr);
    return unsupported("the buffer cannot live in memory type " + std::to_string(type));
  }
  Status s = vk_status(vkAllocateMemory(device_, &ai, nullptr, &b.memory),
                      "vkAllocateMemory of " + std::to_string(req.size) + " bytes");
  if (!s.ok()) {
    vkDestroyBuffer(device_, b.buffer, nullptr);
    return s;
  }
  ++stats_.driver_allocations;
  stats_.reserved_bytes += req.size;
  vkBindBufferMemory(device_, b.buffer, b.memory, 0);
  VkBufferDeviceAddressInfo addr{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  addr.buffer = b.buffer;
  b.address = vkGetBufferDeviceAddress(device_, &addr);
  return b;
}

void Memory::destroy_block(Block& b) {
  if (b.buffer) vkDestroyBuffer(device_, b.buffer, nullptr);
  if (b.memory) vkFreeMemory(device_, b.memory, nullptr);
  b = Block{};
}

Result<std::shared_ptr<Storage>> Memory::allocate(size_t bytes, std::shared_ptr<void> owner) {
  const size_t cls = size_class(std::max<size_t>(bytes, 1));
  std::lock_guard<std::mutex> lock(mu_);
  size_t chunk = 0, offset = 0;
  auto& lists = recording_ ? recorded_free_ : free_;
  auto it = lists.find(cls);
  if (it != lists.end() && !it->second.empty()) {
    chunk = it->second.back().chunk;
    offset = it->second.back().offset;
    it->second.pop_back();
  } else if (cls >= kLargeBytes) {
    KILN_ASSIGN_OR_RETURN(Block b, make_block(cls, device_type_, 0));
    chunks_.push_back(b);
    last_is_chunk_ = false;
    chunk = chunks_.size() - 1;
  } else {
    if (!last_is_chunk_ || chunk_used_ + cls > kChunkBytes) {
      KILN_ASSIGN_OR_RETURN(Block b, make_block(kChunkBytes, device_type_, 0));
      chunks_.push_back(b);
      last_is_chunk_ = true;
      chunk_used_ = 0;
    }
    chunk = chunks_.size() - 1;
    offset = chunk_used_;
    chunk_used_ += cls;
  }
  stats_.in_use_bytes += cls;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  Block b = chunks_[chunk];
  // The storage remembers its chunk by index through the free list entry it returns to.
  auto storage = std::make_shared<PoolStorage>(this, std::move(owner), b, offset, cls, bytes, false, recording_);
  return std::shared_ptr<Storage>(std::move(storage));
}

void Memory::release(const Block& chunk, size_t offset, size_t cls, bool recorded) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t index = 0;
  while (index < chunks_.size() && chunks_[index].buffer != chunk.buffer) ++index;
  (recorded ? recorded_free_ : free_)[cls].push_back({index, offset});
  stats_.in_use_bytes -= cls;
}

Result<std::shared_ptr<Storage>> Memory::dedicated(size_t bytes, std::shared_ptr<void> owner) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  KILN_ASSIGN_OR_RETURN(Block b, make_block(rounded, device_type_, 0));
  stats_.in_use_bytes += rounded;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return std::shared_ptr<Storage>(std::make_shared<PoolStorage>(this, std::move(owner), b, 0, rounded, bytes, true, false));
}

void Memory::release_dedicated(Block b) {
  if (before_free_) before_free_();  // the device may still read it
  std::lock_guard<std::mutex> lock(mu_);
  stats_.in_use_bytes -= b.bytes;
  stats_.reserved_bytes -= b.bytes;
  destroy_block(b);
}

Result<HostBlock> Memory::host_block(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(Block b, make_block(bytes, host_type_, 0));
  HostBlock h{b.memory, b.buffer, nullptr, bytes};
  Status s = vk_status(vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &h.mapped), "vkMapMemory (staging)");
  if (!s.ok()) {
    destroy_block(b);
    return s;
  }
  return h;
}

void Memory::free_host(HostBlock& h) {
  if (h.memory) vkUnmapMemory(device_, h.memory);
  Block b{h.memory, h.buffer, 0, h.bytes};
  std::lock_guard<std::mutex> lock(mu_);
  stats_.reserved_bytes -= h.bytes;
  destroy_block(b);
  h = HostBlock{};
}

void Memory::set_recording(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = on;
}

MemoryStats Memory::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace kiln::vulkan
