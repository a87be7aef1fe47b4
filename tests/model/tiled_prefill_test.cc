// Tiled (streaming) prefill: the passes and the logits layout of tiled_prefill, the policy each
// backend resolves, and a tiled forward equal to the untiled one (logits, state, the next step).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/qwen35.h"
#include "model/tiled_prefill.h"
#include "test_util.h"

namespace kiln {
namespace {

// A tiled pass continues from state written by the pass before, where the untiled forward has it
// in the same call; a one-token remnant pass (65 = 64 + 1) runs as a decode step (the recurrent
// GDN form, the paged decode attention). Tiles line up with the 64-token GDN chunks and K/V
// blocks, so what differs is only the order of f32 sums: a row's products in sgemm can depend on
// the call's row count (its blocking and edge kernels; m <= 8 runs the gemv). Four layers amplify
// that to 3.7e-5 at most on logits up to 4.8 on this machine's CPU (some cases are bit-exact);
// the bound leaves ~2.5x for another CPU's BLAS kernels.
constexpr double kTiledTol = 1e-4;

// ---- tiled_prefill on a stand-in pass: which passes, and where their logits land ----

// Each logits row of a pass holds, in every column, the token it came from; tokens are their own
// index in the untiled order, so the tiled result must read 0, 1, 2, ... (kAll).
struct RecordingPass {
  StorageFacet* storage;
  int64_t vocab;
  std::vector<std::vector<int64_t>> lengths;  // per pass, each row's tokens
  Result<Tensor> operator()(std::span<const SequenceInput> rows, LogitsMode mode) {
    std::vector<float> values;
    lengths.emplace_back();
    for (const auto& r : rows) {
      lengths.back().push_back(static_cast<int64_t>(r.tokens.size()));
      if (mode == LogitsMode::kLast) values.insert(values.end(), vocab, static_cast<float>(r.tokens.back()));
      else
        for (int32_t t : r.tokens) values.insert(values.end(), vocab, static_cast<float>(t));
    }
    const auto n = static_cast<int64_t>(values.size()) / vocab;
    return storage->upload(Tensor::from_values(values, {n, vocab}));
  }
};

TEST(TiledPrefill, PassesGiveEachRowItsNextTileAndLogitsKeepTheUntiledLayout) {
  auto be = create_backend("cpu").value();
  const std::vector<int64_t> lens = {200, 5, 130};
  std::vector<int32_t> ids(335);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::vector<SequenceInput> rows;
  int64_t at = 0;
  for (int64_t n : lens) {
    rows.push_back(SequenceInput{nullptr, {ids.data() + at, static_cast<size_t>(n)}});
    at += n;
  }
  const int64_t V = 3;
  for (LogitsMode mode : {LogitsMode::kAll, LogitsMode::kLast}) {
    RecordingPass rec{&be->storage(), V, {}};
    auto out = tiled_prefill(rows, mode, 64, V, be->storage(), std::ref(rec));
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    // Rows shorter than the tile finish in the first pass; the others take 64 at a time.
    const std::vector<std::vector<int64_t>> want = {{64, 5, 64}, {64, 64}, {64, 2}, {8}};
    EXPECT_EQ(rec.lengths, want);
    if (mode == LogitsMode::kAll) {
      ASSERT_EQ(out->dim(0), 335);
      for (int64_t t = 0; t < 335; ++t)
        for (int64_t v = 0; v < V; ++v) ASSERT_EQ(out->data<float>()[t * V + v], static_cast<float>(t)) << t;
    } else {
      ASSERT_EQ(out->dim(0), 3);
      const std::vector<float> last = {199.f, 204.f, 334.f};
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t v = 0; v < V; ++v) EXPECT_EQ(out->data<float>()[r * V + v], last[r]) << r;
    }
  }
}

TEST(TiledPrefill, AnEmptyRowIsRejected) {
  auto be = create_backend("cpu").value();
  int32_t tok = 1;
  std::vector<SequenceInput> rows = {{nullptr, {&tok, 1}}, {nullptr, {}}};
  RecordingPass rec{&be->storage(), 2, {}};
  auto out = tiled_prefill(rows, LogitsMode::kLast, 64, 2, be->storage(), std::ref(rec));
  EXPECT_EQ(out.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("no tokens"), std::string::npos) << out.status().to_string();
  EXPECT_TRUE(rec.lengths.empty());
}

// ---- the policy ----

TEST(TiledPrefill, BackendsResolveTheirPolicyAtStartup) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(create_backend("cpu").value()));
  if (auto cuda = create_backend("cuda"); cuda.ok()) backends.push_back(std::move(*cuda));
  for (const auto& be : backends) {
    const auto& p = be->capabilities().streaming_prefill;
    EXPECT_TRUE(p.tiled) << be->identity().name;
    EXPECT_GT(p.tile_tokens, 0) << be->identity().name;
    EXPECT_EQ(p.tile_tokens % 64, 0) << be->identity().name;  // passes end on K/V blocks and GDN chunks
    EXPECT_GT(p.auto_threshold_tokens, p.tile_tokens) << be->identity().name;
    auto t = resolve_prefill_tiling(p, -1);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->threshold, p.auto_threshold_tokens);
    EXPECT_EQ(t->tile, p.tile_tokens);
  }
  EXPECT_EQ(backends[0]->capabilities().streaming_prefill.auto_threshold_tokens, 1024);
  EXPECT_EQ(backends[0]->capabilities().streaming_prefill.tile_tokens, 512);
  if (backends.size() > 1) {
    EXPECT_EQ(backends[1]->capabilities().streaming_prefill.auto_threshold_tokens, 8192);
    EXPECT_EQ(backends[1]->capabilities().streaming_prefill.tile_tokens, 4096);
  }
}

TEST(TiledPrefill, TheThresholdDecidesWhichBatchesAreTiled) {
  const PrefillTiling t{1024, 512};
  std::vector<int32_t> ids(1100, 7);
  auto batch = [&](std::vector<size_t> lens) {
    std::vector<SequenceInput> rows;
    for (size_t n : lens) rows.push_back(SequenceInput{nullptr, {ids.data(), n}});
    return prefill_tile_for(rows, t);
  };
  EXPECT_EQ(batch({1023}), 0);
  EXPECT_EQ(batch({1024}), 512);
  EXPECT_EQ(batch({1, 1023, 600}), 0);  // rows over the tile but none at the threshold
  EXPECT_EQ(batch({1, 1100}), 512);
  EXPECT_EQ(prefill_tile_for(std::vector<SequenceInput>{{nullptr, {ids.data(), 1100}}}, PrefillTiling{}), 0);
  // Forced: any row longer than the tile.
  auto forced = resolve_prefill_tiling({}, 64);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(prefill_tile_for(std::vector<SequenceInput>{{nullptr, {ids.data(), 64}}}, *forced), 0);
  EXPECT_EQ(prefill_tile_for(std::vector<SequenceInput>{{nullptr, {ids.data(), 65}}}, *forced), 64);
  auto off = resolve_prefill_tiling({true, 1024, 512}, 0);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->tile, 0);
}

// ---- the model: tiled == untiled ----

struct Outcome {
  Tensor logits, next;  // the prefill's logits; the following decode step's (kLast)
  std::vector<int64_t> lengths, blocks;
  std::vector<int32_t> greedy;  // each row's argmax after the prefill
  int64_t free_blocks = 0;
};

struct TiledModel {
  std::unique_ptr<Backend> backend = std::move(create_backend("cpu").value());
  std::unique_ptr<Qwen35Model> model;
  std::vector<int32_t> ids;
  TiledModel() {
    model = std::move(Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *backend).value());
    for (int i = 0; i < 1100; ++i) ids.push_back((i * 37 + 11) % 300);
  }

  // Prefills rows of `lens` tokens (row i from ids[13 i]) with `tile` as ForwardOptions::prefill_tile,
  // then decodes `feed[i]` (or the row's own greedy token when feed is empty) on every row.
  Outcome run(const std::vector<int64_t>& lens, LogitsMode mode, int64_t tile, const std::vector<int32_t>& feed = {}) {
    model->options().prefill_tile = tile;
    const int64_t V = model->config().vocab_size;
    auto state = model->create_state({static_cast<int64_t>(lens.size()), 48}).value();
    std::vector<SequenceState> seqs;
    std::vector<SequenceInput> rows;
    for (size_t i = 0; i < lens.size(); ++i) seqs.push_back(state.new_sequence().value());
    for (size_t i = 0; i < lens.size(); ++i)
      rows.push_back(SequenceInput{&seqs[i], {ids.data() + 13 * i, static_cast<size_t>(lens[i])}});
    Outcome o;
    auto logits = model->forward(rows, mode, state);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return o;
    o.logits = *logits;
    int64_t end = 0;
    std::vector<SequenceInput> step;
    for (size_t i = 0; i < lens.size(); ++i) {
      end += mode == LogitsMode::kAll ? lens[i] : 1;
      const float* last = o.logits.data<float>() + (end - 1) * V;
      o.greedy.push_back(static_cast<int32_t>(std::max_element(last, last + V) - last));
      o.lengths.push_back(seqs[i].length);
      o.blocks.push_back(static_cast<int64_t>(seqs[i].blocks.size()));
    }
    o.free_blocks = state.free_blocks();
    const std::vector<int32_t>& next = feed.empty() ? o.greedy : feed;
    for (size_t i = 0; i < lens.size(); ++i) step.push_back(SequenceInput{&seqs[i], {&next[i], 1}});
    model->options().prefill_tile = 0;
    auto dec = model->forward(step, LogitsMode::kLast, state);
    EXPECT_TRUE(dec.ok()) << dec.status().to_string();
    if (dec.ok()) o.next = *dec;
    model->options().prefill_tile = -1;
    return o;
  }

  // The forward with `tile` forced, against the untiled forward of the same rows.
  void expect_tiled_equals_untiled(const std::vector<int64_t>& lens, LogitsMode mode, int64_t tile) {
    std::string what = "tile ";  // (built in steps: gcc 12 warns falsely on a chain of + here)
    what += std::to_string(tile);
    what += mode == LogitsMode::kAll ? " kAll rows" : " kLast rows";
    for (int64_t n : lens) {
      what += ' ';
      what += std::to_string(n);
    }
    SCOPED_TRACE(what);
    const Outcome base = run(lens, mode, 0);
    const Outcome tiled = run(lens, mode, tile, base.greedy);
    ASSERT_EQ(tiled.logits.shape(), base.logits.shape());
    EXPECT_LE(testing::max_abs_diff(tiled.logits.data<float>(), base.logits.data<float>(), base.logits.numel()),
              kTiledTol);
    EXPECT_EQ(tiled.lengths, base.lengths);
    EXPECT_EQ(tiled.blocks, base.blocks);
    EXPECT_EQ(tiled.free_blocks, base.free_blocks);
    EXPECT_EQ(tiled.greedy, base.greedy);
    // The state each pass left behind decodes the same next step.
    ASSERT_EQ(tiled.next.shape(), base.next.shape());
    EXPECT_LE(testing::max_abs_diff(tiled.next.data<float>(), base.next.data<float>(), base.next.numel()), kTiledTol);
  }
};

TEST(TiledPrefill, ForcedTilesEqualTheUntiledForward) {
  TiledModel m;
  const std::vector<std::vector<int64_t>> batches = {{63}, {64}, {65}, {200}, {257}, {257, 40}, {40, 200}};
  for (int64_t tile : {64, 128})
    for (LogitsMode mode : {LogitsMode::kLast, LogitsMode::kAll})
      for (const auto& lens : batches) m.expect_tiled_equals_untiled(lens, mode, tile);
}

TEST(TiledPrefill, ForcedTilesRunOnlyBatchesWithARowLongerThanTheTile) {
  TiledModel m;
  std::vector<SequenceState> seqs(2);
  auto rows_of = [&](std::vector<size_t> lens) {
    std::vector<SequenceInput> rows;
    for (size_t i = 0; i < lens.size(); ++i) rows.push_back(SequenceInput{&seqs[i], {m.ids.data(), lens[i]}});
    return rows;
  };
  m.model->options().prefill_tile = 64;
  EXPECT_EQ(m.model->prefill_tile(rows_of({63})).value(), 0);
  EXPECT_EQ(m.model->prefill_tile(rows_of({64})).value(), 0);
  EXPECT_EQ(m.model->prefill_tile(rows_of({65})).value(), 64);
  EXPECT_EQ(m.model->prefill_tile(rows_of({40, 200})).value(), 64);
  m.model->options().prefill_tile = -1;  // the CPU's policy: 1024 and up, tiles of 512
  EXPECT_EQ(m.model->prefill_tile(rows_of({1023})).value(), 0);
  EXPECT_EQ(m.model->prefill_tile(rows_of({1025})).value(), 512);
}

TEST(TiledPrefill, ThePolicyTilesAPromptAtTheThresholdAsTheUntiledForward) {
  TiledModel m;
  // Across the CPU's threshold (1024): 1023 runs in one pass, 1025 in passes of 512, 512 and 1.
  for (int64_t n : {1023, 1025}) {
    SCOPED_TRACE(n);
    const Outcome base = m.run({n, 30}, LogitsMode::kLast, 0);
    const Outcome policy = m.run({n, 30}, LogitsMode::kLast, -1, base.greedy);
    EXPECT_LE(testing::max_abs_diff(policy.logits.data<float>(), base.logits.data<float>(), base.logits.numel()),
              kTiledTol);
    EXPECT_EQ(policy.lengths, base.lengths);
    EXPECT_LE(testing::max_abs_diff(policy.next.data<float>(), base.next.data<float>(), base.next.numel()), kTiledTol);
  }
}

TEST(TiledPrefill, AForcedTileNotAMultipleOf64IsRejectedNamingIt) {
  TiledModel m;
  auto state = m.model->create_state({1, 8}).value();
  auto seq = state.new_sequence().value();
  SequenceInput row{&seq, {m.ids.data(), 200}};
  for (int64_t bad : {100, 32, -2}) {
    m.model->options().prefill_tile = bad;
    auto r = m.model->forward({&row, 1}, LogitsMode::kLast, state);
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("prefill_tile is " + std::to_string(bad)), std::string::npos)
        << r.status().to_string();
    EXPECT_EQ(seq.length, 0);  // refused before any pass ran
  }
}

}  // namespace
}  // namespace kiln
