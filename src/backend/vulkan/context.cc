#include "backend/vulkan/context.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "backend/vulkan/shaders.h"

namespace kiln::vulkan {

namespace {

constexpr size_t kStagingBytes = size_t{32} << 20;
constexpr size_t kFlushEvery = 64;  // commands per submission: the device starts while the host records
constexpr uint64_t kWaitNs = uint64_t{300} * 1000 * 1000 * 1000;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::string type_name_of(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

bool has_extension(VkPhysicalDevice d, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(d, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(d, nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

// What the device lacks of what the shaders need; empty when it has it all.
std::string missing_features(VkPhysicalDevice d) {
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(d, &p);
  if (p.apiVersion < VK_API_VERSION_1_2) return "Vulkan 1.2";
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
  VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
  vkGetPhysicalDeviceFeatures2(d, &f);
  std::string missing;
  auto need = [&](bool ok, const char* what) {
    if (!ok) missing += (missing.empty() ? "" : ", ") + std::string(what);
  };
  need(f12.bufferDeviceAddress, "bufferDeviceAddress");
  need(f12.timelineSemaphore, "timelineSemaphore");
  need(f11.storageBuffer16BitAccess, "storageBuffer16BitAccess");
  need(f.features.shaderInt64, "shaderInt64");
  uint32_t families = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(d, &families, nullptr);
  std::vector<VkQueueFamilyProperties> qs(families);
  vkGetPhysicalDeviceQueueFamilyProperties(d, &families, qs.data());
  bool compute = false;
  for (const auto& q : qs) compute |= (q.queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
  need(compute, "a compute queue");
  return missing;
}

// Whether the device multiplies 16 x 16 x 16 f16 matrices into f32 on a subgroup, as
// matmul_coop.comp does (VK_NV_cooperative_matrix; the feature itself is checked by the caller).
bool has_coop_16x16x16(VkInstance instance, VkPhysicalDevice d) {
  if (!has_extension(d, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) return false;
  auto props = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (props == nullptr) return false;
  uint32_t n = 0;
  if (props(d, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkCooperativeMatrixPropertiesNV> shapes(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  if (props(d, &n, shapes.data()) != VK_SUCCESS) return false;
  for (const auto& c : shapes)
    if (c.MSize == 16 && c.NSize == 16 && c.KSize == 16 && c.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
        c.BType == VK_COMPONENT_TYPE_FLOAT16_NV && c.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
        c.DType == VK_COMPONENT_TYPE_FLOAT32_NV && c.scope == VK_SCOPE_SUBGROUP_NV)
      return true;
  return false;
}

}  // namespace

std::string DeviceInfo::type_name() const { return type_name_of(type); }

Result<std::shared_ptr<Context>> Context::create(const DeviceChoice& choice) {
  std::shared_ptr<Context> ctx(new Context());
  KILN_RETURN_IF_ERROR(ctx->init(choice));
  return ctx;
}

Status Context::init(const DeviceChoice& choice) {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "kiln";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  // Portability drivers (MoltenVK) are listed only when the instance asks for them.
  uint32_t n_ext = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> inst_exts(n_ext);
  vkEnumerateInstanceExtensionProperties(nullptr, &n_ext, inst_exts.data());
  std::vector<const char*> exts;
  for (const auto& e : inst_exts)
    if (std::strcmp(e.extensionName, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME) == 0) {
      exts.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
      ici.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
  ici.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  ici.ppEnabledExtensionNames = exts.data();
  const char* layer = "VK_LAYER_KHRONOS_validation";
  if (choice.validation) {
    uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> layers(n);
    vkEnumerateInstanceLayerProperties(&n, layers.data());
    bool found = false;
    for (const auto& l : layers) found |= std::strcmp(l.layerName, layer) == 0;
    if (!found) return not_found("vulkan.validation: the layer " + std::string(layer) + " is not installed");
    ici.enabledLayerCount = 1;
    ici.ppEnabledLayerNames = &layer;
  }
  VkResult r = vkCreateInstance(&ici, nullptr, &instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return not_found("no Vulkan driver (the loader found no ICD)");
  KILN_RETURN_IF_ERROR(vk_status(r, "vkCreateInstance"));

  uint32_t count = 0;
  vkEnumeratePhysicalDevices(instance_, &count, nullptr);
  std::vector<VkPhysicalDevice> devices(count);
  vkEnumeratePhysicalDevices(instance_, &count, devices.data());
  if (devices.empty()) return not_found("no Vulkan device (the driver lists none)");
  std::vector<std::string> names;
  for (VkPhysicalDevice d : devices) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(d, &p);
    names.push_back(p.deviceName);
  }
  auto listing = [&] {
    std::string s;
    for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + std::to_string(i) + ": " + names[i];
    return s;
  };
  int chosen = -1;
  const std::string& sel = choice.selector;
  if (!sel.empty()) {
    const bool numeric = std::all_of(sel.begin(), sel.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    for (size_t i = 0; i < devices.size() && chosen < 0; ++i)
      if (numeric ? std::to_string(i) == sel : lower(names[i]).find(lower(sel)) != std::string::npos)
        chosen = static_cast<int>(i);
    if (chosen < 0) return not_found("vulkan.device '" + sel + "' matches none of " + listing());
    const std::string missing = missing_features(devices[chosen]);
    if (!missing.empty())
      return unsupported("vulkan device " + names[chosen] + " lacks what the shaders need: " + missing);
  } else {
    int best_rank = 99;
    std::string why;
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string missing = missing_features(devices[i]);
      if (!missing.empty()) {
        why += (why.empty() ? "" : "; ") + names[i] + " lacks " + missing;
        continue;
      }
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(devices[i], &p);
      if (type_rank(p.deviceType) < best_rank) best_rank = type_rank(p.deviceType), chosen = static_cast<int>(i);
    }
    if (chosen < 0) return unsupported("no Vulkan device has what the shaders need (" + why + ")");
  }
  physical_ = devices[chosen];

  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, &sub};
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, &drv};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &m3};
  vkGetPhysicalDeviceProperties2(physical_, &props);
  const VkPhysicalDeviceLimits& lim = props.properties.limits;
  info_.name = props.properties.deviceName;
  info_.driver = std::string(drv.driverName) + " " + drv.driverInfo;
  info_.type = props.properties.deviceType;
  info_.api_version = props.properties.apiVersion;
  info_.subgroup_size = sub.subgroupSize;
  info_.subgroup_arithmetic = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
                              (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) != 0;
  info_.shared_memory_bytes = lim.maxComputeSharedMemorySize;
  info_.max_workgroup_size = lim.maxComputeWorkGroupInvocations;
  info_.max_groups_x = lim.maxComputeWorkGroupCount[0];
  info_.push_constant_bytes = lim.maxPushConstantsSize;
  info_.max_allocation_bytes = m3.maxMemoryAllocationSize;
  if (info_.type == VK_PHYSICAL_DEVICE_TYPE_CPU && sel.empty())
    info_.warning = "no Vulkan GPU found; using " + info_.name + ", a CPU driver (correct, and slow)";

  uint32_t families = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, nullptr);
  std::vector<VkQueueFamilyProperties> qs(families);
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, qs.data());
  for (uint32_t i = 0; i < families; ++i)
    if (qs[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = i;
      break;
    }
  const float priority = 1.f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  const bool coop_ext = has_coop_16x16x16(instance_, physical_);
  VkPhysicalDeviceCooperativeMatrixFeaturesNV has_coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceVulkan12Features has12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                         coop_ext ? &has_coop : nullptr};
  VkPhysicalDeviceFeatures2 has{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &has12};
  vkGetPhysicalDeviceFeatures2(physical_, &has);
  // matmul_coop.comp: 8 subgroups of 32, 38,912 bytes of shared memory.
  info_.cooperative_matrix = coop_ext && has_coop.cooperativeMatrix && has12.shaderFloat16 &&
                             has12.vulkanMemoryModel && info_.subgroup_size == 32 &&
                             info_.shared_memory_bytes >= 38912 && info_.max_workgroup_size >= 256;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  coop.cooperativeMatrix = VK_TRUE;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                       info_.cooperative_matrix ? &coop : nullptr};
  f12.bufferDeviceAddress = VK_TRUE;
  f12.timelineSemaphore = VK_TRUE;
  f12.hostQueryReset = has12.hostQueryReset;  // the profiler's, where the device has it
  f12.shaderFloat16 = info_.cooperative_matrix;
  f12.vulkanMemoryModel = info_.cooperative_matrix;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
  f11.storageBuffer16BitAccess = VK_TRUE;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
  features.features.shaderInt64 = VK_TRUE;
  std::vector<const char*> dev_exts;
  if (has_extension(physical_, "VK_KHR_portability_subset")) dev_exts.push_back("VK_KHR_portability_subset");
  if (info_.cooperative_matrix) dev_exts.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &features};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<uint32_t>(dev_exts.size());
  dci.ppEnabledExtensionNames = dev_exts.data();
  KILN_RETURN_IF_ERROR(vk_status(vkCreateDevice(physical_, &dci, nullptr, &device_), "vkCreateDevice " + info_.name));
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  KILN_RETURN_IF_ERROR(vk_status(vkCreateCommandPool(device_, &pci, nullptr, &pool_), "vkCreateCommandPool"));
  VkSemaphoreTypeCreateInfo sti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  sti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &sti};
  KILN_RETURN_IF_ERROR(vk_status(vkCreateSemaphore(device_, &sci, nullptr, &timeline_), "vkCreateSemaphore (timeline)"));
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<uint32_t>(kPushBytes)};
  VkPipelineLayoutCreateInfo lci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  KILN_RETURN_IF_ERROR(vk_status(vkCreatePipelineLayout(device_, &lci, nullptr, &layout_), "vkCreatePipelineLayout"));

  memory_ = std::make_unique<Memory>(physical_, device_, [this] { (void)synchronize(); });
  KILN_RETURN_IF_ERROR(memory_->init());
  info_.device_local_bytes = memory_->device_local_bytes();
  info_.unified_memory = memory_->unified();
  KILN_ASSIGN_OR_RETURN(staging_, memory_->host_block(kStagingBytes));
  if (has12.hostQueryReset) profiler_ = Profiler::from_env(device_, physical_, queue_family_);
  return {};
}

Context::~Context() {
  if (device_) vkDeviceWaitIdle(device_);
  if (profiler_) profiler_->harvest();
  profiler_.reset();  // prints its table while the device exists
  if (memory_) {
    memory_->free_host(staging_);
    memory_.reset();
  }
  for (auto& [name, p] : pipelines_) vkDestroyPipeline(device_, p.pipeline, nullptr);
  for (VkShaderModule m : modules_) vkDestroyShaderModule(device_, m, nullptr);
  if (layout_) vkDestroyPipelineLayout(device_, layout_, nullptr);
  if (timeline_) vkDestroySemaphore(device_, timeline_, nullptr);
  if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
  if (device_) vkDestroyDevice(device_, nullptr);
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

Result<VkPipeline> Context::pipeline(std::string_view shader, const Spec& spec) {
  std::string key(shader);
  for (uint32_t v : spec) key += ":" + std::to_string(v);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return it->second.pipeline;
  const ShaderModule* found = nullptr;
  for (const ShaderModule& m : shader_modules())
    if (m.name == shader) found = &m;
  if (!found) return not_found("no shader '" + std::string(shader) + "' in this build");
  VkShaderModuleCreateInfo mci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mci.codeSize = found->code.size() * sizeof(uint32_t);
  mci.pCode = found->code.data();
  VkShaderModule module;
  KILN_RETURN_IF_ERROR(vk_status(vkCreateShaderModule(device_, &mci, nullptr, &module), "vkCreateShaderModule " + key));
  modules_.push_back(module);
  std::array<VkSpecializationMapEntry, std::tuple_size_v<Spec>> entries;
  for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo si{static_cast<uint32_t>(entries.size()), entries.data(), sizeof(spec), spec.data()};
  VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = module;
  cpi.stage.pName = "main";
  cpi.stage.pSpecializationInfo = &si;
  cpi.layout = layout_;
  VkPipeline p;
  KILN_RETURN_IF_ERROR(vk_status(vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &cpi, nullptr, &p),
                                 "vkCreateComputePipelines " + key));
  pipelines_[key] = {p};
  return p;
}

Status Context::reclaim() {
  uint64_t done = 0;
  KILN_RETURN_IF_ERROR(vk_status(vkGetSemaphoreCounterValue(device_, timeline_, &done), "vkGetSemaphoreCounterValue"));
  while (!in_flight_.empty() && in_flight_.front().second <= done) {
    vkResetCommandBuffer(in_flight_.front().first, 0);
    idle_.push_back(in_flight_.front().first);
    in_flight_.pop_front();
  }
  return {};
}

Result<VkCommandBuffer> Context::command_buffer() {
  if (recorded_ && recorder_.load(std::memory_order_acquire) == std::this_thread::get_id()) return recorded_;
  if (open_) return open_;
  KILN_RETURN_IF_ERROR(reclaim());
  VkCommandBuffer cb;
  if (!idle_.empty()) {
    cb = idle_.back();
    idle_.pop_back();
  } else {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    KILN_RETURN_IF_ERROR(vk_status(vkAllocateCommandBuffers(device_, &ai, &cb), "vkAllocateCommandBuffers"));
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  KILN_RETURN_IF_ERROR(vk_status(vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer"));
  open_ = cb;
  open_commands_ = 0;
  return cb;
}

// Every earlier command's writes (earlier submissions included: a barrier's first scope is all
// that precedes it on the queue) before any later command reads or writes.
void Context::barrier(VkCommandBuffer cb) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

std::array<uint32_t, 3> Context::grid(uint64_t groups) const {
  const uint64_t max_x = std::max<uint32_t>(info_.max_groups_x, 1);
  if (groups <= max_x) return {static_cast<uint32_t>(std::max<uint64_t>(groups, 1)), 1, 1};
  return {static_cast<uint32_t>(max_x), static_cast<uint32_t>((groups + max_x - 1) / max_x), 1};
}

Result<VkCommandBuffer> Context::begin_command(std::string_view name, const std::array<uint32_t, 3>& groups) {
  const bool profiled = profiler_ && !recording();
  KILN_ASSIGN_OR_RETURN(VkCommandBuffer cb, command_buffer());
  const bool grouped = group_owner_ == std::this_thread::get_id();
  if (!grouped || barrier_due_) barrier(cb);
  barrier_due_ = !grouped;
  if (profiled)
    profiler_->begin(cb, std::string(name) + " (" + std::to_string(groups[0]) + "x" + std::to_string(groups[1]) + "x" +
                             std::to_string(groups[2]) + ")");
  return cb;
}

void Context::group_begin() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  group_owner_ = std::this_thread::get_id();
  barrier_due_ = true;
}

void Context::group_end() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  group_owner_ = std::thread::id();
  barrier_due_ = true;
}

void Context::end_command(VkCommandBuffer cb) {
  if (profiler_ && cb != recorded_) profiler_->end(cb);
}

Status Context::dispatch_raw(std::string_view shader, const void* push, size_t bytes, std::array<uint32_t, 3> groups,
                             Spec spec) {
  KILN_RETURN_IF_ERROR(check_thread("dispatch"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(VkPipeline p, pipeline(shader, spec));
  if (groups[0] == 0 || groups[1] == 0 || groups[2] == 0) return {};
  KILN_ASSIGN_OR_RETURN(VkCommandBuffer cb, begin_command(shader, groups));
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
  std::array<uint8_t, kPushBytes> data{};
  std::memcpy(data.data(), push, std::min(bytes, kPushBytes));
  vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<uint32_t>(kPushBytes), data.data());
  vkCmdDispatch(cb, groups[0], groups[1], groups[2]);
  end_command(cb);
  ++dispatches_;
  if (cb == recorded_) return {};
  if (++open_commands_ >= kFlushEvery) KILN_RETURN_IF_ERROR(flush().status());
  return {};
}

// The profiler's name for a transfer: its direction (through the staging ring or on the device)
// and its size rounded up to a power of two, so that a table tells uploads from device copies.
std::string Context::copy_label(const BufferSpan& src, const BufferSpan& dst, size_t bytes) const {
  if (!profiler_) return "vkCmdCopyBuffer";
  const char* kind = src.buffer == staging_.buffer ? "upload" : dst.buffer == staging_.buffer ? "download" : "device";
  size_t bucket = 1;
  while (bucket < bytes) bucket *= 2;
  return std::string("vkCmdCopyBuffer ") + kind + " <=" + std::to_string(bucket) + " B";
}

Status Context::copy(const BufferSpan& src, const BufferSpan& dst, size_t bytes) {
  if (bytes == 0) return {};
  KILN_RETURN_IF_ERROR(check_thread("copy"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(VkCommandBuffer cb, begin_command(copy_label(src, dst, bytes), {1, 1, 1}));
  VkBufferCopy region{src.offset, dst.offset, bytes};
  vkCmdCopyBuffer(cb, src.buffer, dst.buffer, 1, &region);
  end_command(cb);
  ++open_commands_;
  return {};
}

Status Context::fill_zero(const BufferSpan& dst, size_t bytes) {
  if (bytes == 0) return {};
  KILN_RETURN_IF_ERROR(check_thread("zero"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  // vkCmdFillBuffer writes whole 4-byte words at 4-byte offsets; other spans copy zeros in.
  if (dst.offset % 4 == 0 && bytes % 4 == 0) {
    KILN_ASSIGN_OR_RETURN(VkCommandBuffer cb, begin_command("vkCmdFillBuffer", {1, 1, 1}));
    vkCmdFillBuffer(cb, dst.buffer, dst.offset, bytes, 0);
    end_command(cb);
    ++open_commands_;
    return {};
  }
  std::vector<uint8_t> zeros(bytes, 0);
  return upload(zeros.data(), dst, bytes);
}

Result<uint64_t> Context::flush() {
  KILN_RETURN_IF_ERROR(check_owner("flush"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!open_) return next_value_;
  // The host reads what the device wrote once the semaphore says so.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(open_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  KILN_RETURN_IF_ERROR(vk_status(vkEndCommandBuffer(open_), "vkEndCommandBuffer"));
  KILN_ASSIGN_OR_RETURN(const uint64_t value, submit(open_));
  in_flight_.emplace_back(open_, value);
  open_ = VK_NULL_HANDLE;
  open_commands_ = 0;
  return value;
}

// One command buffer on the queue, signalling the timeline's next value when it completes.
Result<uint64_t> Context::submit(VkCommandBuffer cb) {
  const uint64_t value = next_value_ + 1;
  VkTimelineSemaphoreSubmitInfo ts{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  ts.signalSemaphoreValueCount = 1;
  ts.pSignalSemaphoreValues = &value;
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO, &ts};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &timeline_;
  KILN_RETURN_IF_ERROR(vk_status(vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit"));
  next_value_ = value;
  ++submits_;
  return value;
}

Status Context::wait(uint64_t value) {
  VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline_;
  wi.pValues = &value;
  KILN_RETURN_IF_ERROR(vk_status(vkWaitSemaphores(device_, &wi, kWaitNs), "waiting for the Vulkan device"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return reclaim();
}

Status Context::synchronize() {
  KILN_RETURN_IF_ERROR(check_owner("synchronize"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(uint64_t value, flush());
  KILN_RETURN_IF_ERROR(wait(value));
  staging_head_ = 0;  // nothing in flight reads the ring any more
  if (profiler_) profiler_->harvest();
  return {};
}

Status Context::upload(const void* host, const BufferSpan& dst, size_t bytes) {
  KILN_RETURN_IF_ERROR(check_owner("copy from the host"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const auto* src = static_cast<const uint8_t*>(host);
  for (size_t done = 0; done < bytes;) {
    if (staging_head_ >= staging_.bytes) KILN_RETURN_IF_ERROR(synchronize());
    const size_t n = std::min(bytes - done, staging_.bytes - staging_head_);
    std::memcpy(static_cast<uint8_t*>(staging_.mapped) + staging_head_, src + done, n);
    KILN_RETURN_IF_ERROR(copy({staging_.buffer, staging_head_}, {dst.buffer, dst.offset + done}, n));
    staging_head_ = (staging_head_ + n + 255) / 256 * 256;
    done += n;
  }
  return {};
}

Status Context::download(const BufferSpan& src, void* host, size_t bytes) {
  KILN_RETURN_IF_ERROR(check_owner("copy to the host"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto* out = static_cast<uint8_t*>(host);
  for (size_t done = 0; done < bytes;) {
    KILN_RETURN_IF_ERROR(synchronize());  // the ring is free from its start
    const size_t n = std::min(bytes - done, staging_.bytes);
    KILN_RETURN_IF_ERROR(copy({src.buffer, src.offset + done}, {staging_.buffer, 0}, n));
    KILN_RETURN_IF_ERROR(synchronize());
    std::memcpy(out + done, staging_.mapped, n);
    done += n;
  }
  return {};
}

// Another thread's work while a recording is made would land in the recording (or between its
// commands): refused. The recording thread's own dispatches, copies and fills are recorded.
Status Context::check_thread(const char* what) const {
  const std::thread::id r = recorder_.load(std::memory_order_acquire);
  if (r != std::thread::id() && r != std::this_thread::get_id())
    return failed_precondition(std::string("vulkan ") + what + ": another thread is recording a replay");
  return {};
}

Status Context::check_owner(const char* what) const {
  const std::thread::id r = recorder_.load(std::memory_order_acquire);
  if (r == std::thread::id()) return {};
  if (r != std::this_thread::get_id())
    return failed_precondition(std::string("vulkan ") + what + ": another thread is recording a replay");
  return failed_precondition(std::string("vulkan ") + what + ": not possible inside a recording (it would not replay)");
}

Status Context::begin_recording() {
  std::thread::id none;
  if (!recorder_.compare_exchange_strong(none, std::this_thread::get_id(), std::memory_order_acq_rel))
    return failed_precondition("vulkan replay: a recording is already being made");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  Status st = vk_status(vkAllocateCommandBuffers(device_, &ai, &recorded_), "vulkan replay: vkAllocateCommandBuffers");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;  // submitted again while in flight
  if (st.ok()) st = vk_status(vkBeginCommandBuffer(recorded_, &bi), "vulkan replay: vkBeginCommandBuffer");
  if (!st.ok()) {
    if (recorded_) vkFreeCommandBuffers(device_, pool_, 1, &recorded_);
    recorded_ = VK_NULL_HANDLE;
    recorder_.store(std::thread::id(), std::memory_order_release);
    return st;
  }
  memory_->set_recording(true);
  return {};
}

Result<VkCommandBuffer> Context::end_recording(bool keep) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  VkCommandBuffer cb = recorded_;
  recorded_ = VK_NULL_HANDLE;
  memory_->set_recording(false);
  recorder_.store(std::thread::id(), std::memory_order_release);
  Status st = cb ? vk_status(vkEndCommandBuffer(cb), "vulkan replay: vkEndCommandBuffer") : Status();
  if (!keep || !st.ok()) {
    if (cb) vkFreeCommandBuffers(device_, pool_, 1, &cb);
    if (!st.ok()) return st;
    return VkCommandBuffer(VK_NULL_HANDLE);
  }
  return cb;
}

Result<uint64_t> Context::submit_recorded(VkCommandBuffer cb) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  KILN_RETURN_IF_ERROR(flush().status());  // the eager work queued before it goes first
  KILN_ASSIGN_OR_RETURN(const uint64_t value, submit(cb));
  ++replays_;
  return value;
}

void Context::free_recorded(VkCommandBuffer cb, uint64_t last_value) {
  if (last_value) (void)wait(last_value);  // the device may still run it
  std::lock_guard<std::recursive_mutex> lock(mu_);
  vkFreeCommandBuffers(device_, pool_, 1, &cb);
}

}  // namespace kiln::vulkan
