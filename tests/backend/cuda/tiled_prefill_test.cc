// Tiled prefill on the CUDA backend: the passes' logits and the state they leave equal one untiled
// forward's, with forced tiles and with the backend's own policy (8192 and up, tiles of 4096); a
// 32,768-token prompt's activations are bounded by the tile. Chunks carried across calls (the
// engine's chunked prefill), their boundaries off the 64-token grid, equal one pass too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/fallback.h"
#include "model/qwen35.h"
#include "model/tiny_checkpoint.h"

namespace kiln {
namespace {

struct Prefilled {
  Tensor logits, next;  // the prefill's logits (host); the following decode step's
  std::vector<int64_t> lengths;
};

// Rows of `lens` tokens (row i from ids[13 i]) prefilled with ForwardOptions::prefill_tile =
// `tile`, then one decode step of token 5 on every row.
Prefilled prefill(Qwen35Model& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& lens, LogitsMode mode,
                  int64_t tile) {
  Prefilled p;
  m.options().prefill_tile = tile;
  auto state = m.create_state({static_cast<int64_t>(lens.size()), 200}).value();
  std::vector<SequenceState> seqs;
  std::vector<SequenceInput> rows, step;
  for (size_t i = 0; i < lens.size(); ++i) seqs.push_back(state.new_sequence().value());
  for (size_t i = 0; i < lens.size(); ++i)
    rows.push_back({&seqs[i], {ids.data() + 13 * i, static_cast<size_t>(lens[i])}});
  auto logits = m.forward(rows, mode, state);
  m.options().prefill_tile = -1;
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  if (!logits.ok()) return p;
  p.logits = *logits;
  const int32_t five = 5;
  for (auto& s : seqs) {
    p.lengths.push_back(s.length);
    step.push_back({&s, {&five, 1}});
  }
  auto next = m.forward(step, LogitsMode::kLast, state);
  EXPECT_TRUE(next.ok()) << next.status().to_string();
  if (next.ok()) p.next = *next;
  return p;
}

void expect_equal(const Prefilled& tiled, const Prefilled& base, double tol) {
  ASSERT_EQ(tiled.logits.shape(), base.logits.shape());
  EXPECT_LE(testing::rel_error(tiled.logits, base.logits), tol);
  EXPECT_EQ(tiled.lengths, base.lengths);
  EXPECT_LE(testing::rel_error(tiled.next, base.next), tol);
}

std::vector<int32_t> prompt_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return ids;
}

// f32 weights: every GEMM in plain f32 and the attention in f32, so a pass differs from the
// untiled call only in the order of f32 sums (cuBLASLt's algorithm for another m, the decode
// kernels for a one-token remnant pass): the 1e-4 of max|logit| that CudaModel's batched rows
// are held to against the CPU.
TEST(CudaTiledPrefill, F32FixtureTiledEqualsUntiled) {
  KILN_CUDA_OR_SKIP(be);
  FallbackCounters::global().reset();
  auto m = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::vector<int32_t> ids = prompt_ids(8400, 300);
  const std::vector<std::vector<int64_t>> batches = {{65}, {200}, {257}, {257, 40}, {40, 200}};
  for (int64_t tile : {64, 128})
    for (LogitsMode mode : {LogitsMode::kLast, LogitsMode::kAll})
      for (const auto& lens : batches) {
        SCOPED_TRACE(::testing::Message() << "tile " << tile << ", rows of " << lens[0] << (lens.size() > 1 ? "+" : "")
                                          << (mode == LogitsMode::kAll ? ", kAll" : ", kLast"));
        expect_equal(prefill(**m, ids, lens, mode, tile), prefill(**m, ids, lens, mode, 0), 1e-4);
      }
  // The backend's policy: 8191 tokens in one pass, 8300 in passes of 4096, 4096 and 108.
  std::vector<SequenceState> probe(1);
  SequenceInput r8191{&probe[0], {ids.data(), 8191}}, r8300{&probe[0], {ids.data(), 8300}};
  EXPECT_EQ((*m)->prefill_tile({&r8191, 1}).value(), 0);
  EXPECT_EQ((*m)->prefill_tile({&r8300, 1}).value(), 4096);
  expect_equal(prefill(**m, ids, {8300, 30}, LogitsMode::kLast, -1), prefill(**m, ids, {8300, 30}, LogitsMode::kLast, 0),
               1e-4);
  EXPECT_EQ(FallbackCounters::global().total("cuda"), 0u);
}

// One prompt prefilled in calls of `pieces` tokens (one call: the single pass), then one decode
// step: the last call's logits, the GDN state it left and the decode step's logits.
struct Carried {
  Tensor last, next;
  std::vector<float> state;
};
Carried prefill_in_calls(Qwen35Model& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& pieces) {
  Carried c;
  m.options().prefill_tile = 0;
  auto state = m.create_state({1, 20}).value();
  auto seq = state.new_sequence().value();
  size_t done = 0;
  for (int64_t len : pieces) {
    SequenceInput row{&seq, {ids.data() + done, static_cast<size_t>(len)}};
    auto l = m.forward({&row, 1}, LogitsMode::kLast, state);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    if (!l.ok()) return c;
    c.last = *l;
    done += static_cast<size_t>(len);
  }
  auto gdn = state.slot_to_host(seq.slot);
  EXPECT_TRUE(gdn.ok()) << gdn.status().to_string();
  if (gdn.ok()) c.state = *gdn;
  const int32_t five = 5;
  SequenceInput step{&seq, {&five, 1}};
  auto next = m.forward({&step, 1}, LogitsMode::kLast, state);
  EXPECT_TRUE(next.ok()) << next.status().to_string();
  if (next.ok()) c.next = *next;
  m.options().prefill_tile = -1;
  return c;
}

// f32 weights, 700 tokens in calls of 37, 64, 129, 200 and 270 (each but the second starting off
// the 64-token K/V block and GDN chunk grid, the first shorter than a chunk): the last logits, the
// GDN state of every layer and the next step equal the single pass's within the 1e-4 of f32 sums
// taken in another order (as the tiled passes above).
TEST(CudaTiledPrefill, F32FixtureChunksCarriedAcrossCallsOffTheGridEqualOnePass) {
  KILN_CUDA_OR_SKIP(be);
  auto m = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::vector<int32_t> ids = prompt_ids(700, 300);
  const Carried one = prefill_in_calls(**m, ids, {700});
  const Carried chunked = prefill_in_calls(**m, ids, {37, 64, 129, 200, 270});
  ASSERT_TRUE(one.last.defined() && chunked.last.defined() && one.next.defined() && chunked.next.defined());
  ASSERT_FALSE(one.state.empty());
  const double logits = testing::rel_error(chunked.last, one.last), next = testing::rel_error(chunked.next, one.next);
  const double state = testing::rel_error(chunked.state, one.state);
  std::printf("chunks carried across calls vs one pass: logits %.3g, GDN state %.3g, next step %.3g\n", logits, state,
              next);
  EXPECT_LE(logits, 1e-4);
  EXPECT_LE(state, 1e-4);
  EXPECT_LE(next, 1e-4);
}

// Device memory a one-row prefill of `n` tokens takes beyond what was in use before it (the pool's
// peak: activations, scratch and logits; the K/V and GDN state are allocated beforehand).
uint64_t prefill_peak_bytes(Backend& be, Qwen35Model& m, const std::vector<int32_t>& ids, int64_t n, int64_t tile) {
  auto state = m.create_state({1, n / 64 + 2}).value();
  auto seq = state.new_sequence().value();
  SequenceInput row{&seq, {ids.data(), static_cast<size_t>(n)}};
  EXPECT_TRUE(cuda_reset_peak_memory(be).ok());
  const uint64_t base = cuda_backend_stats(be)->pool_in_use_bytes;
  m.options().prefill_tile = tile;
  auto logits = m.forward_on_device({&row, 1}, LogitsMode::kLast, state);
  m.options().prefill_tile = -1;
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  EXPECT_EQ(seq.length, n);
  return cuda_backend_stats(be)->pool_peak_in_use_bytes - base;
}

// A 32,768-token prompt under the backend's policy (passes of 4,096) peaks at about what one
// 4,096-token pass does (within 1.5x: the kLast logits and the pass bookkeeping), and several
// times below the same prompt untiled: the activations scale with the tile, not the prompt.
TEST(CudaTiledPrefill, A32kPromptsActivationsAreBoundedByTheTile) {
  KILN_CUDA_OR_SKIP(be);
  auto m = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::vector<int32_t> ids = prompt_ids(32768, 300);
  std::vector<SequenceState> probe(1);
  SequenceInput r32k{&probe[0], {ids.data(), ids.size()}};
  ASSERT_EQ((*m)->prefill_tile({&r32k, 1}).value(), 4096);
  const uint64_t one_pass = prefill_peak_bytes(*be, **m, ids, 4096, -1);
  const uint64_t tiled = prefill_peak_bytes(*be, **m, ids, 32768, -1);
  const uint64_t untiled = prefill_peak_bytes(*be, **m, ids, 32768, 0);
  std::printf("prefill activation peaks: 4,096 tokens %.1f MB; 32,768 tiled %.1f MB, untiled %.1f MB\n",
              one_pass / 1e6, tiled / 1e6, untiled / 1e6);
  EXPECT_LE(static_cast<double>(tiled), 1.5 * static_cast<double>(one_pass));
  EXPECT_GE(static_cast<double>(untiled), 4.0 * static_cast<double>(tiled));
}

// A bf16 checkpoint: passes of at least 64 tokens run the tensor-core prefill attention as the
// untiled call does, but a shorter remnant pass (300 = 128 + 128 + 44) runs the f32 kernels, whose
// products the untiled call rounded to bf16: a difference of bf16's 2^-8 relative rounding in that
// pass's attention, carried through the layers; the 2e-2 of max|logit| CudaModel allows a bf16
// checkpoint against the CPU.
TEST(CudaTiledPrefill, Bf16CheckpointTiledEqualsUntiled) {
  KILN_CUDA_OR_SKIP(be);
  const std::string dir = testing::tiny_checkpoint("cuda-tiled", 13);
  ASSERT_FALSE(dir.empty());
  auto m = Qwen35Model::load(dir, *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::vector<int32_t> ids = prompt_ids(400, (*m)->config().vocab_size);
  for (LogitsMode mode : {LogitsMode::kLast, LogitsMode::kAll}) {
    SCOPED_TRACE(static_cast<int>(mode));
    expect_equal(prefill(**m, ids, {200, 300}, mode, 128), prefill(**m, ids, {200, 300}, mode, 0), 2e-2);
  }
}

}  // namespace
}  // namespace kiln
