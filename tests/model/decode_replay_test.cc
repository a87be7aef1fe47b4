// DecodeReplay on the CPU (tests/model/decode_replay_check.h): a replay facet that keeps the
// recorded body and runs it again stands in for CUDA graphs, so that the padding, the packed
// inputs, the buckets and the engine's use of them are checked here; the CUDA test runs the same
// check with real graphs (tests/backend/cuda/replay_test.cc).
#include <gtest/gtest.h>

#include "backend/registry.h"
#include "engine/engine.h"
#include "forwarding_backend.h"
#include "model/decode_replay_check.h"

namespace kiln {
namespace {

// Records by keeping the body; replays by running it again.
class RerunReplay final : public ReplayFacet {
 public:
  struct Kept final : Recording {
    std::function<Status()> body;
  };
  bool available() const override { return true; }
  Result<std::unique_ptr<Recording>> record(const std::function<Status()>& body) override {
    auto k = std::make_unique<Kept>();
    k->body = body;
    return std::unique_ptr<Recording>(std::move(k));
  }
  Status replay(const Recording& r) override { return static_cast<const Kept&>(r).body(); }
};

class CpuWithRerun final : public testing::ForwardingBackend {
 public:
  CpuWithRerun() : ForwardingBackend(std::move(create_backend("cpu").value())) {}
  ReplayFacet& replay() override { return rerun_; }

 private:
  RerunReplay rerun_;
};

std::unique_ptr<Qwen35Model> load_fixture(Backend& be) {
  auto m = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(DecodeReplay, ReplayEqualsTheEagerStepAndThePlainForward) {
  CpuWithRerun be;
  auto model = load_fixture(be);
  ASSERT_NE(model, nullptr);
  // f32 on the CPU: padding changes only the BLAS call's row count; the bound is the one the
  // consistency tests use for changed summation orders.
  testing::expect_replay_matches_eager_and_forward(be, be.replay(), *model, 5e-5);
}

TEST(DecodeReplay, BucketsPadRowsAndWidths) {
  CpuWithRerun be;
  auto model = load_fixture(be);
  ASSERT_NE(model, nullptr);
  auto state = model->create_state({2, 4}).value();
  auto d = DecodeReplay::create(*model, state, be.replay(), /*max_rows=*/20, /*max_blocks=*/100).value();
  EXPECT_EQ(d->row_bucket(1), 1);
  EXPECT_EQ(d->row_bucket(3), 4);
  EXPECT_EQ(d->row_bucket(8), 8);
  EXPECT_EQ(d->row_bucket(9), 16);
  EXPECT_EQ(d->row_bucket(17), 20);  // the last bucket is the limit itself
  EXPECT_EQ(d->block_bucket(1), 16);
  EXPECT_EQ(d->block_bucket(17), 32);
  EXPECT_EQ(d->block_bucket(65), 100);
}

TEST(DecodeReplay, KeepsOneSlotAndBlockAndTakesOnlyAdapterFreeDecodeRows) {
  CpuWithRerun be;
  auto model = load_fixture(be);
  ASSERT_NE(model, nullptr);
  auto state = model->create_state({2, 3}).value();
  {
    auto d = DecodeReplay::create(*model, state, be.replay(), /*max_rows=*/1, /*max_blocks=*/2).value();
    EXPECT_EQ(state.free_slots(), 1);
    EXPECT_EQ(state.free_blocks(), 2);
    auto seq = state.new_sequence().value();
    std::vector<int32_t> two{1, 2};
    SequenceInput prefill{&seq, two};
    EXPECT_FALSE(d->applies({&prefill, 1}));  // two tokens
    SequenceInput decode{&seq, std::span<const int32_t>(two.data(), 1)};
    EXPECT_TRUE(d->applies({&decode, 1}));
    SequenceInput rows[2] = {decode, decode};
    EXPECT_FALSE(d->applies(rows));  // over max_rows
    LoraTerm term{nullptr, 1.f};
    SequenceInput adapted{&seq, std::span<const int32_t>(two.data(), 1), std::span<const LoraTerm>(&term, 1)};
    EXPECT_FALSE(d->applies({&adapted, 1}));
    seq.length = 128;  // the next token needs a third block, over max_blocks
    EXPECT_FALSE(d->applies({&decode, 1}));
    auto refused = d->forward({&decode, 1});
    EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument);
    seq.length = 0;
    state.release(seq);
  }
  EXPECT_EQ(state.free_slots(), 2);
  EXPECT_EQ(state.free_blocks(), 3);
  // No slot left for the padding rows: creation says so.
  auto a = state.new_sequence().value(), b = state.new_sequence().value();
  auto none = DecodeReplay::create(*model, state, be.replay(), 1, 2);
  EXPECT_FALSE(none.ok());
}

// The engine replays adapter-free decode steps where the backend can, and its greedy tokens are
// those of the eager engine.
TEST(DecodeReplay, EngineReplaysAndDecodesTheSameTokens) {
  auto run = [](bool replay, EngineStats* stats) {
    CpuWithRerun be;
    auto model = load_fixture(be);
    EngineConfig ec;
    ec.kv_blocks = 32;
    ec.scheduler.max_running = 8;
    ec.prefix_cache.enabled = false;
    ec.decode_replay = replay;
    auto engine = Engine::create(*model, ec).value();
    std::vector<Submission> subs;
    for (int i = 0; i < 6; ++i) {
      RequestSpec r;
      for (int t = 0; t < 20 + 7 * i; ++t) r.prompt.push_back((t * 17 + i * 5 + 3) % 300);
      r.max_tokens = 24;
      r.ignore_eos = true;
      r.sampling.temperature = 0.f;
      subs.push_back(engine->submit(r).value());
    }
    while (engine->has_work()) EXPECT_TRUE(engine->step().ok());
    *stats = engine->stats();
    std::vector<std::vector<int32_t>> out;
    for (auto& s : subs) {
      out.emplace_back();
      while (auto e = s.channel->try_pop())
        if (e->token >= 0) out.back().push_back(e->token);
    }
    return out;
  };
  EngineStats with{}, without{};
  const auto replayed = run(true, &with), eager = run(false, &without);
  EXPECT_EQ(replayed, eager);
  for (const auto& t : replayed) EXPECT_EQ(t.size(), 24u);
  EXPECT_GT(with.decode_replays, 0);
  EXPECT_GT(with.decode_recordings, 0);
  EXPECT_LE(with.decode_recordings, with.decode_replays);
  EXPECT_EQ(without.decode_replays, 0);
  EXPECT_EQ(with.total_blocks, 32);  // the padding block is the engine's own
  EXPECT_EQ(with.total_slots, without.total_slots);
}

}  // namespace
}  // namespace kiln
