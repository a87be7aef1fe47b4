// The Vulkan device every facet shares: the instance, the chosen physical device, one compute
// queue, the pipelines (one per embedded shader, made on first use), device memory (memory.h)
// and the command stream. Shaders reach memory through buffer device addresses (a tensor's
// `raw()` is its address on the device, as a CUDA pointer is), so a dispatch binds no descriptor:
// its arguments are push constants. Dispatches and copies are recorded into a command buffer,
// each after a memory barrier (every command sees the writes of those before it, as on one CUDA
// stream), submitted in batches and waited on through one timeline semaphore.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/vulkan/memory.h"
#include "backend/vulkan/profile.h"
#include "core/status.h"

namespace kiln::vulkan {

// Which device to use: "" picks the first discrete GPU, else an integrated one, else any other
// (lavapipe, the CPU driver, with a warning); a number is an index in the loader's order; any
// other text is a case-insensitive substring of the device's name (vulkan.device).
struct DeviceChoice {
  std::string selector;
  bool validation = false;  // the Khronos validation layer, where installed (vulkan.validation)
};

// What the chosen device reports; every kernel choice reads these, never the device's name.
struct DeviceInfo {
  std::string name, driver;       // "NVIDIA H100 80GB HBM3", "NVIDIA 580.159.04"
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t api_version = 0;
  uint32_t subgroup_size = 0;
  bool subgroup_arithmetic = false;  // subgroupAdd and friends in compute shaders
  // GL_NV_cooperative_matrix's 16 x 16 x 16 product of f16 into f32 on subgroups of 32, with
  // f16 arithmetic and the Vulkan memory model its shaders declare (matmul_coop.comp).
  bool cooperative_matrix = false;
  uint32_t shared_memory_bytes = 0;  // maxComputeSharedMemorySize
  uint32_t max_workgroup_size = 0;   // maxComputeWorkGroupInvocations
  uint32_t max_groups_x = 0;         // maxComputeWorkGroupCount[0]
  uint32_t push_constant_bytes = 0;  // maxPushConstantsSize
  uint64_t device_local_bytes = 0;   // the largest device-local heap
  uint64_t max_allocation_bytes = 0; // maxMemoryAllocationSize
  bool unified_memory = false;       // device-local memory that the host can map (lavapipe, iGPUs)
  std::string warning;               // the default choice fell back to a CPU driver
  std::string type_name() const;     // "discrete GPU", "CPU", ...
};

// A compute dispatch's arguments: at most kPushBytes of push constants (the minimum every device
// guarantees) and up to five specialization constants (constant_id 0..4: workgroup sizes, tiles).
constexpr size_t kPushBytes = 128;
using Spec = std::array<uint32_t, 5>;

class Context : public std::enable_shared_from_this<Context> {
 public:
  static Result<std::shared_ptr<Context>> create(const DeviceChoice& choice);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  // matmul_coop.comp on or off (check_cooperative_matrix: a device whose product disagrees).
  void set_cooperative_matrix(bool on) { info_.cooperative_matrix = on; }
  Memory& memory() { return *memory_; }
  VkDevice device() const { return device_; }

  // Records `shader` over groups (x, y, z) with `push` as its push constants.
  template <typename P>
  Status dispatch(std::string_view shader, const P& push, std::array<uint32_t, 3> groups,
                  Spec spec = {}) {
    static_assert(sizeof(P) <= kPushBytes, "push constants past the guaranteed 128 bytes");
    return dispatch_raw(shader, &push, sizeof(P), groups, spec);
  }
  Status dispatch_raw(std::string_view shader, const void* push, size_t bytes, std::array<uint32_t, 3> groups,
                      Spec spec);
  // Workgroups over a flat count: x up to the device's limit, the rest in y (shaders fold them back).
  std::array<uint32_t, 3> grid(uint64_t groups) const;

  // Independent commands (each reads what came before, none reads another's output, their
  // outputs are disjoint) may share the barrier before the first of them and overlap on the
  // device: between group_begin and group_end this thread's commands record no barrier of their
  // own, except the one after require_barrier (a command that reads another's output).
  void group_begin();
  void group_end();
  void require_barrier() { barrier_due_ = true; }

  Status copy(const BufferSpan& src, const BufferSpan& dst, size_t bytes);
  Status fill_zero(const BufferSpan& dst, size_t bytes);

  // Submits what is recorded (nothing waits); the value the timeline reaches when it completes.
  Result<uint64_t> flush();
  Status wait(uint64_t value);
  Status synchronize();  // flush, then wait for everything submitted

  // Host transfers through the staging ring (chunked; each chunk waits for the device).
  Status upload(const void* host, const BufferSpan& dst, size_t bytes);
  Status download(const BufferSpan& src, void* host, size_t bytes);

  uint64_t dispatches() const { return dispatches_; }
  uint64_t submits() const { return submits_; }

  // Recording (replay.cc): between begin_recording and end_recording the calling thread's
  // dispatches, copies and fills go into a command buffer of their own, which runs nothing until
  // submitted; allocations come from the pool's recording lists (memory.h). Host transfers and
  // synchronisation are refused while recording, and every call from another thread too
  // (check_owner).
  Status begin_recording();
  Result<VkCommandBuffer> end_recording(bool keep);  // keep false: discarded (the body failed)
  bool recording() const { return recorder_.load(std::memory_order_acquire) != std::thread::id(); }
  // kFailedPrecondition naming `what` where a recording is being made and this call is not the
  // recording thread's own host transfer (those are refused as well: they cannot be recorded).
  Status check_owner(const char* what) const;
  // Submits a recorded command buffer after the work queued so far; the timeline value it signals.
  Result<uint64_t> submit_recorded(VkCommandBuffer cb);
  void free_recorded(VkCommandBuffer cb, uint64_t last_value);
  uint64_t replays() const { return replays_; }
  bool profiling() const { return profiler_ != nullptr; }  // KILN_VULKAN_PROFILE=1 (profile.h)

 private:
  Context() = default;
  Status init(const DeviceChoice& choice);
  Result<VkCommandBuffer> command_buffer();  // the recording's, else the open one (begun on first use)
  Status check_thread(const char* what) const;  // refuses another thread's commands while recording
  Result<uint64_t> submit(VkCommandBuffer cb);
  void barrier(VkCommandBuffer cb);
  // The command buffer a command goes into, after the barrier every command starts with; with
  // the profiler on, its begin timestamp too.
  Result<VkCommandBuffer> begin_command(std::string_view name, const std::array<uint32_t, 3>& groups);
  void end_command(VkCommandBuffer cb);
  std::string copy_label(const BufferSpan& src, const BufferSpan& dst, size_t bytes) const;
  Status reclaim();
  struct Pipeline {
    VkPipeline pipeline = VK_NULL_HANDLE;
  };
  Result<VkPipeline> pipeline(std::string_view shader, const Spec& spec);

  std::recursive_mutex mu_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  DeviceInfo info_;
  std::unique_ptr<Memory> memory_;
  std::map<std::string, Pipeline, std::less<>> pipelines_;
  std::vector<VkShaderModule> modules_;

  VkCommandBuffer open_ = VK_NULL_HANDLE;
  size_t open_commands_ = 0;
  uint64_t next_value_ = 0;  // the last value a submission signals
  std::deque<std::pair<VkCommandBuffer, uint64_t>> in_flight_;
  std::vector<VkCommandBuffer> idle_;
  VkCommandBuffer recorded_ = VK_NULL_HANDLE;  // the recording being made
  std::atomic<std::thread::id> recorder_{};
  uint64_t replays_ = 0;
  HostBlock staging_;
  size_t staging_head_ = 0;  // the staging ring's next free byte (reset when the device is idle)
  uint64_t dispatches_ = 0, submits_ = 0;
  std::unique_ptr<Profiler> profiler_;
  std::thread::id group_owner_{};  // the thread inside group_begin .. group_end, if any
  bool barrier_due_ = true;        // the next command records a barrier
};

}  // namespace kiln::vulkan
