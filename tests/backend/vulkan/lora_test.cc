// LinearFacet::lora_delta on Vulkan (the facet's default, through the Vulkan matmul) against the
// double-precision definition and the CPU facet on the same inputs: decode rows each with its own
// adapter, a stack of two adapters over one run, a prefill segment beside them, f32 and bf16
// factors, strided x and out. Tolerance 2e-5 of the deltas' size: every product is f32 with the
// factors widened exactly, only the order of the sums differs; 2e-3 for a case with a segment of
// more than 8 rows where the device multiplies 16-bit factors on cooperative matrices (x rounded
// to f16).
#include <gtest/gtest.h>

#include "backend/lora_delta_cases.h"
#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

using testing::LoraDeltaCase;
using testing::same_view;
using testing::to_device;
using testing::to_host;

constexpr DType F = DType::kF32, H = DType::kBF16;

TEST(VulkanLoraDelta, MatchesCpuFacet) {
  KILN_VULKAN_OR_SKIP(be);
  auto cpu = std::move(create_backend("cpu").value());
  const std::vector<LoraDeltaCase> cases = {
      {"decode rows, an adapter each", 5, 96, 80, {{0, 1, 8, F, F, 2.f}, {1, 2, 16, H, H, 0.5f}, {3, 4, 4, F, H, 1.f}}},
      {"a stack over one run", 6, 64, 72, {{0, 6, 8, F, F, 1.f}, {2, 6, 12, H, H, -0.75f}}, 3, 5},
      {"prefill beside decode", 40, 128, 48, {{0, 37, 16, H, H, 1.f}, {37, 38, 8, F, F, 2.f}, {39, 40, 8, H, F, 1.f}}},
  };
  uint32_t seed = 100;
  for (const LoraDeltaCase& c : cases) {
    SCOPED_TRACE(c.name);
    testing::LoraDeltaInputs in = testing::make_lora_inputs(c, seed);
    seed += 20;
    const std::vector<double> want = testing::lora_reference(in, c);
    const Tensor before = testing::host_copy(in.out_base);
    // The CPU facet on host copies.
    testing::LoraDeltaInputs cin = testing::make_lora_inputs(c, seed - 20);
    ASSERT_TRUE(cpu->linear().lora_delta({cin.x, cin.out, cin.segments, &cpu->storage()}).ok());
    // The same on the device: x and out as the same strided views of device copies.
    Tensor dx_base = to_device(*be, in.x_base), dout_base = to_device(*be, in.out_base);
    std::vector<LoraSegment> segs;
    for (const LoraSegment& s : in.segments) segs.push_back({s.begin, s.end, to_device(*be, s.a), to_device(*be, s.b), s.coef});
    Status st = be->linear().lora_delta({same_view(dx_base, in.x, in.x_base), same_view(dout_base, in.out, in.out_base),
                                         segs, &be->storage()});
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Tensor got = to_host(*be, dout_base);
    bool coop = false;
    for (const auto& sg : c.segments) coop |= sg.end - sg.begin > 8 && testing::cooperative_matmul(*be);
    EXPECT_LT(testing::lora_error(got, want, before), coop ? testing::kCoopTolerance : 2e-5);
    EXPECT_LT(testing::lora_error(cin.out_base, want, before), 2e-5);
  }
}

}  // namespace
}  // namespace kiln
