// The Vulkan `sample` (shaders/sample.comp), greedy rows and alternatives included, against the
// CPU reference facet on the same logits, parameters and u.
// Tolerance: the shader works in f32 where the reference works in f64, so a drawn token may be
// a neighbour of the reference's only where u lies within 1e-5 of an edge of a token's interval
// in the reference's distribution (each such row is printed); every other row's token is equal.
// Where the tokens are equal, the logprobs agree to 2e-5 absolute (an f32 logit difference of up
// to ~50 and the log of an f32 sum) and the alternatives are the same ids.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/facets.h"
#include "backend/sample_parity.h"
#include "vulkan_test_util.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::run_sample;
using testing::SampleOutcome;
using testing::to_device;

constexpr double kEdge = 1e-5, kLogprobTol = 2e-5;

std::unique_ptr<Backend> cpu() { return create_backend("cpu").value(); }

// Every row's token equal to the reference's, or u within kEdge of an interval's edge.
void expect_match(const SampleOutcome& got, const SampleOutcome& want, const Tensor& host_logits,
                  const std::vector<SampleRow>& rows, const std::string& what) {
  size_t equal = 0;
  for (size_t i = 0; i < want.ids.size(); ++i) {
    const std::string at = what + " row " + std::to_string(i);
    if (got.ids[i] == want.ids[i]) {
      ++equal;
      testing::expect_same_row(got, want, i, at, kLogprobTol);
      continue;
    }
    const double edge = testing::distance_to_edge(host_logits, static_cast<int64_t>(i), rows[i]);
    EXPECT_LT(edge, kEdge) << at << ": token " << got.ids[i] << ", cpu " << want.ids[i];
    std::printf("%s: token %d, cpu %d, u %.3g from an edge\n", at.c_str(), got.ids[i], want.ids[i], edge);
  }
  std::printf("%s: %zu / %zu tokens equal\n", what.c_str(), equal, want.ids.size());
}

TEST(VulkanSample, MatchesCpuOnMixedRows) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(1234);
  for (int64_t V : {int64_t{248320}, int64_t{1000}, int64_t{37}}) {
    const int64_t n = V > 100000 ? 24 : 192;  // every combination (96) twice where the rows are short
    const testing::MixedSampleCase c = testing::mixed_sample_case(n, V, g);
    const SampleOutcome want = run_sample(*ref, c.logits, c.rows);
    Tensor dl = to_device(*be, c.logits);
    const SampleOutcome got = run_sample(*be, dl, c.rows);
    expect_match(got, want, c.logits, c.rows, "V=" + std::to_string(V));
    // The same call again gives the same tokens (no order-dependent sums).
    const SampleOutcome again = run_sample(*be, dl, c.rows);
    EXPECT_EQ(again.ids, got.ids) << "V=" << V;
    EXPECT_EQ(again.logprobs, got.logprobs) << "V=" << V;
  }
}

// Structured-output rows (token masks, logit biases, both) among free ones, at the model's
// vocabulary and a small one: the masks and biases go up with the parameters and give the CPU
// reference's tokens; a masked row's token is always allowed.
TEST(VulkanSample, MaskedAndBiasedRowsMatchCpu) {
  KILN_VULKAN_OR_SKIP(be);
  testing::expect_constrained_rows_match_cpu(*be, 24, [](const testing::MixedSampleCase& c, const SampleOutcome& got,
                                                          const SampleOutcome& want, const std::string& what) {
    expect_match(got, want, c.logits, c.rows, what);
  });
}

// Structured-output rows in the argmax (sample_parity.h): the CPU reference's ids, every masked
// id allowed, on device and host logits.
TEST(VulkanSample, MaskedArgmaxMatchesCpu) {
  KILN_VULKAN_OR_SKIP(be);
  testing::expect_masked_argmax_matches_cpu(*be);
}

// Logits rows with a stride (a view of a wider tensor) are sampled like contiguous ones.
TEST(VulkanSample, StridedRowsEqualContiguousOnes) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(99);
  const int64_t V = 5000, n = 40;
  Tensor wide = random_tensor({n, V + 16}, 5, 3.f);
  std::vector<std::vector<int32_t>> seen;
  const std::vector<SampleRow> rows = testing::mixed_sample_rows(n, V, seen, g);
  Tensor contiguous = Tensor::empty({n, V}, DType::kF32);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < V; ++j) contiguous.data<float>()[r * V + j] = wide.data<float>()[r * (V + 16) + j];
  const SampleOutcome want = run_sample(*ref, contiguous, rows);
  const SampleOutcome got = run_sample(*be, to_device(*be, wide).slice(1, 0, V), rows);
  expect_match(got, want, contiguous, rows, "strided V=5000");
}

// Ties (all equal, four values, -inf) are kept and ranked as the CPU does, in the draw, the
// greedy rows and the alternatives; a row with one finite logit returns that token with logprob 0.
TEST(VulkanSample, TiesAndInfinitiesAsTheCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(7);
  const int64_t V = 3000, per_case = 8;
  const auto& cases = testing::sample_tie_cases();
  const int64_t n = per_case * static_cast<int64_t>(cases.size());
  Tensor logits = Tensor::empty({n, V}, DType::kF32);
  const std::vector<SampleRow> rows = testing::sample_tie_rows(logits, per_case, g);
  const SampleOutcome want = run_sample(*ref, logits, rows);
  const SampleOutcome got = run_sample(*be, to_device(*be, logits), rows);
  expect_match(got, want, logits, rows, "ties");
  for (int64_t r = 0; r < n; ++r) {
    if (cases[static_cast<size_t>(r / per_case)].kind != 3) continue;
    const auto i = static_cast<size_t>(r);
    EXPECT_EQ(got.ids[i], (r * 131) % V) << "the only finite logit, row " << r;
    EXPECT_EQ(got.logprobs[i], 0.f) << "row " << r;
  }
}

// Logits on the host, a row count that does not match, a negative temperature and host outputs
// on the device are refused, each naming what is wrong; every vocabulary size runs natively.
TEST(VulkanSample, BadInputNamesTheProblem) {
  KILN_VULKAN_OR_SKIP(be);
  testing::expect_sample_refusals_name_the_problem(*be);
  EXPECT_TRUE(be->sampling().supports(SampleRequest{64, 248320, false}).runs_natively());
}

}  // namespace
}  // namespace kiln
