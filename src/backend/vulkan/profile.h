// KILN_VULKAN_PROFILE=1: per-command totals of device time, from a pair of timestamps around each
// dispatch, copy and fill (the first written when the commands before it have finished, so a
// command's time includes the barrier before it), keyed by shader and workgroup count, printed
// to stderr as a table, largest first, when the context goes away. Timestamps are read at each
// synchronisation. Replay is off while it runs
// (recorded command buffers would reuse the queries). Off (the default), nothing is written.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::vulkan {

class Profiler {
 public:
  // Null unless KILN_VULKAN_PROFILE=1 and the queue writes timestamps.
  static std::unique_ptr<Profiler> from_env(VkDevice device, VkPhysicalDevice physical, uint32_t queue_family);
  ~Profiler();

  // Before the command, after its barrier, and after it. Between two harvests at most
  // kQueries / 2 commands are timed; the rest are counted as untimed.
  void begin(VkCommandBuffer cb, std::string name);
  void end(VkCommandBuffer cb);
  // Folds every written pair into the totals and resets the queries; the device must be idle.
  void harvest();
  void print() const;

 private:
  Profiler(VkDevice device, VkQueryPool pool, double ns_per_tick) : device_(device), pool_(pool), ns_per_tick_(ns_per_tick) {}
  static constexpr uint32_t kQueries = 8192;
  struct Total {
    uint64_t calls = 0;
    double ms = 0;
  };
  VkDevice device_;
  VkQueryPool pool_;
  double ns_per_tick_;
  std::vector<std::string> names_;  // the command of each written pair, in query order
  std::map<std::string, Total> totals_;
  bool open_ = false;       // the last begin wrote a timestamp
  uint64_t untimed_ = 0;
};

}  // namespace kiln::vulkan
