// PrefixCache bookkeeping: chains keyed by model and adapter, shared blocks, snapshots, the
// max_tokens cap of a lookup, LRU eviction within the block and byte budgets.
#include <gtest/gtest.h>

#include "engine/prefix_cache.h"
#include "model_fixture.h"

namespace kiln {
namespace {

struct CacheUnderTest {
  testing::TinyModel m;
  ModelState state = m.model->create_state({6, 12}).value();
  BlockManager blocks{state};
  GdnStateSlots slots{state};
  PrefixKey key{"tiny", ""};

  // A sequence that has "processed" `tokens` (blocks and a slot, as after a prefill).
  SequenceState sequence(int64_t tokens) {
    SequenceState s;
    EXPECT_TRUE(slots.acquire(s).ok());
    EXPECT_TRUE(blocks.reserve(s, tokens).ok());
    s.length = tokens;
    return s;
  }
};

TEST(PrefixCache, HitSharesBlocksAndRestoresFromTheSnapshot) {
  CacheUnderTest t;
  PrefixCache cache({}, t.blocks, t.slots, t.state.block_bytes());
  auto prompt = testing::prompt_of(150);
  SequenceState a = t.sequence(128);
  ASSERT_TRUE(cache.insert(t.key, std::span<const int32_t>(prompt).first(128), a.blocks, a.slot).ok());
  EXPECT_EQ(cache.held_blocks(), 2);
  EXPECT_EQ(cache.held_snapshots(), 1);
  EXPECT_EQ(t.blocks.ref_count(a.blocks[0]), 2);

  PrefixHit hit = cache.lookup(t.key, prompt, 149);
  ASSERT_EQ(hit.tokens(), 128);
  EXPECT_EQ(hit.blocks, std::vector<int32_t>(a.blocks.begin(), a.blocks.begin() + 2));
  EXPECT_GE(hit.snapshot, 0);
  cache.record(hit);
  EXPECT_EQ(cache.hits(), 1);
  // Capped by max_tokens: a prompt of exactly 128 tokens may resume after 64 at most, and only
  // from a node with a snapshot (the 64-token node has none).
  EXPECT_EQ(cache.lookup(t.key, std::span<const int32_t>(prompt).first(128), 127).tokens(), 0);
  // Another adapter stack (or revision: part of the stack's key) is another cache.
  EXPECT_EQ(cache.lookup({"tiny", "lora@1*1;"}, prompt, 149).tokens(), 0);
  EXPECT_EQ(cache.lookup({"tiny", "lora@2*1;"}, prompt, 149).tokens(), 0);

  t.state.release(a);
  EXPECT_EQ(t.blocks.free_blocks(), 12 - 2);  // the cache keeps the prefix alive
  cache.clear();
  EXPECT_EQ(t.blocks.free_blocks(), 12);
  EXPECT_EQ(t.slots.free_slots(), 6);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedWithinBudgets) {
  CacheUnderTest t;
  PrefixCacheConfig cfg;
  cfg.max_blocks = 2;
  PrefixCache cache(cfg, t.blocks, t.slots, t.state.block_bytes());
  std::vector<std::vector<int32_t>> prompts = {testing::prompt_of(64, 1), testing::prompt_of(64, 2),
                                               testing::prompt_of(64, 3)};
  for (int i = 0; i < 2; ++i) {
    SequenceState s = t.sequence(64);
    ASSERT_TRUE(cache.insert(t.key, prompts[i], s.blocks, s.slot).ok());
    t.state.release(s);
  }
  EXPECT_EQ(cache.lookup(t.key, prompts[0], 64).tokens(), 64);  // prompt 0 is now the most recent
  SequenceState s = t.sequence(64);
  ASSERT_TRUE(cache.insert(t.key, prompts[2], s.blocks, s.slot).ok());
  t.state.release(s);
  EXPECT_EQ(cache.held_blocks(), 2);
  EXPECT_EQ(cache.lookup(t.key, prompts[1], 64).tokens(), 0);  // evicted
  EXPECT_EQ(cache.lookup(t.key, prompts[0], 64).tokens(), 64);
  EXPECT_EQ(cache.lookup(t.key, prompts[2], 64).tokens(), 64);

  // A byte budget of one block and one snapshot keeps only the last insertion.
  PrefixCacheConfig small;
  small.max_bytes = t.state.block_bytes() + t.state.slot_bytes();
  cache.clear();
  PrefixCache tight(small, t.blocks, t.slots, t.state.block_bytes());
  for (int i = 0; i < 3; ++i) {
    SequenceState q = t.sequence(64);
    ASSERT_TRUE(tight.insert(t.key, prompts[i], q.blocks, q.slot).ok());
    t.state.release(q);
  }
  EXPECT_EQ(tight.held_blocks(), 1);
  EXPECT_EQ(tight.lookup(t.key, prompts[2], 64).tokens(), 64);
  tight.clear();
  EXPECT_EQ(t.blocks.free_blocks(), 12);
  EXPECT_EQ(t.slots.free_slots(), 6);
}

}  // namespace
}  // namespace kiln
