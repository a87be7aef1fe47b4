// How a server divides device memory: the weights, the engine's GDN state slots, the K/V pool,
// and the room a training job may take (docs/cuda.md, "Memory limit"). memory.memory_fraction of
// the device (under KILN_CUDA_MEMORY_LIMIT_GB, of the limit) is planned; the rest is headroom
// for the CUDA context, serving's activations and loaded adapters. The K/V pool takes what is
// left after the weights, the slots and a job of the training.reserve_* shape; a job is admitted
// when its estimate (train/train_memory.h) fits the room the pool left, and never started
// otherwise. Pure arithmetic, so the numbers are tested without a device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/train_memory.h"

namespace kiln {

struct MemoryPlanInputs {
  uint64_t device_bytes = 0;          // capabilities().storage.device_memory_bytes; 0: a host backend
  uint64_t host_available_bytes = 0;  // RAM available now, what a host backend's K/V is sized from
  std::string device_label;           // "the 24.00 GiB limit (KILN_CUDA_MEMORY_LIMIT_GB)", "the 79.19 GiB device"
  double memory_fraction = 0.9;       // memory.memory_fraction
  int64_t weight_bytes = 0;
  int64_t slot_bytes = 0, slots = 0;  // GDN state slots the engine keeps (sequences, snapshots)
  int64_t block_bytes = 0;            // one 64-token K/V block over every attention layer
  int64_t max_blocks = 0;             // what max_decode_batch sequences of the full context could use
  int64_t min_blocks = 1;             // the fewest blocks a server starts with
  int64_t configured_kv_blocks = 0;   // memory.kv_blocks; 0: sized here
  int64_t training_reserve_bytes = 0; // the estimate of a training.reserve_* job; 0: none kept
};

struct MemoryPlan {
  int64_t kv_blocks = 0;
  uint64_t device_bytes = 0;          // 0: no device plan (host backend): jobs are not admitted by memory
  std::string device_label;
  double memory_fraction = 0;
  int64_t planned_bytes = 0;          // memory_fraction of device_bytes
  int64_t weight_bytes = 0, slot_bytes = 0, kv_bytes = 0;
  int64_t training_room_bytes = 0;    // planned - weights - slots - K/V: what one job may hold
};

MemoryPlan plan_memory(const MemoryPlanInputs& in);

struct TrainAdmission {
  std::optional<std::string> refusal;  // why the job cannot run, with the numbers
  // The job's trace budget: trace_memory_fraction of the room its estimate leaves (unset on a host
  // backend: the trainer's own default).
  std::optional<int64_t> trace_budget_bytes;
};

// `need` is the job's estimate without traces.
TrainAdmission admit_training(const MemoryPlan& plan, const TrainMemoryEstimate& need, double trace_memory_fraction);

}  // namespace kiln
