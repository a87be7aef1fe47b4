// The server's memory plan (server/memory_plan.h): the 4B shape under a 24 GiB limit with a
// 2 x 2,048 SFT job reserved, worked out here; admission of jobs against the room that leaves,
// and the refusal's numbers; the host backend, which is not planned.
#include <gtest/gtest.h>

#include "model/init.h"
#include "model/state.h"
#include "server/memory_plan.h"

namespace kiln {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// The 4B (bf16 checkpoint: bf16 K/V) served with the defaults: memory_fraction 0.9, 64 decode
// sequences of a 32,768-token context, the prefix cache's 16 snapshot slots and replay's one.
MemoryPlanInputs four_b_at_24_gib(int64_t reserve) {
  const ModelConfig c = preset_config("qwen3.5-4b").value();
  MemoryPlanInputs in;
  in.device_bytes = 24 * kGiB;
  in.device_label = "the 24.00 GiB limit (KILN_CUDA_MEMORY_LIMIT_GB)";
  in.memory_fraction = 0.9;
  in.weight_bytes = 2 * int64_t{4205751296};  // the 4B's parameters in bf16
  in.slot_bytes = ModelState::slot_bytes_for(c);
  in.slots = 64 + 16 + 1;
  in.block_bytes = ModelState::block_bytes_for(c, DType::kBF16);
  in.max_blocks = 32768 / 64 * 64;
  in.min_blocks = 64;
  in.training_reserve_bytes = reserve;
  return in;
}

TrainMemoryEstimate sft_4b(int64_t sequences, int64_t tokens, int64_t rank = 16) {
  TrainJobShape s;
  s.sequence_tokens.assign(static_cast<size_t>(sequences), tokens);
  s.lora.rank = rank;
  return estimate_train_memory(preset_config("qwen3.5-4b").value(), s);
}

TEST(MemoryPlan, FourBAt24GiBLeavesATwoByTwoThousandJobItsRoom) {
  const TrainMemoryEstimate job = sft_4b(2, 2048);
  const MemoryPlanInputs in = four_b_at_24_gib(job.total());
  // A GDN slot: 24 layers x (32 x 128 x 128 state + 3 x 8192 conv taps) x 4 bytes; a K/V block:
  // 8 layers x K and V x 64 tokens x 4 heads x 256 x 2 bytes.
  ASSERT_EQ(in.slot_bytes, 24 * (32 * 128 * 128 + 3 * 8192) * 4);
  ASSERT_EQ(in.block_bytes, 8 * 2 * 64 * 4 * 256 * 2);
  const int64_t planned = static_cast<int64_t>(0.9 * static_cast<double>(24 * kGiB));  // 23,192,823,398
  const int64_t left = planned - 8411502592 - int64_t{81} * 52690944 - job.total();
  const int64_t blocks = left / 2097152;
  const MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.kv_blocks, blocks);
  EXPECT_EQ(p.kv_blocks, 2537);  // 162,368 tokens of K/V
  EXPECT_EQ(p.planned_bytes, planned);
  EXPECT_EQ(p.kv_bytes, 2537 * int64_t{2097152});
  EXPECT_EQ(p.training_room_bytes, planned - 8411502592 - int64_t{81} * 52690944 - 2537 * int64_t{2097152});
  EXPECT_GE(p.training_room_bytes, job.total());
  EXPECT_LT(p.training_room_bytes - job.total(), 2097152);  // less than a block's rounding left over

  // The job is admitted; its traces get half of what its estimate leaves of the room.
  const TrainAdmission a = admit_training(p, job, 0.5);
  EXPECT_FALSE(a.refusal) << *a.refusal;
  ASSERT_TRUE(a.trace_budget_bytes);
  EXPECT_EQ(*a.trace_budget_bytes, (p.training_room_bytes - job.total()) / 2);
}

TEST(MemoryPlan, WithoutAReserveTheKvPoolTakesTheJobsRoom) {
  const MemoryPlan reserved = plan_memory(four_b_at_24_gib(sft_4b(2, 2048).total()));
  const MemoryPlan none = plan_memory(four_b_at_24_gib(0));
  EXPECT_EQ(none.kv_blocks, (static_cast<int64_t>(0.9 * static_cast<double>(24 * kGiB)) - 8411502592 - int64_t{81} * 52690944) / 2097152);
  EXPECT_EQ(none.kv_blocks - reserved.kv_blocks, 5191319552 / 2097152 + 1);
  EXPECT_LT(none.training_room_bytes, int64_t{2097152});
  const TrainAdmission a = admit_training(none, sft_4b(2, 2048), 0.5);
  EXPECT_TRUE(a.refusal);
}

TEST(MemoryPlan, AJobOverTheRoomIsRefusedWithTheNumbers) {
  const MemoryPlan p = plan_memory(four_b_at_24_gib(sft_4b(2, 2048).total()));
  const TrainMemoryEstimate big = sft_4b(2, 8192, 64);
  const TrainAdmission a = admit_training(p, big, 0.5);
  ASSERT_TRUE(a.refusal);
  EXPECT_FALSE(a.trace_budget_bytes);
  const std::string& m = *a.refusal;
  for (const std::string& part :
       {"the job needs " + big.describe().substr(0, big.describe().find(' ')) + " GiB of device memory",
        std::string("4.84 GiB is free for training under the 24.00 GiB limit (KILN_CUDA_MEMORY_LIMIT_GB)"),
        std::string("(90% of it, 21.60 GiB, less 7.83 GiB of weights, 4.96 GiB of K/V blocks and 3.97 GiB of GDN state "
                    "slots)"),
        "Its estimate: " + big.describe(), std::string("training.reserve_sequences")})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\nnot in: " << m;
}

TEST(MemoryPlan, AConfiguredKvPoolIsKeptAndTheRoomIsWhatItLeaves) {
  MemoryPlanInputs in = four_b_at_24_gib(sft_4b(2, 2048).total());
  in.configured_kv_blocks = 4000;
  const MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.kv_blocks, 4000);
  EXPECT_EQ(p.training_room_bytes,
            static_cast<int64_t>(0.9 * static_cast<double>(24 * kGiB)) - 8411502592 - int64_t{81} * 52690944 - 4000 * int64_t{2097152});
  EXPECT_TRUE(admit_training(p, sft_4b(2, 2048), 0.5).refusal);  // 1.98 GiB of room for a 4.83 GiB job
  EXPECT_FALSE(admit_training(p, sft_4b(1, 512), 0.5).refusal);
}

TEST(MemoryPlan, AHostBackendSizesFromRamAndAdmitsByNoDevicePlan) {
  MemoryPlanInputs in;
  in.host_available_bytes = 10 * kGiB;
  in.memory_fraction = 0.5;
  in.block_bytes = 2097152;
  in.max_blocks = 100000;
  const MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.kv_blocks, 5 * kGiB / 2097152);
  EXPECT_EQ(p.training_room_bytes, 0);
  const TrainAdmission a = admit_training(p, sft_4b(2, 2048), 0.5);
  EXPECT_FALSE(a.refusal);
  EXPECT_FALSE(a.trace_budget_bytes);  // the trainer's own default
  in.max_blocks = 100;
  EXPECT_EQ(plan_memory(in).kv_blocks, 100);  // capped at what the decode sequences could use
}

}  // namespace
}  // namespace kiln
