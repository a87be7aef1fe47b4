// What the launches asked of the device stays within the target (kernels/launch.h: the census;
// kernels/device_code.h: device_target). A model of the 4B's widths and heads, two of its
// layers (a GDN layer and an attention layer), prefills a long prompt (flash attention, the
// chunked GDN) and decodes one row and sixteen (the GEMV, the skinny GEMM or cuBLASLt, the
// decode attention, the fused GDN step), replayed. Then no kernel has asked for more shared
// memory than the target offers, and none used an sm_90 feature where the target has none: under
// KILN_CUDA_TARGET=sm86 that is 99 KB and no wgmma, cluster or programmatic dependent launch.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "engine/engine.h"
#include "model/init.h"
#include "model/qwen35.h"

namespace kiln {
namespace {

TEST(CudaTarget, FourBShapedPrefillAndDecodeAskNoMoreThanTheTargetHas) {
  KILN_CUDA_OR_SKIP(be);
  ModelConfig c = preset_config("qwen3.5-4b").value();
  c.layer_types = {LayerKind::kLinearAttention, LayerKind::kFullAttention};
  c.num_layers = 2;
  c.vocab_size = 4096;  // the LM head is a matmul like the others; a small one keeps the file small
  const std::string dir = testing::temp_dir("census-4b-shape");
  InitOptions o;
  o.seed = 7;
  o.quiet = true;
  ASSERT_TRUE(write_random_checkpoint(c, dir, o).ok());
  auto model = Qwen35Model::load(dir, *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();

  EngineConfig ec;
  ec.kv_blocks = 96;
  ec.prefix_cache.enabled = false;
  ec.device_sampling = true;
  auto engine = Engine::create(**model, ec);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto submit = [&](int64_t prompt_tokens, int32_t salt) {
    RequestSpec r;
    for (int64_t i = 0; i < prompt_tokens; ++i) r.prompt.push_back(static_cast<int32_t>((i * 31 + salt) % c.vocab_size));
    r.max_tokens = 4;
    r.ignore_eos = true;
    r.sampling.temperature = 0.f;
    r.sampling.logprobs = false;
    ASSERT_TRUE((*engine)->submit(r).ok());
  };
  submit(320, 3);  // one row: prefill of 320 tokens, then batch-1 decode
  while ((*engine)->has_work()) ASSERT_TRUE((*engine)->step().ok());
  for (int32_t i = 0; i < 16; ++i) submit(80, 5 + i);  // sixteen rows decoding together
  while ((*engine)->has_work()) ASSERT_TRUE((*engine)->step().ok());
  std::filesystem::remove_all(dir);

  const cuda::DeviceTarget& t = cuda::device_target();
  const cuda::LaunchCensus& census = cuda::launch_census();
  const int64_t most = census.max_shared_bytes.load();
  std::printf("target %s: at most %lld bytes of shared memory asked for (%lld offered), %llu sm_90-feature launches\n",
              t.label().c_str(), static_cast<long long>(most), static_cast<long long>(t.shared_optin),
              static_cast<unsigned long long>(census.sm90_launches.load()));
  EXPECT_GT(most, 48 * 1024);  // the large kernels ran, and asked
  EXPECT_LE(most, t.shared_optin);
  if (t.emulated == "sm86" || t.emulated == "sm89" || t.emulated == "sm120") EXPECT_LE(most, 99 * 1024);
  if (t.sm90_features) EXPECT_GT(census.sm90_launches.load(), 0u);  // the census counts them where they exist
  else EXPECT_EQ(census.sm90_launches.load(), 0u);
}

}  // namespace
}  // namespace kiln
