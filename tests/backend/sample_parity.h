// What the device `sample` tests share: rows covering every sampling parameter and the tie cases,
// one call's outcome, and its comparison with the CPU reference facet on the same logits,
// parameters and u.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "backend/device_test_util.h"
#include "backend/sampling_math.h"

namespace kiln::testing {

inline double next_u(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

struct SampleOutcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<std::vector<int32_t>> top_ids;  // per row, its top_logprobs alternatives
  std::vector<std::vector<float>> top_logprobs;
};

inline SampleOutcome run_sample(Backend& be, const Tensor& logits, const std::vector<SampleRow>& rows) {
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
  SampleOutcome o;
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

// Logprobs within `tol`, -inf equal to -inf.
inline void expect_logprob(float got, float want, const std::string& what, double tol = 1e-5) {
  if (std::isinf(want) && std::isinf(got) && (want < 0) == (got < 0)) return;
  EXPECT_NEAR(got, want, tol) << what;
}

// Where the tokens of a row are equal: equal alternatives and logprobs within `tol`.
inline void expect_same_row(const SampleOutcome& got, const SampleOutcome& want, size_t i, const std::string& at,
                            double tol = 1e-5) {
  expect_logprob(got.logprobs[i], want.logprobs[i], at, tol);
  EXPECT_EQ(got.top_ids[i], want.top_ids[i]) << at;
  for (size_t k = 0; k < want.top_ids[i].size() && k < got.top_ids[i].size(); ++k)
    expect_logprob(got.top_logprobs[i][k], want.top_logprobs[i][k], at + " alternative " + std::to_string(k), tol);
}

// How far (in probability) the row's u lies from the nearest edge of a token's interval in the
// reference's final distribution (backend/sampling_math.h, as the CPU facet runs it); infinity
// for a greedy row. A device that sums in another precision or order may pick a neighbour only
// where this is within its rounding.
inline double distance_to_edge(const Tensor& host_logits, int64_t r, const SampleRow& x) {
  if (x.temperature == 0.f) return std::numeric_limits<double>::infinity();
  const int64_t V = host_logits.dim(1);
  const float* row = host_logits.data<float>() + r * host_logits.stride(0);
  std::vector<float> l(row, row + V);
  SamplingParams p;
  p.temperature = x.temperature;
  p.top_k = x.top_k;
  p.top_p = x.top_p;
  p.min_p = x.min_p;
  p.repetition_penalty = x.repetition_penalty;
  p.presence_penalty = x.presence_penalty;
  p.frequency_penalty = x.frequency_penalty;
  apply_bias_and_mask(l, x.bias, x.allowed);
  apply_penalties(l, p, x.seen, x.generated);
  const std::vector<double> probs = sampled_distribution(l, p);
  double cum = 0, best = std::abs(x.u);
  for (double q : probs) {
    if (q <= 0) continue;
    cum += q;
    best = std::min(best, std::abs(x.u - cum));
  }
  return best;
}

// Every combination of the parameters the sampler takes, cycled over the rows; penalties on
// every other row, over tokens drawn from a small range so that some repeat.
inline std::vector<SampleRow> mixed_sample_rows(int64_t n, int64_t V, std::vector<std::vector<int32_t>>& seen,
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
    if ((r + c) % 2 == 1) {
      x.repetition_penalty = 1.3f;
      x.presence_penalty = 0.5f;
      x.frequency_penalty = 0.25f;
    }
    std::vector<int32_t>& s = seen[static_cast<size_t>(r)];
    for (int i = 0; i < 60; ++i) s.push_back(tok(g));
    s.push_back(-1);  // out of range ids are ignored
    s.push_back(static_cast<int32_t>(V) + 5);
    x.seen = s;
    x.generated = std::span<const int32_t>(s).subspan(30);
    x.u = next_u(g);
  }
  return rows;
}

// Structured-output rows: of every four rows, one keeps all ids, one has a mask, one a logit bias
// and one both. A mask allows a random ~1/8 of the ids plus id (r * 13) % V (so at least one); a
// bias row gets +6 on three ids and -100 on its largest logit.
struct SampleConstraints {
  std::vector<std::vector<uint32_t>> masks;
  std::vector<std::vector<std::pair<int32_t, float>>> bias;
};
inline void constrain_sample_rows(std::vector<SampleRow>& rows, const Tensor& logits, SampleConstraints& c,
                                  std::mt19937_64& g) {
  const int64_t V = logits.dim(1);
  const auto n = rows.size();
  c.masks.assign(n, {});
  c.bias.assign(n, {});
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(V) - 1);
  for (size_t r = 0; r < n; ++r) {
    if (r % 4 == 1 || r % 4 == 3) {
      std::vector<uint32_t>& m = c.masks[r];
      m.assign(static_cast<size_t>((V + 31) / 32), 0u);
      for (int64_t i = 0; i < V; ++i)
        if ((g() & 7) == 0 || i == (static_cast<int64_t>(r) * 13) % V) m[i >> 5] |= 1u << (i & 31);
      rows[r].allowed = m.data();
    }
    if (r % 4 >= 2) {
      const float* l = logits.data<float>() + static_cast<int64_t>(r) * logits.stride(0);
      const auto best = static_cast<int32_t>(std::max_element(l, l + V) - l);
      std::vector<std::pair<int32_t, float>>& b = c.bias[r];
      b.push_back({best, -100.f});
      while (b.size() < std::min<size_t>(4, static_cast<size_t>(V))) {
        const int32_t t = id(g);
        if (std::none_of(b.begin(), b.end(), [&](const auto& e) { return e.first == t; })) b.push_back({t, 6.f});
      }
      rows[r].bias = b;
    }
  }
}

// n rows of V random logits, every third with a peak (so that top-p and min-p keep a handful of
// tokens), and their mixed_sample_rows (`seen` holds the rows' token lists).
struct MixedSampleCase {
  Tensor logits;
  std::vector<std::vector<int32_t>> seen;
  std::vector<SampleRow> rows;
};
inline MixedSampleCase mixed_sample_case(int64_t n, int64_t V, std::mt19937_64& g) {
  MixedSampleCase c;
  c.logits = random_tensor({n, V}, 77 + static_cast<uint32_t>(V), 2.f);
  for (int64_t r = 0; r < n; r += 3) c.logits.data<float>()[r * V + (r * 7919) % V] += 12.f;
  c.rows = mixed_sample_rows(n, V, c.seen, g);
  return c;
}

// Rows of ties and infinities: all logits equal, four distinct values, half -inf, one finite
// logit, each under top-k, top-p and min-p settings, `per_case` rows a case.
struct SampleTieCase {
  const char* name;
  int kind;  // 0 all equal, 1 four distinct values, 2 half -inf, 3 one finite
  int32_t top_k;
  float top_p, min_p;
};
inline const std::vector<SampleTieCase>& sample_tie_cases() {
  static const std::vector<SampleTieCase> cases = {
      {"all equal, top-k 20", 0, 20, 1.f, 0.f},    {"all equal, top-p 0.5", 0, 0, 0.5f, 0.f},
      {"all equal, top-p 0.1", 0, 50, 0.1f, 0.f},  {"four values, top-k 50", 1, 50, 1.f, 0.f},
      {"four values, top-p 0.3", 1, 0, 0.3f, 0.f}, {"four values, top-p 0.9", 1, 0, 0.9f, 0.05f},
      {"four values, top-k 1", 1, 1, 1.f, 0.f},    {"half -inf, top-k 2000", 2, 2000, 1.f, 0.f},
      {"half -inf, top-p 0.7", 2, 0, 0.7f, 0.f},   {"one finite", 3, 0, 1.f, 0.f},
      {"one finite, top-k 5", 3, 5, 0.5f, 0.1f},
  };
  return cases;
}
// Fills `logits` ([cases * per_case, V]) and returns the rows; row r is of case r / per_case, and
// a one-finite row's finite logit is at (r * 131) % V.
inline std::vector<SampleRow> sample_tie_rows(Tensor& logits, int64_t per_case, std::mt19937_64& g) {
  const auto& cases = sample_tie_cases();
  const int64_t n = logits.dim(0), V = logits.dim(1);
  std::vector<SampleRow> rows(static_cast<size_t>(n));
  std::uniform_int_distribution<int> four(0, 3);
  for (int64_t r = 0; r < n; ++r) {
    const SampleTieCase& c = cases[static_cast<size_t>(r / per_case)];
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
  return rows;
}

// Logits on the host, a row count that does not match and a negative temperature are refused
// by a device backend's `sample`, each naming what is wrong; valid rows then sample.
inline void expect_sample_refusals_name_the_problem(Backend& be) {
  Tensor logits = random_tensor({2, 100}, 3);
  std::vector<SampleRow> rows(2);
  Tensor ids = Tensor::empty({2}, DType::kI32), lp = Tensor::empty({2}, DType::kF32);
  Status s = be.sampling().sample({logits, rows, ids, lp});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'logits'"), std::string::npos) << s.to_string();
  Tensor dl = to_device(be, logits);
  s = be.sampling().sample({dl, std::span<const SampleRow>(rows).first(1), ids, lp});
  EXPECT_NE(s.message().find("1 sample rows for 2 logits rows"), std::string::npos) << s.to_string();
  rows[1].temperature = -0.5f;
  s = be.sampling().sample({dl, rows, ids, lp});
  EXPECT_NE(s.message().find("row 1: temperature"), std::string::npos) << s.to_string();
  rows[1].temperature = 1.f;
  Tensor dev_ids = be.storage().allocate({2}, DType::kI32).value();
  s = be.sampling().sample({dl, rows, dev_ids, lp});
  EXPECT_NE(s.message().find("'ids'"), std::string::npos) << s.to_string();
  EXPECT_TRUE(be.sampling().sample({dl, rows, ids, lp}).ok());
}

// Structured-output rows (token masks, logit biases, both) among free ones, at the model's
// vocabulary (`big_rows` rows) and a small one (192 rows), on `dev` against the CPU reference:
// `match(case, got, want, what)` holds the device's tokens to the reference's with its own
// tolerance; a masked row's token is always allowed.
template <class Match>
void expect_constrained_rows_match_cpu(Backend& dev, int64_t big_rows, Match match) {
  auto ref = create_backend("cpu").value();
  std::mt19937_64 g(4321);
  for (int64_t V : {int64_t{248320}, int64_t{1000}}) {
    MixedSampleCase c = mixed_sample_case(V > 100000 ? big_rows : 192, V, g);
    SampleConstraints k;
    constrain_sample_rows(c.rows, c.logits, k, g);
    ASSERT_TRUE(dev.sampling().supports(describe(SampleArgs{c.logits, c.rows, Tensor(), Tensor()})).runs_natively());
    const SampleOutcome want = run_sample(*ref, c.logits, c.rows);
    const SampleOutcome got = run_sample(dev, to_device(dev, c.logits), c.rows);
    match(c, got, want, "constrained V=" + std::to_string(V));
    for (size_t r = 0; r < c.rows.size(); ++r) {
      if (!k.masks[r].empty()) {
        EXPECT_TRUE((k.masks[r][got.ids[r] >> 5] >> (got.ids[r] & 31)) & 1u) << "row " << r << " token " << got.ids[r];
      }
    }
  }
}

// Structured-output rows in the argmax: a row's mask leaves only some ids (a random eighth, plus
// one id whose logit is -inf in a row of -inf elsewhere), unmasked rows beside them; the device
// gives the CPU reference's ids, every masked id allowed, on device and host logits.
inline void expect_masked_argmax_matches_cpu(Backend& dev) {
  auto ref = create_backend("cpu").value();
  const int64_t V = 248320, rows = 6;
  const auto words = static_cast<size_t>((V + 31) / 32);
  Tensor logits = random_tensor({rows, V}, 820);
  float* l = logits.data<float>();
  for (int64_t j = 0; j < V; ++j) l[4 * V + j] = -INFINITY;  // row 4: only -inf, one id allowed
  std::vector<std::vector<uint32_t>> masks(rows);
  std::vector<const uint32_t*> allowed(rows, nullptr);
  std::mt19937_64 g(7);
  for (int64_t r : {0, 2, 3, 4}) {
    masks[r].assign(words, 0u);
    for (int64_t j = 0; j < V; ++j)
      if (r != 4 && (g() & 7) == 0) masks[r][j >> 5] |= 1u << (j & 31);
    const int64_t must = (r * 104729) % V;
    masks[r][must >> 5] |= 1u << (must & 31);
    allowed[r] = masks[r].data();
  }
  Tensor want = Tensor::empty({rows}, DType::kI32), free_ids = Tensor::empty({rows}, DType::kI32);
  ASSERT_TRUE(ref->sampling().argmax({logits, want, allowed}).ok());
  ASSERT_TRUE(ref->sampling().argmax({logits, free_ids}).ok());
  EXPECT_TRUE(dev.sampling().supports(describe(ArgmaxArgs{logits, want, allowed})).runs_natively());
  Tensor dl = to_device(dev, logits), dids = dev.storage().allocate({rows}, DType::kI32).value();
  ASSERT_TRUE(dev.sampling().argmax({dl, dids, allowed}).ok());
  Tensor got = to_host(dev, dids), got_host = Tensor::empty({rows}, DType::kI32);
  ASSERT_TRUE(dev.sampling().argmax({logits, got_host, allowed}).ok());
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t id = want.data<int32_t>()[r];
    EXPECT_EQ(got.data<int32_t>()[r], id) << "row " << r;
    EXPECT_EQ(got_host.data<int32_t>()[r], id) << "row " << r;
    if (allowed[r]) {
      EXPECT_TRUE((allowed[r][id >> 5] >> (id & 31)) & 1u) << "row " << r;
    } else {
      EXPECT_EQ(id, free_ids.data<int32_t>()[r]) << "row " << r;
    }
  }
  EXPECT_EQ(want.data<int32_t>()[4], (4 * 104729) % V);
  EXPECT_NE(want.data<int32_t>()[0], free_ids.data<int32_t>()[0]) << "the mask must matter in row 0";
}

}  // namespace kiln::testing
