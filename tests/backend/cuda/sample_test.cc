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
#include "cuda_test_util.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::to_device;

std::unique_ptr<Backend> cpu() { return create_backend("cpu").value(); }

double next_u(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<std::vector<int32_t>> top_ids;  // per row, its top_logprobs alternatives
  std::vector<std::vector<float>> top_logprobs;
};

Outcome run(Backend& be, const Tensor& logits, const std::vector<SampleRow>& rows) {
  const auto n = static_cast<int64_t>(rows.size());
  int64_t top = 0;
  for (const SampleRow& r : rows) top = std::max<int64_t>(top, r.top_logprobs);
  SampleArgs args{logits, rows, Tensor::empty({n}, DType::kI32), Tensor::empty({n}, DType::kF32)};
  if (top > 0) {
    args.top_ids = Tensor::empty({n, top}, DType::kI32);
    args.top_logprobs = Tensor::empty({n, top}, DType::kF32);
  }
  Status s = be.sampling().sample(args);
  EXPECT_TRUE(s.ok()) << s.to_string();
  Outcome o;
  o.ids.assign(args.ids.data<int32_t>(), args.ids.data<int32_t>() + n);
  o.logprobs.assign(args.logprobs.data<float>(), args.logprobs.data<float>() + n);
  for (int64_t r = 0; r < n; ++r) {
    const int32_t* t = top > 0 ? args.top_ids.data<int32_t>() + r * top : nullptr;
    const float* l = top > 0 ? args.top_logprobs.data<float>() + r * top : nullptr;
    const int32_t k = rows[static_cast<size_t>(r)].top_logprobs;
    o.top_ids.emplace_back(t, t + k);
    o.top_logprobs.emplace_back(l, l + k);
  }
  return o;
}

// Logprobs within 1e-5 (double math on both sides, rounded to f32), -inf equal to -inf.
void expect_logprob(float got, float want, const std::string& what) {
  if (std::isinf(want) && std::isinf(got) && (want < 0) == (got < 0)) return;
  EXPECT_NEAR(got, want, 1e-5) << what;
}

// Equal tokens in at least 99.9% of the rows, and equal logprobs (1e-5) and alternatives where
// the tokens are.
void expect_match(const Outcome& got, const Outcome& want, const std::string& what) {
  size_t equal = 0;
  for (size_t i = 0; i < want.ids.size(); ++i) {
    if (got.ids[i] != want.ids[i]) {
      ADD_FAILURE() << what << " row " << i << ": token " << got.ids[i] << ", cpu " << want.ids[i]
                    << " (a boundary case only if this is rare)";
      continue;
    }
    ++equal;
    const std::string at = what + " row " + std::to_string(i);
    expect_logprob(got.logprobs[i], want.logprobs[i], at);
    EXPECT_EQ(got.top_ids[i], want.top_ids[i]) << at;
    for (size_t k = 0; k < want.top_ids[i].size() && k < got.top_ids[i].size(); ++k)
      expect_logprob(got.top_logprobs[i][k], want.top_logprobs[i][k], at + " alternative " + std::to_string(k));
  }
  std::printf("%s: %zu / %zu tokens equal\n", what.c_str(), equal, want.ids.size());
  EXPECT_GE(static_cast<double>(equal), 0.999 * static_cast<double>(want.ids.size())) << what;
}

// Every combination of the parameters the brief lists, cycled over the rows.
std::vector<SampleRow> mixed_rows(int64_t n, int64_t V, std::vector<std::vector<int32_t>>& seen,
                                  std::mt19937_64& g) {
  const int32_t top_ks[] = {0, 1, 20, 50};
  const float top_ps[] = {1.f, 0.9f, 0.5f}, min_ps[] = {0.f, 0.05f}, temps[] = {0.5f, 1.f, 1.5f, 0.f};
  std::vector<SampleRow> rows(static_cast<size_t>(n));
  seen.assign(static_cast<size_t>(n), {});
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(std::min<int64_t>(V, 200)) - 1);
  for (int64_t r = 0; r < n; ++r) {
    SampleRow& x = rows[static_cast<size_t>(r)];
    int64_t c = r;
    x.top_k = top_ks[c % 4]; c /= 4;
    x.top_p = top_ps[c % 3]; c /= 3;
    x.min_p = min_ps[c % 2]; c /= 2;
    x.temperature = temps[c % 4]; c /= 4;
    x.top_logprobs = r % 5 == 0 ? 5 : (r % 7 == 0 ? 20 : 0);
    if ((r + c) % 2 == 1) {  // penalties on: tokens drawn from a small range so that some repeat
      x.repetition_penalty = 1.3f;
      x.presence_penalty = 0.5f;
      x.frequency_penalty = 0.25f;
    }
    std::vector<int32_t>& s = seen[static_cast<size_t>(r)];
    for (int i = 0; i < 60; ++i) s.push_back(tok(g));
    s.push_back(-1);                           // out of range ids are ignored
    s.push_back(static_cast<int32_t>(V) + 5);
    x.seen = s;
    x.generated = std::span<const int32_t>(s).subspan(30);
    x.u = next_u(g);
  }
  return rows;
}

TEST(CudaSample, MatchesCpuOnMixedRows) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(1234);
  for (int64_t V : {int64_t{248320}, int64_t{1000}, int64_t{37}}) {
    const int64_t n = V > 100000 ? 216 : 432;  // every combination (96) at least twice
    Tensor logits = random_tensor({n, V}, 77 + static_cast<uint32_t>(V), 2.f);
    // A few confident rows: a peak, so that top-p and min-p keep a handful of tokens.
    for (int64_t r = 0; r < n; r += 3) logits.data<float>()[r * V + (r * 7919) % V] += 12.f;
    std::vector<std::vector<int32_t>> seen;
    const std::vector<SampleRow> rows = mixed_rows(n, V, seen, g);
    const Outcome want = run(*ref, logits, rows);
    Tensor dl = to_device(*be, logits);
    const Outcome got = run(*be, dl, rows);
    expect_match(got, want, "V=" + std::to_string(V));
    // The same call again gives the same tokens (no order-dependent sums).
    const Outcome again = run(*be, dl, rows);
    EXPECT_EQ(again.ids, got.ids) << "V=" << V;
  }
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
    const std::vector<SampleRow> rows = mixed_rows(n, V, seen, g);
    const Outcome want = run(*ref, wide.slice(1, 0, V), rows);
    const Outcome got = run(*be, to_device(*be, wide).slice(1, 0, V), rows);
    expect_match(got, want, "strided V=5000");
  }
  {
    const int64_t V = 248320, n = 100;  // 256 MB of scratch holds 90 rows: two launches
    Tensor logits = random_tensor({n, V}, 6, 2.f);
    std::vector<std::vector<int32_t>> seen;
    const std::vector<SampleRow> rows = mixed_rows(n, V, seen, g);
    expect_match(run(*be, to_device(*be, logits), rows), run(*ref, logits, rows), "100 rows V=248320");
  }
}

// Ties (repeated values, all equal, -inf) are kept and ranked as the CPU does, in the draw, the
// greedy rows and the alternatives; a row with one finite logit returns that token with logprob 0.
TEST(CudaSample, TiesAndInfinities) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  std::mt19937_64 g(7);
  const int64_t V = 3000;
  struct Case {
    const char* name;
    int kind;  // 0 all equal, 1 four distinct values, 2 half -inf, 3 one finite
    int32_t top_k;
    float top_p, min_p;
  };
  const Case cases[] = {
      {"all equal, top-k 20", 0, 20, 1.f, 0.f},    {"all equal, top-p 0.5", 0, 0, 0.5f, 0.f},
      {"all equal, top-p 0.1", 0, 50, 0.1f, 0.f},  {"four values, top-k 50", 1, 50, 1.f, 0.f},
      {"four values, top-p 0.3", 1, 0, 0.3f, 0.f}, {"four values, top-p 0.9", 1, 0, 0.9f, 0.05f},
      {"four values, top-k 1", 1, 1, 1.f, 0.f},    {"half -inf, top-k 2000", 2, 2000, 1.f, 0.f},
      {"half -inf, top-p 0.7", 2, 0, 0.7f, 0.f},   {"one finite", 3, 0, 1.f, 0.f},
      {"one finite, top-k 5", 3, 5, 0.5f, 0.1f},
  };
  const int64_t per_case = 8;
  const int64_t n = per_case * static_cast<int64_t>(std::size(cases));
  Tensor logits = Tensor::empty({n, V}, DType::kF32);
  std::vector<SampleRow> rows(static_cast<size_t>(n));
  std::uniform_int_distribution<int> four(0, 3);
  for (int64_t r = 0; r < n; ++r) {
    const Case& c = cases[r / per_case];
    float* l = logits.data<float>() + r * V;
    for (int64_t j = 0; j < V; ++j) {
      switch (c.kind) {
        case 0: l[j] = 1.5f; break;
        case 1: l[j] = static_cast<float>(four(g)); break;
        case 2: l[j] = j % 2 == 0 ? -INFINITY : static_cast<float>(four(g)); break;
        default: l[j] = -INFINITY;
      }
    }
    if (c.kind == 3) l[(r * 131) % V] = -3.f;
    SampleRow& x = rows[static_cast<size_t>(r)];
    x.top_k = c.top_k;
    x.top_p = c.top_p;
    x.min_p = c.min_p;
    x.temperature = r % 4 == 3 ? 0.f : (r % 2 == 0 ? 1.f : 0.7f);
    x.top_logprobs = r % 3 == 0 ? 4 : 0;
    x.u = next_u(g);
  }
  const Outcome want = run(*ref, logits, rows);
  const Outcome got = run(*be, to_device(*be, logits), rows);
  for (int64_t r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    const std::string at = std::string(cases[r / per_case].name) + " row " + std::to_string(r);
    EXPECT_EQ(got.ids[i], want.ids[i]) << at;
    expect_logprob(got.logprobs[i], want.logprobs[i], at);
    EXPECT_EQ(got.top_ids[i], want.top_ids[i]) << at;
    for (size_t k = 0; k < want.top_ids[i].size() && k < got.top_ids[i].size(); ++k)
      expect_logprob(got.top_logprobs[i][k], want.top_logprobs[i][k], at + " alternative " + std::to_string(k));
    if (cases[r / per_case].kind == 3) {
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
  Tensor logits = random_tensor({2, 100}, 3);
  std::vector<SampleRow> rows(2);
  Tensor ids = Tensor::empty({2}, DType::kI32), lp = Tensor::empty({2}, DType::kF32);
  Status s = be->sampling().sample({logits, rows, ids, lp});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'logits'"), std::string::npos) << s.to_string();
  Tensor dl = to_device(*be, logits);
  s = be->sampling().sample({dl, std::span<const SampleRow>(rows).first(1), ids, lp});
  EXPECT_NE(s.message().find("1 sample rows for 2 logits rows"), std::string::npos) << s.to_string();
  rows[1].temperature = -0.5f;
  s = be->sampling().sample({dl, rows, ids, lp});
  EXPECT_NE(s.message().find("row 1: temperature"), std::string::npos) << s.to_string();
  rows[1].temperature = 1.f;
  Tensor dev_ids = be->storage().allocate({2}, DType::kI32).value();
  s = be->sampling().sample({dl, rows, dev_ids, lp});
  EXPECT_NE(s.message().find("'ids'"), std::string::npos) << s.to_string();
  EXPECT_TRUE(be->sampling().sample({dl, rows, ids, lp}).ok());
  // A vocabulary whose penalty bitmap outgrows shared memory is declined, saying so.
  const Support big = be->sampling().supports(SampleRequest{1, int64_t{100} << 20, false});
  EXPECT_FALSE(big.runs_natively());
  EXPECT_NE(big.constraint.find("vocab"), std::string::npos) << big.constraint;
  EXPECT_TRUE(be->sampling().supports(SampleRequest{64, 248320, false}).runs_natively());
}

}  // namespace
}  // namespace kiln
