// Whole-model checks a device backend's tests share (CUDA, Vulkan), against the CPU backend on
// the committed fixtures: greedy tokens equal, and a batch of rows of different lengths (prefill
// chunks, then decode rows) giving the CPU's logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/device_test_util.h"
#include "backend/registry.h"
#include "model/qwen35.h"

namespace kiln::testing {

inline std::string fixture_dir(const char* name) { return std::string(KILN_FIXTURES_DIR) + "/reference/" + name; }

// `steps` greedy tokens from `prompt` (by default 1..7: 71 tokens at 64 steps, across a K/V block
// boundary), each the argmax of the step's logits on `be`'s own device.
inline std::vector<int32_t> greedy_tokens(Backend& be, const std::string& dir, int steps,
                                          std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7}) {
  std::vector<int32_t> tokens;
  auto model = Qwen35Model::load(dir, be);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return tokens;
  auto state = (*model)->create_state({1, 4}).value();
  auto seq = state.new_sequence().value();
  std::vector<int32_t> next = std::move(prompt);
  Tensor ids = Tensor::empty({1}, DType::kI32);
  Tensor dev_ids = be.storage().allocate({1}, DType::kI32).value();
  for (int step = 0; step < steps; ++step) {
    SequenceInput row{&seq, next};
    auto logits = (*model)->forward_on_device({&row, 1}, LogitsMode::kLast, state);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return tokens;
    EXPECT_TRUE(be.sampling().argmax({logits.value(), dev_ids}).ok());
    EXPECT_TRUE(be.storage().copy_to_host(dev_ids, ids).ok());
    tokens.push_back(ids.data<int32_t>()[0]);
    next = {tokens.back()};
  }
  return tokens;
}

// Rows of 150, 70 and 1 prompt tokens in one forward, then three decode steps of the three rows:
// every step's logits within `tol` (relative) of the CPU backend's for the same batch.
inline void expect_batched_rows_match_cpu(Backend& be, double tol) {
  auto cpu = std::move(create_backend("cpu").value());
  auto mc = Qwen35Model::load(fixture_dir("gqa_untied"), *cpu);
  auto md = Qwen35Model::load(fixture_dir("gqa_untied"), be);
  ASSERT_TRUE(mc.ok() && md.ok());
  auto sc = (*mc)->create_state({3, 16}).value();
  auto sd = (*md)->create_state({3, 16}).value();
  std::vector<SequenceState> qc, qd;
  for (int i = 0; i < 3; ++i) {
    qc.push_back(sc.new_sequence().value());
    qd.push_back(sd.new_sequence().value());
  }
  std::vector<int32_t> prompt(150);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 300);
  const size_t lens[3] = {150, 70, 1};
  double worst = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<SequenceInput> rc, rd;
    std::vector<int32_t> one = {static_cast<int32_t>(step + 40)};
    for (int i = 0; i < 3; ++i) {
      std::span<const int32_t> toks = step == 0 ? std::span<const int32_t>(prompt.data(), lens[i])
                                                : std::span<const int32_t>(one);
      rc.push_back({&qc[i], toks});
      rd.push_back({&qd[i], toks});
    }
    const LogitsMode mode = step == 0 ? LogitsMode::kAll : LogitsMode::kLast;
    auto lc = (*mc)->forward(rc, mode, sc);
    auto ld = (*md)->forward(rd, mode, sd);
    ASSERT_TRUE(lc.ok() && ld.ok()) << lc.status().to_string() << " " << ld.status().to_string();
    const double e = rel_error(ld.value(), lc.value());
    worst = std::max(worst, e);
    EXPECT_LE(e, tol) << "step " << step;
  }
  std::printf("batched rows: max rel error vs cpu %.3g\n", worst);
}

}  // namespace kiln::testing
