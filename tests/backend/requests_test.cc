// The text of every request, as error messages, declines and the capability report show it.
#include <gtest/gtest.h>

#include "backend/training_facets.h"

namespace kiln {
namespace {

TEST(RequestText, ForwardRequestsShowTheirFieldsInTableOrder) {
  EXPECT_EQ((MatmulRequest{1, 8192, 2560, DType::kF32, DType::kBF16}.describe()),
            "matmul m=1 n=8192 k=2560 x=f32 w=bf16 out=f32");
  EXPECT_EQ((MatmulRequest{4, 16, 8, DType::kF32, DType::kF32, DType::kF32, true}.describe()),
            "matmul m=4 n=16 k=8 x=f32 w=f32 out=f32 accumulate");
  EXPECT_EQ((NormRequest{NormKind::kOnePlus, 256, 2560, DType::kF32}.describe()),
            "rms_norm(1+w) rows=256 width=2560 f32");
  EXPECT_EQ((NormRequest{NormKind::kPlain, 2, 8, DType::kF32, true, DType::kBF16}.describe()),
            "rms_norm(w) rows=2 width=8 f32 +residual out=bf16");
  EXPECT_EQ((RopeRequest{1, 20, 256, 64}.describe()), "rope tokens=1 heads=20 head_dim=256 rotary_dim=64");
  EXPECT_EQ((KvWriteRequest{3, 4, 256, 64, DType::kBF16}.describe()),
            "kv_write tokens=3 kv_heads=4 head_dim=256 block=64 kv=bf16");
  AttentionRequest a{Phase::kDecode, 1, 1, 16, 4, 256, 4096, 64, true};
  EXPECT_EQ(a.describe(),
            "attention decode rows=1 tokens=1 q_heads=16 kv_heads=4 head_dim=256 max_kv=4096 block=64 gated f32 kv=f32");
  a.output_gate = false, a.compute = DType::kBF16;
  EXPECT_EQ(a.describe(), "attention decode rows=1 tokens=1 q_heads=16 kv_heads=4 head_dim=256 max_kv=4096 block=64 f32 "
                          "kv=f32 compute=bf16");
  EXPECT_EQ((ConvRequest{Phase::kPrefill, 1, 256, 8192, 4}.describe()),
            "causal_conv1d prefill rows=1 tokens=256 channels=8192 kernel=4");
  GdnRequest g{Phase::kPrefill, GdnForm::kChunked, 1, 256, 16, 32, 128, 128};
  EXPECT_EQ(g.describe(), "gdn prefill chunked(64) rows=1 tokens=256 k_heads=16 v_heads=32 dk=128 dv=128 state=f32");
  g.form = GdnForm::kRecurrent, g.compute = DType::kBF16;
  EXPECT_EQ(g.describe(),
            "gdn prefill recurrent rows=1 tokens=256 k_heads=16 v_heads=32 dk=128 dv=128 state=f32 compute=bf16");
  EXPECT_EQ((GdnDecodeRequest{2, 2, 16, 32, 128, 128, 4}.describe()),
            "gdn fused_decode rows=2 tokens=2 k_heads=16 v_heads=32 dk=128 dv=128 conv_kernel=4 state=f32");
  EXPECT_EQ((ElementwiseRequest{ElementwiseOp::kEmbed, 1, 2560, DType::kBF16}.describe()),
            "embed rows=1 width=2560 bf16");
  EXPECT_EQ((ElementwiseRequest{ElementwiseOp::kSiluMul, 4, 8, DType::kF32, DType::kF16}.describe()),
            "silu_mul rows=4 width=8 f32 out=f16");
  EXPECT_EQ((SampleRequest{1, 248320, true}.describe()), "argmax rows=1 vocab=248320");
  EXPECT_EQ((SampleRequest{64, 248320, false}.describe()), "sample rows=64 vocab=248320");
}

TEST(RequestText, TrainingRequestsLeaveOutTheSizesTheirOpLacks) {
  const TrainRequest gemm{.op = TrainOp::kGemm, .tokens = 4, .width = 16, .inner = 2560, .dtype = DType::kBF16};
  EXPECT_EQ(gemm.describe(), "gemm tokens=4 width=16 inner=2560 bf16");
  EXPECT_EQ(TrainRequest{TrainOp::kConvBackward}.describe(), "conv_backward f32");
  EXPECT_EQ((OptimizerRequest{OptimizerKind::kMuon, 300, 512}.describe()), "optimizer muon [300, 512]");
  EXPECT_EQ((OptimizerRequest{OptimizerKind::kAdamW, 1, 64}.describe()), "optimizer adam_w [1, 64]");
}

}  // namespace
}  // namespace kiln
