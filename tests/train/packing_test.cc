// Packing (train/packing.h): next-fit runs in the order given, and the packed sequence's tokens,
// roles and example lengths.
#include <gtest/gtest.h>

#include <vector>

#include "train/packing.h"

namespace kiln {
namespace {

using Runs = std::vector<std::vector<size_t>>;

TEST(Packing, ARunClosesWhenTheNextExampleDoesNotFit) {
  const std::vector<int64_t> lengths = {5, 3, 4, 2, 8, 9, 1};
  const std::vector<size_t> order = {0, 1, 2, 3, 4, 5, 6};
  // 5 + 3 = 8; + 4 > 10: closes. 4 + 2 = 6; + 8 > 10. 8; + 9 > 10. 9 + 1 = 10.
  EXPECT_EQ(pack_in_order(order, lengths, 10), (Runs{{0, 1}, {2, 3}, {4}, {5, 6}}));
  // The order given is the order packed: no sorting by length.
  EXPECT_EQ(pack_in_order(std::vector<size_t>{6, 5, 3, 0}, lengths, 10), (Runs{{6, 5}, {3, 0}}));
}

TEST(Packing, AnExampleLongerThanTheLimitStandsAlone) {
  const std::vector<int64_t> lengths = {3, 12, 3};
  EXPECT_EQ(pack_in_order(std::vector<size_t>{0, 1, 2}, lengths, 10), (Runs{{0}, {1}, {2}}));
}

TEST(Packing, APackedSequenceConcatenatesAndMarksEachExamplesFirstTokenAsContext) {
  TrainSequence a{{1, 2, 3}, {TokenRole::kTarget, TokenRole::kTarget, TokenRole::kTarget}, {}};
  TrainSequence b{{4, 5}, {TokenRole::kObservation, TokenRole::kTarget}, {}};
  TrainSequence ab{{6, 7, 8, 9}, std::vector<TokenRole>(4, TokenRole::kTarget), {2, 2}};  // itself packed
  const TrainSequence p = pack_sequences(std::vector<const TrainSequence*>{&a, &b, &ab});
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(p.packed, (std::vector<int64_t>{3, 2, 2, 2}));
  using enum TokenRole;
  EXPECT_EQ(p.roles, (std::vector<TokenRole>{kContext, kTarget, kTarget, kContext, kTarget, kContext, kTarget, kContext,
                                              kTarget}));
}

}  // namespace
}  // namespace kiln
