#include "server/memory_plan.h"

#include <algorithm>

#include "backend/device_memory_limit.h"

namespace kiln {

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  MemoryPlan p;
  p.device_bytes = in.device_bytes;
  p.device_label = in.device_label;
  p.memory_fraction = in.memory_fraction;
  p.weight_bytes = in.weight_bytes;
  if (in.device_bytes > 0) {
    p.planned_bytes = static_cast<int64_t>(in.memory_fraction * static_cast<double>(in.device_bytes));
    p.slot_bytes = in.slot_bytes * in.slots;
  }
  if (in.configured_kv_blocks > 0) {
    p.kv_blocks = in.configured_kv_blocks;
  } else if (in.block_bytes <= 0) {
    p.kv_blocks = in.max_blocks;
  } else {
    const int64_t budget = in.device_bytes > 0
                               ? p.planned_bytes - p.weight_bytes - p.slot_bytes - in.training_reserve_bytes
                               : static_cast<int64_t>(in.memory_fraction * static_cast<double>(in.host_available_bytes));
    const int64_t fit = std::max<int64_t>(budget, 0) / in.block_bytes;
    p.kv_blocks = std::max(std::min(in.max_blocks, fit), in.min_blocks);
  }
  if (in.device_bytes > 0) {
    p.kv_bytes = p.kv_blocks * in.block_bytes;
    p.training_room_bytes = std::max<int64_t>(p.planned_bytes - p.weight_bytes - p.slot_bytes - p.kv_bytes, 0);
  }
  return p;
}

TrainAdmission admit_training(const MemoryPlan& plan, const TrainMemoryEstimate& need, double trace_memory_fraction) {
  TrainAdmission a;
  if (plan.device_bytes == 0) return a;
  const int64_t room = plan.training_room_bytes, total = need.total();
  if (total > room) {
    a.refusal = "the job needs " + format_gib(static_cast<uint64_t>(total)) + " of device memory, " +
                format_gib(static_cast<uint64_t>(room)) + " is free for training under " + plan.device_label + " (" +
                std::to_string(static_cast<int>(plan.memory_fraction * 100 + 0.5)) + "% of it, " +
                format_gib(static_cast<uint64_t>(plan.planned_bytes)) + ", less " +
                format_gib(static_cast<uint64_t>(plan.weight_bytes)) + " of weights, " +
                format_gib(static_cast<uint64_t>(plan.kv_bytes)) + " of K/V blocks and " +
                format_gib(static_cast<uint64_t>(plan.slot_bytes)) + " of GDN state slots). Its estimate: " +
                need.describe() + ". Shorten its sequences or lower batch_size or lora_rank; or start the server " +
                "with a larger training.reserve_sequences / reserve_sequence_tokens so the K/V pool leaves more";
    return a;
  }
  a.trace_budget_bytes = static_cast<int64_t>(trace_memory_fraction * static_cast<double>(room - total));
  return a;
}

}  // namespace kiln
