// Kernel launches per decode token: the engine decodes a batch-1 request on a fixture
// model, and the launches each decode step makes (cuda_backend_stats: kernels plus cuBLASLt
// matmuls) must equal the count of the forward's operations, derived here by hand from the
// model's layer list, and stay under the bound that the slowest variant of every op gives.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/tuning.h"
#include "engine/engine.h"
#include "model/qwen35.h"

namespace kiln {
namespace {

// Launches of one decode token at batch 1, by the variants an op can take:
//   matmul     one cuBLASLt matmul (f32 weights) or one GEMV (bf16/f16); bf16 through cuBLASLt: 2
//              (x rounded to bf16, then the matmul)
//   gdn_step   the fused decode step: 2 (q/k prep, state update; the split kernels) or 1
//   attend     the split-key attention: 1, plus the combine when the keys take more than one split
// per token = embedding gather + final norm + LM head + device argmax (a request without logprobs)
//           + per GDN layer: input norm, 4 matmuls (in_proj_qkv, _z, _a and _b as one: the weight
//             arena holds them back to back; out_proj), the fused step, post norm, MLP (gate, up,
//             silu-mul, down)
//           + per attention layer: input norm, 4 matmuls (q, k, v, o), q norm, k norm, RoPE, K/V
//             write, attention, post norm, MLP
// = 3 + matmul + gdn_layers * (3 + 7 matmul + gdn_step) + attention_layers * (7 + 7 matmul + attend)
int64_t launches_per_token(int64_t gdn_layers, int64_t attention_layers, int64_t matmul, int64_t gdn_step,
                           int64_t attend) {
  return 3 + matmul + gdn_layers * (3 + 7 * matmul + gdn_step) + attention_layers * (7 + 7 * matmul + attend);
}

TEST(CudaEngine, DecodeLaunchesPerTokenEqualTheOpCountUnderTheBound) {
  KILN_CUDA_OR_SKIP(be);
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const ModelConfig& c = (*model)->config();
  const int64_t gdn = c.count(LayerKind::kLinearAttention), attention = c.count(LayerKind::kFullAttention);
  ASSERT_EQ(gdn, 3);
  ASSERT_EQ(attention, 1);

  // The split GDN decode (two kernels a layer) and the attention's lanes over keys, whatever this
  // device times faster: the count below is of those forms, and a forced form times nothing
  // inside the counted steps (a timing's runs are launches too: 12 for the attention's two forms
  // whenever the keys cross a power of two).
  const cuda::Tuning saved = cuda::tuning();
  cuda::tuning().gdn_decode_form = 2;
  cuda::tuning().attention_key_groups = 1;
  struct Restore {
    const cuda::Tuning& t;
    ~Restore() { cuda::tuning() = t; }
  } restore{saved};

  EngineConfig ec;
  ec.kv_blocks = 8;
  ec.prefix_cache.enabled = false;
  ec.device_sampling = true;
  ec.decode_replay = false;  // the eager step's launches (the replayed step: the test below)
  auto engine = Engine::create(**model, ec);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  RequestSpec r;
  for (int32_t i = 0; i < 8; ++i) r.prompt.push_back((i * 31 + 3) % static_cast<int32_t>(c.vocab_size));
  const int64_t steps = 16;  // 8 + 17 positions: every K/V length under one 64-key split
  r.max_tokens = steps + 1;
  r.ignore_eos = true;
  r.sampling.temperature = 0.f;
  r.sampling.logprobs = false;  // greedy without logprobs: the device argmax, only the id crosses
  auto sub = (*engine)->submit(r);
  ASSERT_TRUE(sub.ok()) << sub.status().to_string();
  ASSERT_TRUE((*engine)->step().ok());  // the prompt, and the first token

  // The fixture: f32 weights (one cuBLASLt matmul each), dk = dv = 16 (the split decode kernels),
  // head_dim 32 with 2 query heads per K/V head (the split-key attention, one split).
  const int64_t want = launches_per_token(gdn, attention, /*matmul=*/1, /*gdn_step=*/2, /*attend=*/1);
  const int64_t bound = launches_per_token(gdn, attention, 2, 2, 2);
  EXPECT_EQ(want, 55);   // 4 + 3 x 12 + 15
  EXPECT_EQ(bound, 85);  // 5 + 3 x 19 + 23
  std::vector<int64_t> per_step;
  for (int64_t s = 0; s < steps; ++s) {
    auto before = cuda_backend_stats(*be);
    ASSERT_TRUE(before.ok()) << before.status().to_string();
    auto done = (*engine)->step();
    ASSERT_TRUE(done.ok()) << done.status().to_string();
    auto after = cuda_backend_stats(*be);
    ASSERT_TRUE(after.ok());
    per_step.push_back(static_cast<int64_t>(after->launches - before->launches));
  }
  int64_t tokens = 0;
  while (auto e = sub->channel->try_pop())
    if (e->token >= 0) ++tokens;
  EXPECT_EQ(tokens, steps + 1);
  for (int64_t s = 0; s < steps; ++s) {
    EXPECT_LE(per_step[static_cast<size_t>(s)], bound) << "decode step " << s;
    EXPECT_EQ(per_step[static_cast<size_t>(s)], want) << "decode step " << s;
  }
  RecordProperty("decode_launches_per_token", static_cast<int>(per_step.front()));
  std::printf("decode launches per token: %lld (op count %lld, bound %lld)\n", static_cast<long long>(per_step.front()),
              static_cast<long long>(want), static_cast<long long>(bound));
}

// With decode replay on (the default), a steady decode step is one graph replay plus the device
// argmax: one kernel launch and one replay per token, at batch 1 and at batch 8. A step whose
// shape bucket is new also runs its warm-up eagerly and records; the test counts only steps whose
// bucket was already recorded.
TEST(CudaEngine, SteadyDecodeStepIsOneGraphReplay) {
  KILN_CUDA_OR_SKIP(be);
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
      auto sub = (*engine)->submit(r);
      ASSERT_TRUE(sub.ok()) << sub.status().to_string();
      subs.push_back(*sub);
    }
    ASSERT_TRUE((*engine)->step().ok());  // the prompts, and the first tokens
    ASSERT_TRUE((*engine)->step().ok());  // the first decode step: warm-up, recording, replay
    ASSERT_EQ((*engine)->stats().decode_recordings, 1);
    for (int s = 0; s < 10; ++s) {
      auto before = cuda_backend_stats(*be);
      ASSERT_TRUE(before.ok()) << before.status().to_string();
      ASSERT_TRUE((*engine)->step().ok());
      auto after = cuda_backend_stats(*be);
      ASSERT_TRUE(after.ok());
      EXPECT_EQ(after->graph_replays - before->graph_replays, 1u) << rows << " rows, step " << s;
      EXPECT_EQ(after->launches - before->launches, 1u) << rows << " rows, step " << s << " (the argmax alone)";
    }
    EXPECT_EQ((*engine)->stats().decode_recordings, 1);
    EXPECT_EQ((*engine)->stats().decode_replays, 11);
    for (auto& sub : subs) {
      int64_t tokens = 0;
      while (auto e = sub.channel->try_pop())
        if (e->token >= 0) ++tokens;
      EXPECT_EQ(tokens, 12);  // the first token and eleven decode steps
    }
  }
  RecordProperty("decode_launches_per_token_replayed", 1);
}

}  // namespace
}  // namespace kiln
