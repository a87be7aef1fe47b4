// The kernel choices timed per device (kernel_choice.h): the pick from timings, the file they
// persist in per device, driver and target, and the GEMM keys (no device needed).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cuda/gemm_choice.h"
#include "backend/cuda/kernel_choice.h"
#include "test_util.h"

namespace kiln::cuda {
namespace {

TEST(KernelChoice, TheFastestWinsButThePreferredKeepsTiesWithinTheMargin) {
  EXPECT_EQ(pick_fastest({{"cublaslt", 10.0}, {"gemv", 5.0}, {"skinny", 7.0}}, "cublaslt"), "gemv");
  EXPECT_EQ(pick_fastest({{"cublaslt", 10.0}, {"gemv", 8.0}, {"skinny", 7.0}}, "cublaslt"), "skinny");
  EXPECT_EQ(pick_fastest({{"cublaslt", 10.0}, {"gemv", 9.8}}, "cublaslt"), "cublaslt");  // 2% is a tie
  EXPECT_EQ(pick_fastest({{"cublaslt", 10.0}, {"gemv", 9.6}}, "cublaslt"), "gemv");      // 4% is not
  EXPECT_EQ(pick_fastest({{"cublaslt", 10.0}, {"skinny", 12.0}}, "cublaslt"), "cublaslt");
  // The preferred candidate need not be first, and a wider margin keeps it longer.
  EXPECT_EQ(pick_fastest({{"one_kernel", 9.0}, {"split2", 10.0}}, "split2"), "one_kernel");
  EXPECT_EQ(pick_fastest({{"one_kernel", 9.0}, {"split2", 10.0}}, "split2", 0.2), "split2");
  EXPECT_EQ(pick_fastest({}, "cublaslt"), "");
}

TEST(KernelChoice, ChoicesPersistPerScopeWithTheirTimesAndSurviveAGarbledFile) {
  const std::string file = testing::temp_dir("kernel-choices") + "/choices.json";
  const std::string lm_head = "gemm m=1 n=248320 k=2560 w=bf16 x=f32 gemv";
  const std::string gdn = "gdn_decode rows=8 k_heads=16 v_heads=32 dk=128 dv=128";
  {
    KernelChoices h200(file, "NVIDIA H200, driver 13000, sm_90a");
    EXPECT_FALSE(h200.find(lm_head).has_value());
    h200.put(lm_head, "gemv", {{"cublaslt", 300.0}, {"gemv", 290.0}});
    h200.put(gdn, "split2");
  }
  KernelChoices again(file, "NVIDIA H200, driver 13000, sm_90a");
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.find(lm_head), "gemv");
  EXPECT_EQ(again.find(gdn), "split2");
  // The times are kept beside the choice, for a reader.
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(file));
  EXPECT_EQ(j["schema"], "kiln.cuda-kernel-choices/1");
  EXPECT_EQ(j["scopes"]["NVIDIA H200, driver 13000, sm_90a"][lm_head]["us"]["cublaslt"], 300.0);
  EXPECT_FALSE(j["scopes"]["NVIDIA H200, driver 13000, sm_90a"][gdn].contains("us"));
  // Another device, driver or target starts from nothing, and adds to the same file.
  KernelChoices sm86(file, "NVIDIA H200, driver 13000, sm_86 (emulated on sm_90)");
  EXPECT_EQ(sm86.size(), 0u);
  sm86.put(gdn, "one_kernel", {{"one_kernel", 20.0}, {"split2", 25.0}});
  EXPECT_EQ(KernelChoices(file, "NVIDIA H200, driver 13000, sm_90a").find(gdn), "split2");
  EXPECT_EQ(KernelChoices(file, "NVIDIA H200, driver 13000, sm_86 (emulated on sm_90)").find(gdn), "one_kernel");
  // Forgetting is of this process only: the next use times again, the file keeps the entry.
  sm86.forget(gdn);
  EXPECT_FALSE(sm86.find(gdn).has_value());
  EXPECT_EQ(KernelChoices(file, "NVIDIA H200, driver 13000, sm_86 (emulated on sm_90)").find(gdn), "one_kernel");
  // A file that is not JSON, or of another schema, is a table with nothing in it, and the next
  // choice rewrites it.
  std::ofstream(file) << "{ not json";
  KernelChoices garbled(file, "NVIDIA H200, driver 13000, sm_90a");
  EXPECT_EQ(garbled.size(), 0u);
  garbled.put(lm_head, "cublaslt", {{"cublaslt", 280.0}, {"gemv", 290.0}});
  EXPECT_EQ(KernelChoices(file, "NVIDIA H200, driver 13000, sm_90a").find(lm_head), "cublaslt");
  std::ofstream(file) << R"({"schema": "kiln.cuda-gemm-choices/1", "scopes": {"s": {")" << lm_head
                      << R"(": {"kernel": "gemv"}}}})";
  EXPECT_EQ(KernelChoices(file, "s").size(), 0u);
}

TEST(KernelChoice, GemmKeysNameTheirShapeAndCandidates) {
  EXPECT_EQ((SmallGemmKey{4, 1024, 2560, DType::kF16, DType::kF32, true, false}.text()),
            "gemm m=4 n=1024 k=2560 w=f16 x=f32 gemv");
  EXPECT_EQ((SmallGemmKey{4, 1024, 2560, DType::kBF16, DType::kBF16, true, true}.text()),
            "gemm m=4 n=1024 k=2560 w=bf16 x=bf16 gemv skinny");
  for (SmallGemm k : {SmallGemm::kCublasLt, SmallGemm::kGemv, SmallGemm::kSkinny})
    EXPECT_EQ(small_gemm_named(small_gemm_name(k)), k);
  EXPECT_EQ(small_gemm_named("split2"), SmallGemm::kCublasLt);
}

}  // namespace
}  // namespace kiln::cuda
