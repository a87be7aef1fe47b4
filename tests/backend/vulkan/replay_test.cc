// Replay on Vulkan: the decode step recorded into a command buffer and submitted again equals the
// same padded step run eagerly, bit for bit, over batch buckets and K/V block boundaries, and the
// plain eager forward within 1e-4 of the largest logit (tests/model/decode_replay_check.h), on
// the f32 fixture and a bf16 checkpoint; while a recording is made another thread's calls are
// refused, and a host copy inside it is refused too. In the engine a steady decode step is one
// replay and one dispatch more (the argmax).
#include <gtest/gtest.h>

#include <thread>

#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_test_util.h"
#include "engine/engine.h"
#include "model/decode_replay_check.h"
#include "model/tiny_checkpoint.h"

namespace kiln {
namespace {

TEST(VulkanReplay, F32FixtureReplayEqualsTheEagerStep) {
  KILN_VULKAN_OR_SKIP(be);
  ASSERT_TRUE(be->replay().available());
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const uint64_t before = vulkan_backend_stats(*be)->replays;
  testing::expect_replay_matches_eager_and_forward(*be, be->replay(), **model, 1e-4);
  EXPECT_GT(vulkan_backend_stats(*be)->replays, before);
}

TEST(VulkanReplay, Bf16CheckpointReplayEqualsTheEagerStep) {
  KILN_VULKAN_OR_SKIP(be);
  const std::string dir = testing::tiny_checkpoint("vulkan-replay-bf16", 11);
  ASSERT_FALSE(dir.empty());
  auto model = Qwen35Model::load(dir, *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  // f32 activations and K/V over widened bf16 weights: only the order of f32 sums differs.
  testing::expect_replay_matches_eager_and_forward(*be, be->replay(), **model, 1e-4);
}

TEST(VulkanReplay, OtherThreadsAndHostCopiesAreRefusedWhileRecording) {
  KILN_VULKAN_OR_SKIP(be);
  Tensor dev = be->storage().allocate({256}, DType::kF32).value();
  Tensor host = Tensor::empty({256}, DType::kF32);
  Status other_copy, other_alloc, own_copy;
  auto rec = be->replay().record([&]() -> Status {
    std::thread other([&] {
      other_copy = be->storage().copy_from_host(host, dev);
      other_alloc = be->storage().allocate({16}, DType::kF32).status();
    });
    other.join();
    own_copy = be->storage().copy_from_host(host, dev);  // cannot be recorded
    return be->storage().zero(dev);                        // recorded
  });
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(other_copy.code(), ErrorCode::kFailedPrecondition) << other_copy.to_string();
  EXPECT_EQ(other_alloc.code(), ErrorCode::kFailedPrecondition) << other_alloc.to_string();
  EXPECT_EQ(own_copy.code(), ErrorCode::kFailedPrecondition) << own_copy.to_string();
  // Once recorded, any thread may call; the replay zeroes what a host copy filled.
  for (int i = 0; i < 256; ++i) host.data<float>()[i] = 1.f;
  Status after;
  std::thread other([&] { after = be->storage().copy_from_host(host, dev); });
  other.join();
  ASSERT_TRUE(after.ok()) << after.to_string();
  ASSERT_TRUE(be->replay().replay(**rec).ok());
  Tensor back = testing::to_host(*be, dev);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(back.data<float>()[i], 0.f) << i;
}

TEST(VulkanEngine, SteadyDecodeStepIsOneReplay) {
  KILN_VULKAN_OR_SKIP(be);
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int32_t V = static_cast<int32_t>((*model)->config().vocab_size);
  for (int rows : {1, 8}) {
    EngineConfig ec;
    ec.kv_blocks = 32;
    ec.scheduler.max_running = 8;
    ec.prefix_cache.enabled = false;
    auto engine = Engine::create(**model, ec);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    std::vector<Submission> subs;
    for (int i = 0; i < rows; ++i) {
      RequestSpec r;
      for (int32_t t = 0; t < 8 + i; ++t) r.prompt.push_back((t * 31 + i * 7 + 3) % V);
      r.max_tokens = 20;
      r.ignore_eos = true;
      r.sampling.temperature = 0.f;
      r.sampling.logprobs = false;  // greedy without logprobs: the device argmax, only ids cross
      subs.push_back((*engine)->submit(r).value());
    }
    ASSERT_TRUE((*engine)->step().ok());  // the prompts, and the first tokens
    ASSERT_TRUE((*engine)->step().ok());  // the first decode step: warm-up, recording, replay
    ASSERT_EQ((*engine)->stats().decode_recordings, 1);
    for (int s = 0; s < 10; ++s) {
      const VulkanStats before = vulkan_backend_stats(*be).value();
      ASSERT_TRUE((*engine)->step().ok());
      const VulkanStats after = vulkan_backend_stats(*be).value();
      EXPECT_EQ(after.replays - before.replays, 1u) << rows << " rows, step " << s;
      EXPECT_EQ(after.dispatches - before.dispatches, 1u) << rows << " rows, step " << s << " (the argmax alone)";
    }
    EXPECT_EQ((*engine)->stats().decode_replays, 11);
    for (auto& sub : subs) {
      int64_t tokens = 0;
      while (auto e = sub.channel->try_pop()) tokens += e->token >= 0;
      EXPECT_EQ(tokens, 12) << rows << " rows";
    }
  }
}

}  // namespace
}  // namespace kiln
