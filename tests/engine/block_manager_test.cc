// The one allocator (IdPool) and the engine's views of it: BlockManager's reservations and
// shared prefixes, GdnStateSlots' zeroing and snapshots.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/block_manager.h"
#include "engine/gdn_state_slots.h"
#include "model_fixture.h"

namespace kiln {
namespace {

TEST(IdPool, ReferenceCountsFreeOnLastRelease) {
  IdPool pool(3, "K/V block");
  auto two = pool.acquire(2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<int32_t>{0, 1}));
  pool.retain(0);
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_FALSE(pool.release(0));
  EXPECT_TRUE(pool.release(0));
  EXPECT_EQ(pool.free_count(), 2);
  auto too_many = pool.acquire(3);
  EXPECT_EQ(too_many.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(too_many.status().message().find("K/V block"), std::string::npos);
  EXPECT_EQ(pool.free_count(), 2);  // all or nothing
}

TEST(BlockManager, ReservesSharesAndFrees) {
  testing::TinyModel m;
  auto state = m.model->create_state({2, 6}).value();
  BlockManager bm(state);
  SequenceState a;
  ASSERT_TRUE(bm.reserve(a, 130).ok());
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(bm.blocks_needed(a, 0), 0);
  a.length = 130;
  EXPECT_EQ(bm.blocks_needed(a, 62), 0);  // fits the third block
  EXPECT_EQ(bm.blocks_needed(a, 63), 1);
  SequenceState b;
  bm.adopt_prefix(b, std::span<const int32_t>(a.blocks).first(2));
  EXPECT_EQ(b.length, 128);
  EXPECT_EQ(bm.ref_count(a.blocks[0]), 2);
  ASSERT_TRUE(bm.reserve(b, 10).ok());  // b's own third block
  EXPECT_NE(b.blocks[2], a.blocks[2]);
  EXPECT_EQ(bm.free_blocks(), 2);
  bm.free(a);
  EXPECT_EQ(bm.free_blocks(), 3);  // a's third block; the shared two stay with b
  EXPECT_EQ(bm.ref_count(b.blocks[0]), 1);
  bm.free(b);
  EXPECT_EQ(bm.free_blocks(), 6);
}

TEST(GdnStateSlots, AcquireZeroesAndSnapshotsCopy) {
  testing::TinyModel m;
  auto state = m.model->create_state({3, 4}).value();
  GdnStateSlots slots(state);
  SequenceState a;
  ASSERT_TRUE(slots.acquire(a).ok());
  const Tensor rec = state.recurrent(0).select(0, a.slot);
  rec.data<float>()[5] = 3.f;  // the CPU backend's device memory is host memory
  auto snap = slots.snapshot(a.slot);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(state.recurrent(0).select(0, *snap).data<float>()[5], 3.f);
  SequenceState b;
  ASSERT_TRUE(slots.restore(*snap, b).ok());
  EXPECT_EQ(state.recurrent(0).select(0, b.slot).data<float>()[5], 3.f);
  EXPECT_EQ(slots.free_slots(), 0);
  const int32_t a_slot = a.slot;
  slots.free(a);
  SequenceState c;
  ASSERT_TRUE(slots.acquire(c).ok());  // reuses a's slot, zeroed
  EXPECT_EQ(c.slot, a_slot);
  EXPECT_EQ(state.recurrent(0).select(0, c.slot).data<float>()[5], 0.f);
  SequenceState d;
  EXPECT_EQ(slots.acquire(d).code(), ErrorCode::kResourceExhausted);
}

// slot_to_host: every GDN layer's recurrent state, then its conv state, of one slot alone.
TEST(GdnStateSlots, SlotToHostReadsEachLayersRecurrentThenConvState) {
  testing::TinyModel m;
  auto state = m.model->create_state({3, 4}).value();
  std::vector<int64_t> gdn_layers;
  size_t want = 0;
  for (int64_t i = 0; i < m.model->config().num_layers; ++i)
    if (state.recurrent(i).defined()) {
      gdn_layers.push_back(i);
      want += static_cast<size_t>(state.recurrent(i).select(0, 0).numel() + state.conv(i).select(0, 0).numel());
    }
  ASSERT_GE(gdn_layers.size(), 2u);
  const int64_t last = gdn_layers.back();
  state.recurrent(gdn_layers[0]).select(0, 1).data<float>()[0] = 2.f;  // slot 1, first layer, first entry
  state.conv(last).select(0, 1).data<float>()[state.conv(last).select(0, 1).numel() - 1] = 7.f;
  state.recurrent(gdn_layers[0]).select(0, 2).data<float>()[0] = 9.f;  // another slot: not read
  auto got = state.slot_to_host(1);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), want);
  EXPECT_EQ(got->front(), 2.f);
  EXPECT_EQ(got->back(), 7.f);
  EXPECT_EQ(std::count(got->begin(), got->end(), 0.f), static_cast<long>(want) - 2);
}

}  // namespace
}  // namespace kiln
