// The CUDA `sample` (kernels/sample.cu), greedy rows and alternatives included, against the CPU
// reference facet (itself the engine Sampler's transforms, tests/backend/cpu/sample_test.cc) on
// the same logits, parameters and u.
// Tolerance: the tokens are equal except where u (or a top-p target) lies within ~1e-12 of an
// interval boundary, since the device sums in another order than the host's sequential doubles;
// random u makes that a ~1e-9 event per row, so we require at least 99.9% equal (and print the
// count). Where the tokens are equal the logprobs agree to 1e-5 absolute (double math on both
// sides, rounded to f32 at the end).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/facets.h"
#include "backend/sample_parity.h"
#include "cuda_test_util.h"

namespace kiln {
namespace {

using testing::mixed_sample_rows;
using testing::random_tensor;
using testing::run_sample;
using testing::SampleOutcome;
using testing::to_device;

std::unique_ptr<Backend> cpu() { return create_backend("cpu").value(); }

// Equal tokens in at least 99.9% of the rows, and equal logprobs (1e-5) and alternatives where
// the tokens are.
void expect_match(const SampleOutcome& got, const SampleOutcome& want, const std::string& what) {
  size_t equal = 0;
  for (size_t i = 0; i < want.ids.size(); ++i) {
    if (got.ids[i] != want.ids[i]) {
      ADD_FAILURE() << what << " row " << i << ": token " << got.ids[i] << ", cpu " << want.ids[i]
                    << " (a boundary case only if this is rare)";
      continue;
    }
    ++equal;
    testing::expect_same_row(got, want, i, what + " row " + std::to_string(i));
  }
  std::printf("%s: %zu / %zu tokens equal\n", what.c_str(), equal, want.ids.size());
  EXPECT_GE(static_cast<double>(equal), 0.999 * static_cast<double>(want.ids.size())) << what;
}

TEST(CudaSample, MatchesCpuOnMixedRows) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(1234);
  for (int64_t V : {int64_t{248320}, int64_t{1000}, int64_t{37}}) {
    const int64_t n = V > 100000 ? 216 : 432;  // every combination (96) at least twice
    const testing::MixedSampleCase c = testing::mixed_sample_case(n, V, g);
    const SampleOutcome want = run_sample(*ref, c.logits, c.rows);
    Tensor dl = to_device(*be, c.logits);
    const SampleOutcome got = run_sample(*be, dl, c.rows);
    expect_match(got, want, "V=" + std::to_string(V));
    // The same call again gives the same tokens (no order-dependent sums).
    const SampleOutcome again = run_sample(*be, dl, c.rows);
    EXPECT_EQ(again.ids, got.ids) << "V=" << V;
  }
}

// Structured-output rows (token masks, logit biases, both) among free ones, at the model's
// vocabulary and a small one: the masks and biases go up with the parameters and give the CPU
// reference's tokens; a masked row's token is always allowed.
TEST(CudaSample, MaskedAndBiasedRowsMatchCpu) {
  KILN_CUDA_OR_SKIP(be);
  testing::expect_constrained_rows_match_cpu(*be, 96, [](const testing::MixedSampleCase&, const SampleOutcome& got,
                                                          const SampleOutcome& want, const std::string& what) {
    expect_match(got, want, what);
  });
}

// Logits rows with a stride (a view of a wider tensor) and more rows than one launch's scratch
// holds at the full vocabulary are sampled like contiguous ones.
TEST(CudaSample, StridedRowsAndManyRows) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(99);
  {
    const int64_t V = 5000, n = 40;
    Tensor wide = random_tensor({n, V + 16}, 5, 3.f);
    std::vector<std::vector<int32_t>> seen;
    const std::vector<SampleRow> rows = mixed_sample_rows(n, V, seen, g);
    const SampleOutcome want = run_sample(*ref, wide.slice(1, 0, V), rows);
    const SampleOutcome got = run_sample(*be, to_device(*be, wide).slice(1, 0, V), rows);
    expect_match(got, want, "strided V=5000");
  }
  {
    const int64_t V = 248320, n = 100;  // 256 MB of scratch holds 90 rows: two launches
    Tensor logits = random_tensor({n, V}, 6, 2.f);
    std::vector<std::vector<int32_t>> seen;
    const std::vector<SampleRow> rows = mixed_sample_rows(n, V, seen, g);
    expect_match(run_sample(*be, to_device(*be, logits), rows), run_sample(*ref, logits, rows), "100 rows V=248320");
  }
}

// Ties (repeated values, all equal, -inf) are kept and ranked as the CPU does, in the draw, the
// greedy rows and the alternatives; a row with one finite logit returns that token with logprob 0.
TEST(CudaSample, TiesAndInfinities) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(7);
  const int64_t V = 3000, per_case = 8;
  const auto& cases = testing::sample_tie_cases();
  const int64_t n = per_case * static_cast<int64_t>(cases.size());
  Tensor logits = Tensor::empty({n, V}, DType::kF32);
  const std::vector<SampleRow> rows = testing::sample_tie_rows(logits, per_case, g);
  const SampleOutcome want = run_sample(*ref, logits, rows);
  const SampleOutcome got = run_sample(*be, to_device(*be, logits), rows);
  for (int64_t r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    const std::string at = std::string(cases[static_cast<size_t>(r / per_case)].name) + " row " + std::to_string(r);
    EXPECT_EQ(got.ids[i], want.ids[i]) << at;
    testing::expect_same_row(got, want, i, at);
    if (cases[static_cast<size_t>(r / per_case)].kind == 3) {
      EXPECT_EQ(got.ids[i], (r * 131) % V) << "the only finite logit";
      EXPECT_EQ(got.logprobs[i], 0.f);
    }
  }
}

// Logits on the host (the CUDA `sample` wants them on the device), a row count that does not
// match, a negative temperature and host-side outputs on the device are refused, each naming what is
// wrong; an oversized vocabulary is declined with its reason.
TEST(CudaSample, BadInputNamesTheProblem) {
  KILN_CUDA_OR_SKIP(be);
  testing::expect_sample_refusals_name_the_problem(*be);
  // A vocabulary whose penalty bitmap outgrows shared memory is declined, saying so.
  const Support big = be->sampling().supports(SampleRequest{1, int64_t{100} << 20, false});
  EXPECT_FALSE(big.runs_natively());
  EXPECT_NE(big.constraint.find("vocab"), std::string::npos) << big.constraint;
  EXPECT_TRUE(be->sampling().supports(SampleRequest{64, 248320, false}).runs_natively());
}

}  // namespace
}  // namespace kiln
