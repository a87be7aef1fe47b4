// The decode-sized GEMM choices (gemm_choice.h): the pick from timings, and the per-device file
// they persist in (no device needed).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/cuda/gemm_choice.h"
#include "test_util.h"

namespace kiln::cuda {
namespace {

TEST(GemmChoice, TheFastestWinsButOurKernelsMustBeatTheLibraryByThreePercent) {
  EXPECT_EQ(pick_small_gemm({10.0, 5.0, 7.0}), SmallGemm::kGemv);
  EXPECT_EQ(pick_small_gemm({10.0, 8.0, 7.0}), SmallGemm::kSkinny);
  EXPECT_EQ(pick_small_gemm({10.0, 9.8, std::nullopt}), SmallGemm::kCublasLt);  // 2% is a tie
  EXPECT_EQ(pick_small_gemm({10.0, 9.6, std::nullopt}), SmallGemm::kGemv);      // 4% is not
  EXPECT_EQ(pick_small_gemm({10.0, std::nullopt, 12.0}), SmallGemm::kCublasLt);
  EXPECT_EQ(pick_small_gemm({std::nullopt, std::nullopt, std::nullopt}), SmallGemm::kCublasLt);
}

TEST(GemmChoice, ChoicesPersistPerScopeAndSurviveAGarbledFile) {
  const std::string file = testing::temp_dir("gemm-choices") + "/choices.json";
  const SmallGemmKey lm_head{1, 248320, 2560, DType::kBF16, DType::kF32, true, false};
  const SmallGemmKey qkv{16, 8192, 2560, DType::kBF16, DType::kF32, false, true};
  {
    SmallGemmChoices h200(file, "NVIDIA H200, driver 13000, sm_90a");
    EXPECT_FALSE(h200.find(lm_head).has_value());
    h200.put(lm_head, SmallGemm::kGemv, {300.0, 290.0, std::nullopt});
    h200.put(qkv, SmallGemm::kSkinny, {20.0, std::nullopt, 15.0});
  }
  SmallGemmChoices again(file, "NVIDIA H200, driver 13000, sm_90a");
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.find(lm_head), SmallGemm::kGemv);
  EXPECT_EQ(again.find(qkv), SmallGemm::kSkinny);
  // Another device, driver or target starts from nothing, and adds to the same file.
  SmallGemmChoices sm86(file, "NVIDIA H200, driver 13000, sm_86 (emulated on sm_90)");
  EXPECT_EQ(sm86.size(), 0u);
  sm86.put(qkv, SmallGemm::kCublasLt, {20.0, std::nullopt, 25.0});
  EXPECT_EQ(SmallGemmChoices(file, "NVIDIA H200, driver 13000, sm_90a").find(qkv), SmallGemm::kSkinny);
  EXPECT_EQ(SmallGemmChoices(file, "NVIDIA H200, driver 13000, sm_86 (emulated on sm_90)").find(qkv),
            SmallGemm::kCublasLt);
  // A file that is not JSON is a table with nothing in it, and the next choice rewrites it.
  std::ofstream(file) << "{ not json";
  SmallGemmChoices garbled(file, "NVIDIA H200, driver 13000, sm_90a");
  EXPECT_EQ(garbled.size(), 0u);
  garbled.put(lm_head, SmallGemm::kCublasLt, {280.0, 290.0, std::nullopt});
  EXPECT_EQ(SmallGemmChoices(file, "NVIDIA H200, driver 13000, sm_90a").find(lm_head), SmallGemm::kCublasLt);
}

TEST(GemmChoice, KeysNameTheirShapeAndCandidatesAndEachSetKeepsItsOwnChoice) {
  EXPECT_EQ((SmallGemmKey{4, 1024, 2560, DType::kF16, DType::kF32, true, false}.text()),
            "m=4 n=1024 k=2560 w=f16 x=f32 gemv");
  EXPECT_EQ((SmallGemmKey{4, 1024, 2560, DType::kBF16, DType::kBF16, true, true}.text()),
            "m=4 n=1024 k=2560 w=bf16 x=bf16 gemv skinny");
  const std::string file = testing::temp_dir("gemm-choice-sets") + "/choices.json";
  const SmallGemmKey both{4, 1024, 2560, DType::kBF16, DType::kF32, true, true};
  SmallGemmKey skinny_only = both;
  skinny_only.gemv = false;  // KILN_CUDA_GEMV=0: timed without the GEMV
  {
    SmallGemmChoices c(file, "scope");
    c.put(both, SmallGemm::kGemv, {10.0, 4.0, 6.0});
    c.put(skinny_only, SmallGemm::kSkinny, {10.0, std::nullopt, 6.0});
  }
  SmallGemmChoices read(file, "scope");
  EXPECT_EQ(read.find(both), SmallGemm::kGemv);
  EXPECT_EQ(read.find(skinny_only), SmallGemm::kSkinny);
}

}  // namespace
}  // namespace kiln::cuda
