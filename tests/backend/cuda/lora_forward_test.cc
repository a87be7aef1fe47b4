// LoRA through the whole model on CUDA (LoraBatch -> lora_delta, both paths: prefill runs of
// more than 16 tokens through cuBLASLt, decode rows and short runs through the segmented kernels)
// against the CPU forward on the f32 fixture: one batch whose rows use different adapters, a
// stack of two, or none, prefill then a decode step. Tolerance 1e-4 of max|logit|, as the plain
// forward's parity (cuda_model_tests): f32 weights and factors, every product in f32.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/tuning.h"
#include "model/lora_adapter.h"
#include "model/qwen35.h"

namespace kiln {
namespace {

constexpr double kTol = 1e-4;
const char* kFixture = "gqa_untied";

struct Side {
  std::unique_ptr<Qwen35Model> model;
  LoraAdapter peft, random;

  explicit Side(Backend& be) {
    const std::string dir = std::string(KILN_FIXTURES_DIR);
    model = Qwen35Model::load(dir + "/reference/" + kFixture, be).value();
    peft = LoraAdapter::load(dir + "/lora_reference/" + kFixture, model->config(), be.storage()).value();
    // A second adapter of another rank, B drawn from a fixed seed so both sides hold the same one.
    LoraConfig cfg;
    cfg.rank = 16;
    cfg.alpha = 32;
    for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
    random = LoraAdapter::init(cfg, model->config(), 5, be.storage()).value();
    for (int64_t l = 0; l < random.num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        LoraFactors& f = random.factors(l, static_cast<LoraTarget>(t));
        if (!f.defined()) continue;
        const Tensor b = testing::random_tensor(f.b.shape(), static_cast<uint32_t>(500 + l * 10 + t), 0.0625f);
        EXPECT_TRUE(be.storage().copy_from_host(b, f.b).ok());
      }
  }

  // Prefill logits (last token of each row) then one decode step's, rows as `lens` and stacks.
  std::pair<Tensor, Tensor> run(const std::vector<int64_t>& lens, const std::vector<std::span<const LoraTerm>>& stacks) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 200; ++i) ids.push_back((i * 37 + 11) % 300);
    auto state = model->create_state({static_cast<int64_t>(lens.size()), 16}).value();
    std::vector<SequenceState> seqs;
    for (size_t i = 0; i < lens.size(); ++i) seqs.push_back(state.new_sequence().value());
    std::vector<SequenceInput> rows, step;
    for (size_t i = 0; i < lens.size(); ++i) {
      rows.push_back({&seqs[i], {ids.data() + i, static_cast<size_t>(lens[i])}, stacks[i]});
      step.push_back({&seqs[i], {ids.data() + i + lens[i], 1}, stacks[i]});
    }
    auto pre = model->forward(rows, LogitsMode::kLast, state);
    EXPECT_TRUE(pre.ok()) << pre.status().to_string();
    auto dec = model->forward(step, LogitsMode::kLast, state);
    EXPECT_TRUE(dec.ok()) << dec.status().to_string();
    return {pre.ok() ? pre.value() : Tensor(), dec.ok() ? dec.value() : Tensor()};
  }
};

TEST(CudaLoraForward, RowsWithDifferentAdaptersMatchCpu) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu_be = std::move(create_backend("cpu").value());
  Side gpu(*be), cpu(*cpu_be);
  const std::vector<int64_t> lens = {40, 9, 5, 33, 12, 3};
  const auto stacks = [](Side& s) {
    return std::vector<std::vector<LoraTerm>>{{{&s.peft, 1.f}}, {{&s.peft, 1.f}}, {}, {{&s.random, 1.f}},
                                              {{&s.peft, 0.5f}, {&s.random, -1.f}}, {{&s.random, 2.f}}};
  };
  const auto cs = stacks(cpu);
  const std::vector<std::span<const LoraTerm>> cspans(cs.begin(), cs.end());
  const auto [cpre, cdec] = cpu.run(lens, cspans);
  ASSERT_TRUE(cpre.defined() && cdec.defined());
  // Both CUDA paths: the kernels (the default, tuning.h) and the matmul sequence they replaced
  // (tuning().lora_kernel = false). The decode step runs with the prefill's setting.
  Tensor gpre, gdec;
  for (const bool kernels : {true, false}) {
    const bool saved = cuda::tuning().lora_kernel;
    cuda::tuning().lora_kernel = kernels;
    Side side(*be);
    const auto st = stacks(side);
    std::tie(gpre, gdec) = side.run(lens, std::vector<std::span<const LoraTerm>>(st.begin(), st.end()));
    cuda::tuning().lora_kernel = saved;
    ASSERT_TRUE(gpre.defined() && gdec.defined());
    const double epre = testing::rel_error(gpre, cpre), edec = testing::rel_error(gdec, cdec);
    EXPECT_LE(epre, kTol) << "prefill, kernels " << kernels;
    EXPECT_LE(edec, kTol) << "decode, kernels " << kernels;
    std::printf("kernels %d: rel error vs cpu: prefill %.3g, decode %.3g\n", kernels, epre, edec);
  }
  // The adapters change the logits (else the comparison above would prove nothing about them).
  const std::vector<std::span<const LoraTerm>> none(lens.size());
  const auto [bpre, bdec] = gpu.run(lens, none);
  ASSERT_TRUE(bpre.defined() && bdec.defined());
  EXPECT_GT(testing::rel_error(bdec, gdec), 10 * kTol);
  EXPECT_GT(testing::rel_error(bpre, gpre), 10 * kTol);
}

}  // namespace
}  // namespace kiln
