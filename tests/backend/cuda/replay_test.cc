// CUDA graphs (replay parity): the decode step recorded and replayed equals the same
// padded step run eagerly, bit for bit, over batch buckets and K/V block boundaries, and the
// plain eager forward within a stated tolerance (tests/model/decode_replay_check.h), on the f32
// fixture (with and without adapters) and on a bf16 checkpoint (the GEMV and bf16 GEMM paths).
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "model/decode_replay_check.h"
#include "model/tiny_checkpoint.h"

namespace kiln {
namespace {

TEST(CudaReplay, F32FixtureReplayEqualsTheEagerStep) {
  KILN_CUDA_OR_SKIP(be);
  ASSERT_TRUE(be->replay().available()) << "KILN_CUDA_GRAPHS=0 or KILN_CUDA_PROFILE set";
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  // f32 throughout: padding changes cuBLASLt's row count and the attention's key splits, so f32
  // sums are reordered; four layers keep that near 1e-6 of the largest logit.
  testing::expect_replay_matches_eager_and_forward(*be, be->replay(), **model, 1e-4);
  auto stats = cuda_backend_stats(*be);
  ASSERT_TRUE(stats.ok());
  EXPECT_GT(stats->graph_replays, 0u);
}

// Rows with adapters (the LoRA kernels' segments baked into the graph, the adapters held by it).
TEST(CudaReplay, AdapterRowsReplayEqualsTheEagerStep) {
  KILN_CUDA_OR_SKIP(be);
  ASSERT_TRUE(be->replay().available()) << "KILN_CUDA_GRAPHS=0 or KILN_CUDA_PROFILE set";
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  testing::TwoAdapters ad(**model, be->storage());
  const uint64_t before = cuda_backend_stats(*be)->graph_replays;
  testing::expect_replay_matches_eager_and_forward(*be, be->replay(), **model, 1e-4, ad.stacks());
  EXPECT_GT(cuda_backend_stats(*be)->graph_replays, before);
}

// While a recording is made, another thread's storage calls are refused (on the stream they
// would be captured into the graph or invalidate it) and the recording still succeeds; once it
// is made, any thread may call again.
TEST(CudaReplay, AnotherThreadsStorageCallsAreRefusedWhileRecording) {
  KILN_CUDA_OR_SKIP(be);
  ASSERT_TRUE(be->replay().available()) << "KILN_CUDA_GRAPHS=0 or KILN_CUDA_PROFILE set";
  Tensor dev = be->storage().allocate({256}, DType::kF32).value();
  Tensor host = Tensor::empty({256}, DType::kF32);
  Status copy, alloc;
  auto rec = be->replay().record([&]() -> Status {
    std::thread other([&] {
      copy = be->storage().copy_from_host(host, dev);
      alloc = be->storage().allocate({16}, DType::kF32).status();
    });
    other.join();
    return be->storage().zero(dev);  // the recording thread's own call is captured
  });
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(copy.code(), ErrorCode::kFailedPrecondition) << copy.to_string();
  EXPECT_EQ(alloc.code(), ErrorCode::kFailedPrecondition) << alloc.to_string();
  Status after;
  std::thread other([&] { after = be->storage().copy_from_host(host, dev); });
  other.join();
  EXPECT_TRUE(after.ok()) << after.to_string();
  EXPECT_TRUE(be->replay().replay(**rec).ok());
  EXPECT_TRUE(be->storage().synchronize().ok());
}

TEST(CudaReplay, Bf16CheckpointReplayEqualsTheEagerStep) {
  KILN_CUDA_OR_SKIP(be);
  const std::string dir = testing::tiny_checkpoint("cuda-replay-bf16", 11);
  ASSERT_FALSE(dir.empty());
  auto model = Qwen35Model::load(dir, *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  // bf16 GEMM inputs: a reordered f32 sum can flip one bf16 rounding of an activation, which a
  // random tiny model amplifies to ~6e-3 (CudaModel.Bf16CheckpointMatchesCpuWithRoundedGemmInputs).
  testing::expect_replay_matches_eager_and_forward(*be, be->replay(), **model, 2e-2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
