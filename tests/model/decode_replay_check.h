// The decode-replay check shared by the CPU test (a facet that re-runs the recorded body) and
// the CUDA test (real graphs): batches of several sizes decode across K/V block boundaries three
// ways from identical prefilled states (replayed, the eager twin of the same padded step, and
// the plain forward), and the replayed logits must equal the twin's bit for bit and the plain
// forward's within `forward_tol` (relative to the largest logit; padding and the attention's
// key-split plan change the order of f32 sums). With `stacks`, row r of an n-row batch applies
// stacks(r, n): a composition's first step runs as the eager twin, later ones replay.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "model/decode_replay.h"
#include "model/random_adapter.h"
#include "test_util.h"

namespace kiln::testing {

inline Tensor host_copy(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::kF32);
  Status s = be.storage().copy_to_host(t, h);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return h;
}

// One way of decoding: its own state, sequences and (for the replaying ways) DecodeReplay.
struct DecodeWay {
  ModelState state;
  std::vector<SequenceState> seqs;
  std::unique_ptr<DecodeReplay> replay;
};

// The adapters row r of an n-row batch applies (empty: the base model).
using RowStacks = std::function<std::span<const LoraTerm>(int64_t r, int64_t n)>;

// Two random adapters held by shared pointers, as the registry holds them, and the stacks the
// adapter check gives its rows: one adapter over a whole batch at 1 and 3 rows (the 3-row
// bucket's padding row takes it too), mixed stacks at 8 and 13 (none, one, two adapters).
struct TwoAdapters {
  std::shared_ptr<const LoraAdapter> a, b;
  std::vector<LoraTerm> only_a, only_b, both;
  TwoAdapters(const Qwen35Model& model, StorageFacet& storage)
      : a(std::make_shared<LoraAdapter>(random_adapter(model.config(), storage, 3))),
        b(std::make_shared<LoraAdapter>(random_adapter(model.config(), storage, 4))),
        only_a{{a.get(), 1.f}},
        only_b{{b.get(), 1.f}},
        both{{a.get(), 0.5f}, {b.get(), 1.f}} {}
  RowStacks stacks() const {
    return [this](int64_t r, int64_t n) -> std::span<const LoraTerm> {
      if (n == 1) return only_b;
      if (n == 3) return only_a;
      return r % 3 == 0 ? std::span<const LoraTerm>(only_a) : r % 3 == 1 ? std::span<const LoraTerm>() : both;
    };
  }
};

inline void expect_replay_matches_eager_and_forward(Backend& be, ReplayFacet& replay, Qwen35Model& model,
                                                    double forward_tol, const RowStacks& stacks = {}) {
  auto stack = [&](int64_t r, int64_t n) { return stacks ? stacks(r, n) : std::span<const LoraTerm>(); };
  const ModelConfig& c = model.config();
  const int64_t max_rows = 16, steps = 12;
  std::set<std::pair<int64_t, int64_t>> buckets;
  int64_t replays = 0;
  DecodeWay ways[3];
  for (int w = 0; w < 3; ++w) {
    auto st = model.create_state({max_rows + 1, 4 * max_rows + 1});
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    ways[w].state = std::move(st).value();
    if (w < 2) {
      auto d = DecodeReplay::create(model, ways[w].state, replay, max_rows, /*max_blocks=*/4);
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      ways[w].replay = std::move(d).value();
      ways[w].replay->set_eager(w == 1);
    }
  }
  for (int64_t n : {1, 3, 8, 13}) {
    // Prompts of 58 + 3r tokens: the decode steps cross the 64-token block boundary, and rows
    // of one batch sit at different lengths.
    for (DecodeWay& way : ways) {
      way.seqs.clear();
      for (int64_t r = 0; r < n; ++r) {
        auto seq = way.state.new_sequence();
        ASSERT_TRUE(seq.ok()) << seq.status().to_string();
        way.seqs.push_back(std::move(seq).value());
      }
      for (int64_t r = 0; r < n; ++r) {
        std::vector<int32_t> prompt;
        for (int64_t i = 0; i < 58 + 3 * r; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + r * 11 + 5) % c.vocab_size));
        SequenceInput row{&way.seqs[r], prompt, stack(r, n)};
        auto l = model.forward({&row, 1}, LogitsMode::kLast, way.state);
        ASSERT_TRUE(l.ok()) << l.status().to_string();
      }
    }
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<int32_t> tokens;
      for (int64_t r = 0; r < n; ++r) tokens.push_back(static_cast<int32_t>((s * 53 + r * 29 + 1) % c.vocab_size));
      Tensor got[3];
      for (int w = 0; w < 3; ++w) {
        std::vector<SequenceInput> rows;
        for (int64_t r = 0; r < n; ++r)
          rows.push_back({&ways[w].seqs[r], std::span<const int32_t>(&tokens[r], 1), stack(r, n)});
        if (w < 2) {
          ASSERT_TRUE(ways[w].replay->applies(rows));
        }
        auto l = w < 2 ? ways[w].replay->forward(rows) : model.forward_on_device(rows, LogitsMode::kLast, ways[w].state);
        ASSERT_TRUE(l.ok()) << "batch " << n << " step " << s << ": " << l.status().to_string();
        got[w] = host_copy(be, *l);
      }
      ASSERT_EQ(got[0].numel(), n * c.vocab_size);
      EXPECT_EQ(std::memcmp(got[0].raw(), got[1].raw(), got[0].nbytes()), 0)
          << "batch " << n << " step " << s << ": the replay differs from the eager step (max |diff| "
          << max_abs_diff(got[0].data<float>(), got[1].data<float>(), got[0].numel()) << ")";
      double scale = 0;
      for (int64_t i = 0; i < got[2].numel(); ++i) scale = std::max(scale, std::fabs(double(got[2].data<float>()[i])));
      EXPECT_LE(max_abs_diff(got[0].data<float>(), got[2].data<float>(), got[0].numel()) / scale, forward_tol)
          << "batch " << n << " step " << s << ": the replay differs from the plain forward";
      const int64_t longest = (ways[0].seqs.back().length + 63) / 64;
      buckets.insert({ways[0].replay->row_bucket(n), ways[0].replay->block_bucket(longest)});
      ++replays;
    }
    for (DecodeWay& way : ways)
      for (SequenceState& seq : way.seqs) way.state.release(seq);
  }
  const DecodeReplayStats& st = ways[0].replay->stats();
  EXPECT_EQ(st.record_failures, 0) << ways[0].replay->last_failure().to_string();
  if (!stacks) {
    EXPECT_EQ(st.replays, replays);
    EXPECT_EQ(st.recordings, static_cast<int64_t>(buckets.size()));
    EXPECT_EQ(st.adapter_recordings, 0);
  } else {
    // Every (bucket, composition) runs its first step eagerly and replays the rest.
    EXPECT_EQ(st.replays + st.eager, replays);
    EXPECT_EQ(st.eager, static_cast<int64_t>(buckets.size()));
    EXPECT_EQ(st.adapter_recordings, st.recordings);
    EXPECT_EQ(st.invalidated, 0);  // the test holds every adapter throughout
  }
  EXPECT_EQ(ways[1].replay->stats().eager, replays);
  EXPECT_EQ(ways[1].replay->stats().recordings, 0);
}

}  // namespace kiln::testing
