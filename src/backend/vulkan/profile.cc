#include "backend/vulkan/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::vulkan {

std::unique_ptr<Profiler> Profiler::from_env(VkDevice device, VkPhysicalDevice physical, uint32_t queue_family) {
  const char* on = std::getenv("KILN_VULKAN_PROFILE");
  if (on == nullptr || std::strcmp(on, "1") != 0) return nullptr;
  uint32_t families = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &families, nullptr);
  std::vector<VkQueueFamilyProperties> qs(families);
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &families, qs.data());
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(physical, &p);
  if (qs[queue_family].timestampValidBits == 0 || p.limits.timestampPeriod <= 0) {
    std::fprintf(stderr, "KILN_VULKAN_PROFILE: this queue writes no timestamps; not profiling\n");
    return nullptr;
  }
  VkQueryPoolCreateInfo qci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qci.queryCount = kQueries;
  VkQueryPool pool = VK_NULL_HANDLE;
  if (vkCreateQueryPool(device, &qci, nullptr, &pool) != VK_SUCCESS) return nullptr;
  vkResetQueryPool(device, pool, 0, kQueries);
  return std::unique_ptr<Profiler>(new Profiler(device, pool, p.limits.timestampPeriod));
}

Profiler::~Profiler() {
  print();
  vkDestroyQueryPool(device_, pool_, nullptr);
}

void Profiler::begin(VkCommandBuffer cb, std::string name) {
  open_ = names_.size() * 2 + 2 <= kQueries;
  if (!open_) {
    ++untimed_;
    return;
  }
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, pool_, static_cast<uint32_t>(names_.size() * 2));
  names_.push_back(std::move(name));
}

void Profiler::end(VkCommandBuffer cb) {
  if (!open_) return;
  open_ = false;
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, static_cast<uint32_t>(names_.size() * 2 - 1));
}

void Profiler::harvest() {
  if (names_.empty()) return;
  const uint32_t n = static_cast<uint32_t>(names_.size() * 2);
  std::vector<uint64_t> ticks(n);
  if (vkGetQueryPoolResults(device_, pool_, 0, n, n * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                            VK_QUERY_RESULT_64_BIT) == VK_SUCCESS)
    for (size_t i = 0; i < names_.size(); ++i) {
      Total& t = totals_[names_[i]];
      ++t.calls;
      t.ms += static_cast<double>(ticks[2 * i + 1] - ticks[2 * i]) * ns_per_tick_ * 1e-6;
    }
  vkResetQueryPool(device_, pool_, 0, n);
  names_.clear();
}

void Profiler::print() const {
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double all = 0;
  for (const auto& [name, t] : rows) all += t.ms;
  std::fprintf(stderr, "KILN_VULKAN_PROFILE: %.1f ms of device time in %zu kinds of command; %llu commands untimed\n",
               all, rows.size(), static_cast<unsigned long long>(untimed_));
  std::fprintf(stderr, "%10s %8s %10s %6s  %s\n", "ms", "calls", "us/call", "share", "command (workgroups)");
  for (const auto& [name, t] : rows)
    std::fprintf(stderr, "%10.2f %8llu %10.2f %5.1f%%  %s\n", t.ms, static_cast<unsigned long long>(t.calls),
                 1e3 * t.ms / static_cast<double>(t.calls), 100.0 * t.ms / all, name.c_str());
}

}  // namespace kiln::vulkan
