// DecodeReplay on the CPU (tests/model/decode_replay_check.h): a replay facet that keeps the
// recorded body and runs it again stands in for CUDA graphs, so that the padding, the packed
// inputs, the buckets and the engine's use of them are checked here; the CUDA test runs the same
// check with real graphs (tests/backend/cuda/replay_test.cc).
#include <gtest/gtest.h>

#include "backend/registry.h"
#include "engine/adapter_registry.h"
#include "engine/engine.h"
#include "forwarding_backend.h"
#include "model/decode_replay_check.h"

namespace kiln {
namespace {

// Records by keeping the body; replays by running it again. The next `fail` recordings fail, as
// a capture that another thread's work invalidated would.
class RerunReplay final : public ReplayFacet {
 public:
  struct Kept final : Recording {
    std::function<Status()> body;
  };
  bool available() const override { return true; }
  Result<std::unique_ptr<Recording>> record(const std::function<Status()>& body) override {
    ++attempts;
    if (fail > 0) {
      --fail;
      return internal_error("cuda graphs: the capture was invalidated");
    }
    auto k = std::make_unique<Kept>();
    k->body = body;
    return std::unique_ptr<Recording>(std::move(k));
  }
  Status replay(const Recording& r) override { return static_cast<const Kept&>(r).body(); }
  int fail = 0, attempts = 0;
};

class CpuWithRerun final : public testing::ForwardingBackend {
 public:
  CpuWithRerun() : ForwardingBackend(std::move(create_backend("cpu").value())) {}
  ReplayFacet& replay() override { return rerun_; }
  RerunReplay& rerun() { return rerun_; }

 private:
  RerunReplay rerun_;
};

std::unique_ptr<Qwen35Model> load_fixture(Backend& be) {
  auto m = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// The fixture model decoding one sequence, token 7 each step, through a DecodeReplay of 2 rows
// and 4 blocks on the rerunning replay facet.
struct OneRowReplay {
  CpuWithRerun be;
  std::unique_ptr<Qwen35Model> model = load_fixture(be);
  ModelState state = model->create_state({3, 8}).value();
  std::unique_ptr<DecodeReplay> d =
      DecodeReplay::create(*model, state, be.replay(), /*max_rows=*/2, /*max_blocks=*/4).value();
  SequenceState seq = state.new_sequence().value();
  std::vector<int32_t> token{7};

  ~OneRowReplay() {
    d.reset();
    state.release(seq);
  }
  // A step of the row under `stack`, which must go through the replay.
  void decode(std::span<const LoraTerm> stack = {}) {
    SequenceInput row{&seq, token, stack};
    EXPECT_TRUE(d->applies({&row, 1}));
    auto l = d->forward({&row, 1});
    EXPECT_TRUE(l.ok()) << l.status().to_string();
  }
  std::shared_ptr<const LoraAdapter> adapter(uint64_t seed) {
    return std::make_shared<const LoraAdapter>(testing::random_adapter(model->config(), be.storage(), seed));
  }
};

TEST(DecodeReplay, ReplayEqualsTheEagerStepAndThePlainForward) {
  CpuWithRerun be;
  auto model = load_fixture(be);
  ASSERT_NE(model, nullptr);
  // f32 on the CPU: padding changes only the BLAS call's row count; the bound is the one the
  // consistency tests use for changed summation orders.
  testing::expect_replay_matches_eager_and_forward(be, be.replay(), *model, 5e-5);
}

// Rows with adapters are replayed too: one adapter over a whole batch (1 and 3 rows: the padding
// row of the 3-row bucket takes it too) and mixed stacks (8 and 13 rows: none, one, two).
TEST(DecodeReplay, AdapterRowsReplayEqualsTheEagerStepAndThePlainForward) {
  CpuWithRerun be;
  auto model = load_fixture(be);
  ASSERT_NE(model, nullptr);
  testing::TwoAdapters ad(*model, be.storage());
  testing::expect_replay_matches_eager_and_forward(be, be.replay(), *model, 5e-5, ad.stacks());
}

// A recording holds its adapters; once nothing else does (unloaded, its requests finished) it is
// dropped at the next adapter step, and the adapter freed. Beyond kMaxAdapterRecordings the least
// recently used go. An adapter not held by a shared pointer is not taken.
TEST(DecodeReplay, AdapterRecordingsAreInvalidatedWhenTheirAdaptersGo) {
  OneRowReplay r;
  auto& d = r.d;
  auto decode = [&r](std::span<const LoraTerm> stack) { r.decode(stack); };
  auto a = r.adapter(5);
  std::weak_ptr<const LoraAdapter> watch = a;
  const LoraTerm with_a{a.get(), 1.f};
  decode({&with_a, 1});  // first sight: eager
  EXPECT_EQ(d->stats().eager, 1);
  EXPECT_EQ(d->stats().adapter_recordings, 0);
  decode({&with_a, 1});  // second: recorded and replayed
  decode({&with_a, 1});
  EXPECT_EQ(d->stats().adapter_recordings, 1);
  EXPECT_EQ(d->stats().replays, 2);
  a.reset();  // unloaded: only the recording holds it now
  EXPECT_FALSE(watch.expired());
  auto b = r.adapter(6);
  const LoraTerm with_b{b.get(), 1.f};
  decode({&with_b, 1});
  EXPECT_EQ(d->stats().invalidated, 1);
  EXPECT_TRUE(watch.expired()) << "the dropped recording still holds the adapter";
  EXPECT_EQ(d->adapter_recordings_held(), 0u);
  // Compositions past the limit (the same adapter at other weights): the oldest go.
  std::vector<LoraTerm> terms;
  for (size_t i = 0; i <= DecodeReplay::kMaxAdapterRecordings + 1; ++i) terms.push_back({b.get(), 0.5f + 0.01f * i});
  for (const LoraTerm& t : terms) {
    decode({&t, 1});
    decode({&t, 1});
  }
  EXPECT_EQ(d->adapter_recordings_held(), DecodeReplay::kMaxAdapterRecordings);
  EXPECT_EQ(d->stats().invalidated, 1 + 2);
  // Not held by a shared pointer: the row goes the plain way.
  LoraAdapter loose = testing::random_adapter(r.model->config(), r.be.storage(), 7);
  const LoraTerm with_loose{&loose, 1.f};
  SequenceInput row{&r.seq, r.token, {&with_loose, 1}};
  EXPECT_FALSE(d->applies({&row, 1}));
}

// A failed recording costs its step only (the plain forward runs it): the next step of the
// composition records again and replays, and the failure is counted.
TEST(DecodeReplay, AFailedRecordingIsRetriedAtTheCompositionsNextStep) {
  OneRowReplay r;
  auto& d = r.d;
  auto& be = r.be;
  SequenceInput row{&r.seq, r.token};
  be.rerun().fail = 1;
  ASSERT_TRUE(d->forward({&row, 1}).ok());
  EXPECT_EQ(d->stats().record_failures, 1);
  EXPECT_EQ(d->stats().recordings, 0);
  EXPECT_EQ(d->stats().replays, 0);
  EXPECT_NE(d->last_failure().message().find("invalidated"), std::string::npos) << d->last_failure().to_string();
  EXPECT_EQ(r.seq.length, 1) << "the failed step still decoded its row";
  ASSERT_TRUE(d->applies({&row, 1})) << "one failure does not stop replay";
  ASSERT_TRUE(d->forward({&row, 1}).ok());
  ASSERT_TRUE(d->forward({&row, 1}).ok());
  EXPECT_EQ(be.rerun().attempts, 2);
  EXPECT_EQ(d->stats().recordings, 1);
  EXPECT_EQ(d->stats().replays, 2);
  EXPECT_EQ(d->stats().record_failures, 1);
}

// A composition whose recording fails kMaxRecordFailures times in a row runs the plain forward
// from then on without trying again, while another composition records and replays; the failed
// entry holds its adapter only until nothing else does.
TEST(DecodeReplay, ACompositionThatKeepsFailingIsGivenUpAloneAndDroppedWithItsAdapter) {
  OneRowReplay r;
  auto& d = r.d;
  auto& be = r.be;
  auto decode = [&r](std::span<const LoraTerm> stack) { r.decode(stack); };
  auto a = r.adapter(5);
  auto b = r.adapter(6);
  std::weak_ptr<const LoraAdapter> watch = a;
  const LoraTerm with_a{a.get(), 1.f}, with_b{b.get(), 1.f};
  be.rerun().fail = DecodeReplay::kMaxRecordFailures;
  decode({&with_a, 1});  // first sight: the eager twin, nothing recorded
  for (int i = 0; i < DecodeReplay::kMaxRecordFailures; ++i) decode({&with_a, 1});
  EXPECT_EQ(d->stats().record_failures, DecodeReplay::kMaxRecordFailures);
  EXPECT_EQ(be.rerun().attempts, DecodeReplay::kMaxRecordFailures);
  decode({&with_a, 1});  // given up: no further attempt, though one would now succeed
  decode({&with_a, 1});
  EXPECT_EQ(be.rerun().attempts, DecodeReplay::kMaxRecordFailures);
  EXPECT_EQ(d->stats().recordings, 0);
  decode({&with_b, 1});
  decode({&with_b, 1});
  decode({&with_b, 1});
  EXPECT_EQ(d->stats().recordings, 1);
  EXPECT_EQ(d->stats().replays, 2);
  a.reset();  // unloaded: only the failed entry holds it
  EXPECT_FALSE(watch.expired());
  decode({&with_b, 1});
  EXPECT_TRUE(watch.expired()) << "the given-up entry still holds its adapter";
  EXPECT_EQ(d->stats().invalidated, 0) << "no recording was dropped, only a failed entry";
  EXPECT_EQ(d->stats().replays, 3);
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

TEST(DecodeReplay, KeepsOneSlotAndBlockAndTakesOnlyOneTokenRowsWithinItsLimits) {
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
    EXPECT_FALSE(d->applies({&adapted, 1}));  // a null adapter
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

// Runs six greedy requests to completion on an engine over the rerunning backend, every other one
// through the PEFT fixture adapter when `adapters` is set; their tokens and the engine's stats.
std::vector<std::vector<int32_t>> run_engine(bool replay, bool adapters, EngineStats* stats) {
  CpuWithRerun be;
  auto model = load_fixture(be);
  AdapterRegistry registry(model->config(), be.storage());
  if (adapters) {
    auto loaded = registry.load("tuned", std::string(KILN_FIXTURES_DIR) + "/lora_reference/gqa_untied");
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  }
  EngineConfig ec;
  ec.kv_blocks = 32;
  ec.scheduler.max_running = 8;
  ec.prefix_cache.enabled = false;
  ec.decode_replay = replay;
  ec.adapters = &registry;
  auto engine = Engine::create(*model, ec).value();
  std::vector<Submission> subs;
  for (int i = 0; i < 6; ++i) {
    RequestSpec r;
    for (int t = 0; t < 20 + 7 * i; ++t) r.prompt.push_back((t * 17 + i * 5 + 3) % 300);
    r.max_tokens = 24;
    r.ignore_eos = true;
    r.sampling.temperature = 0.f;
    if (adapters && i % 2 == 0) r.adapter = "tuned";
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
}

// The engine replays decode steps where the backend can, and its greedy tokens are those of the
// eager engine.
TEST(DecodeReplay, EngineReplaysAndDecodesTheSameTokens) {
  EngineStats with{}, without{};
  const auto replayed = run_engine(true, false, &with), eager = run_engine(false, false, &without);
  EXPECT_EQ(replayed, eager);
  for (const auto& t : replayed) EXPECT_EQ(t.size(), 24u);
  EXPECT_GT(with.decode_replays, 0);
  EXPECT_GT(with.decode_recordings, 0);
  EXPECT_LE(with.decode_recordings, with.decode_replays);
  EXPECT_EQ(with.decode_adapter_recordings, 0);
  EXPECT_EQ(without.decode_replays, 0);
  EXPECT_EQ(with.total_blocks, 32);  // the padding block is the engine's own
  EXPECT_EQ(with.total_slots, without.total_slots);
}

// Requests through a loaded adapter (held by the registry and the requests) beside base-model
// ones: their batches are replayed too, and decode the eager engine's tokens.
TEST(DecodeReplay, EngineReplaysAdapterRowsAndDecodesTheSameTokens) {
  EngineStats with{}, without{}, base{};
  const auto replayed = run_engine(true, true, &with), eager = run_engine(false, true, &without);
  EXPECT_EQ(replayed, eager);
  for (const auto& t : replayed) EXPECT_EQ(t.size(), 24u);
  EXPECT_NE(replayed, run_engine(false, false, &base)) << "the adapter should change some tokens";
  EXPECT_GT(with.decode_adapter_recordings, 0);
  EXPECT_GT(with.decode_replays, 0);
  EXPECT_EQ(without.decode_replays, 0);
}

}  // namespace
}  // namespace kiln
