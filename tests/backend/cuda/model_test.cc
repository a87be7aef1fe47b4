// The whole Qwen3.5 forward on the CUDA backend: against HF transformers' logits on the committed
// fixtures (f32 weights, so the GEMMs run in plain f32: max abs error <= 1e-3), greedy tokens equal
// to the CPU backend's, a batch of rows of different lengths equal to the CPU's, and a bf16
// checkpoint against the CPU with the CUDA numerics: GEMM inputs rounded to bf16 as cuBLASLt's
// are, and K/V rounded to bf16 as the CUDA state stores it.
// End to end, no host fallback is counted.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cuda/cuda_backend.h"
#include "backend/fallback.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/tuning.h"
#include "backend/device_numerics.h"
#include "model/backend_model_checks.h"
#include "model/init.h"
#include "model/tiny_checkpoint.h"
#include "model/qwen35.h"

namespace kiln {
namespace {

constexpr double kRefTol = 1e-3;
const char* kConfigs[] = {"gqa_untied", "tied_dk_ne_dv", "nested_mha"};

using testing::fixture_dir;

std::unique_ptr<Qwen35Model> load(const std::string& dir, Backend& be) {
  auto m = Qwen35Model::load(dir, be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> fixture_ids(const Checkpoint& ref) {
  const TensorEntry* e = ref.find("ids");
  return {e->tensor.data<int32_t>(), e->tensor.data<int32_t>() + e->tensor.numel()};
}

double max_err(const Tensor& got, const Tensor& want, int64_t n) {
  return testing::max_abs_diff(got.data<float>(), want.data<float>(), n);
}

TEST(CudaModel, PrefillAndDecodeMatchTransformers) {
  KILN_CUDA_OR_SKIP(be);
  FallbackCounters::global().reset();
  double worst_prefill = 0, worst_decode = 0;
  for (const char* name : kConfigs) {
    SCOPED_TRACE(name);
    auto model = load(fixture_dir(name), *be);
    ASSERT_TRUE(model);
    Checkpoint ref = Checkpoint::open_file(fixture_dir(name) + "/reference.safetensors").value();
    std::vector<int32_t> ids = fixture_ids(ref);
    for (int64_t n : {1, 63, 64, 65, 200}) {
      auto state = model->create_state({1, 4}).value();
      auto seq = state.new_sequence().value();
      SequenceInput row{&seq, {ids.data(), static_cast<size_t>(n)}};
      auto logits = model->forward({&row, 1}, LogitsMode::kAll, state);
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      const Tensor& want = ref.find("prefill_" + std::to_string(n))->tensor;
      ASSERT_EQ(logits.value().shape(), want.shape());
      const double e = max_err(logits.value(), want, want.numel());
      worst_prefill = std::max(worst_prefill, e);
      EXPECT_LE(e, kRefTol) << "prefill n=" << n;
    }
    for (int64_t n : {1, 63, 64, 65}) {
      auto state = model->create_state({1, 4}).value();
      auto seq = state.new_sequence().value();
      SequenceInput prefill{&seq, {ids.data(), static_cast<size_t>(n)}};
      ASSERT_TRUE(model->forward({&prefill, 1}, LogitsMode::kLast, state).ok());
      const Tensor& want = ref.find("decode_after_" + std::to_string(n))->tensor;
      for (int64_t j = 0; j < want.dim(0); ++j) {
        SequenceInput step{&seq, {ids.data() + n + j, 1}};
        auto logits = model->forward({&step, 1}, LogitsMode::kLast, state);
        ASSERT_TRUE(logits.ok()) << logits.status().to_string();
        const double e = testing::max_abs_diff(logits.value().data<float>(), want.data<float>() + j * want.dim(1),
                                               want.dim(1));
        worst_decode = std::max(worst_decode, e);
        EXPECT_LE(e, kRefTol) << "decode after " << n << " step " << j;
      }
    }
  }
  EXPECT_EQ(FallbackCounters::global().total("cuda"), 0u);
  CudaBackendStats st = cuda_backend_stats(*be).value();
  std::printf("cuda vs transformers: max abs error prefill %.3g, decode %.3g; matmul cache %llu hits / %llu misses; "
              "pool %llu hits / %llu misses\n",
              worst_prefill, worst_decode, (unsigned long long)st.matmul_cache_hits,
              (unsigned long long)st.matmul_cache_misses, (unsigned long long)st.pool_hits,
              (unsigned long long)st.pool_misses);
  RecordProperty("max_abs_error_prefill", std::to_string(worst_prefill));
  RecordProperty("max_abs_error_decode", std::to_string(worst_decode));
}

// One arena for weights: every weight of a loaded model views one device block, which
// holds exactly their 256-byte aligned sizes (tests/model/loader_test.cc checks the placement).
TEST(CudaModel, WeightsLiveInOneDeviceArena) {
  KILN_CUDA_OR_SKIP(be);
  for (const char* name : kConfigs) {
    SCOPED_TRACE(name);
    auto model = load(fixture_dir(name), *be);
    ASSERT_TRUE(model);
    const ModelWeights& w = model->weights();
    const std::shared_ptr<Storage>& block = w.embed.storage();
    EXPECT_EQ(block->device().kind, DeviceKind::kCuda);
    EXPECT_EQ(w.arena_bytes, block->bytes());
    size_t aligned = 0;
    for (const Tensor* t : w.tensors()) {
      EXPECT_EQ(t->storage(), block) << t->describe();
      aligned += (t->nbytes() + 255) / 256 * 256;
    }
    EXPECT_EQ(aligned, w.arena_bytes);
  }
}

// 64 greedy steps from a 7-token prompt (71 tokens: across a 64-token K/V block boundary).
TEST(CudaModel, GreedyTokensEqualTheCpuBackend) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = std::move(create_backend("cpu").value());
  for (const char* name : kConfigs) {
    SCOPED_TRACE(name);
    EXPECT_EQ(testing::greedy_tokens(*be, fixture_dir(name), 64), testing::greedy_tokens(*cpu, fixture_dir(name), 64));
  }
}

// Several sequences in one forward (prefill chunks of different lengths, then decode rows) give
// the CPU backend's logits for the same batch.
TEST(CudaModel, BatchedRowsMatchTheCpuBackend) {
  KILN_CUDA_OR_SKIP(be);
  testing::expect_batched_rows_match_cpu(*be, 1e-4);
}

// The CPU reference with the CUDA numerics of a bf16 checkpoint: the K/V cache in kv (bf16 unless
// asked), and (round_gemm_inputs) the cuBLASLt GEMMs' inputs rounded to the weight dtype. The
// oracle for bf16 checkpoints.
testing::CpuWithDeviceNumerics CpuWithCudaNumerics(bool round_gemm_inputs, DType kv = DType::kBF16) {
  testing::CpuWithDeviceNumerics::Options o;
  o.round_gemm_inputs = round_gemm_inputs;
  o.kv = kv;
  return testing::CpuWithDeviceNumerics(o);
}

Tensor prefill_logits(Backend& be, const std::string& dir, const std::vector<int32_t>& prompt) {
  auto m = load(dir, be);
  if (!m) return {};
  auto state = m->create_state({1, 4}).value();
  auto seq = state.new_sequence().value();
  SequenceInput row{&seq, prompt};
  auto logits = m->forward({&row, 1}, LogitsMode::kAll, state);
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  return logits.ok() ? logits.value() : Tensor();
}

// A bf16 checkpoint (the production dtype) against the CPU with the same GEMM input rounding and
// a bf16 K/V cache: 2e-2 relative (a random tiny model amplifies single bf16 rounding flips, which
// f32 reordering causes, to ~6e-3 on the CPU alone), with the delta rule's products in 3xTF32 as
// the CPU's are f32 (KILN_CUDA_GDN_TF32=0). Against the unrounded CPU the same model moves by
// ~0.29: the scale of what bf16 GEMM inputs do to a random-weight model. The delta rule's products
// in one tf32 pass (the default for bf16 checkpoints, GdnArgs::compute) must move the logits by
// less than half that (measured 0.079: tf32 keeps 3 more bits than bf16, and this model amplifies).
// The prefill's norms and silu-mul write their projections' operands in bf16
// (Qwen35Model::operands16): the logits equal, bit for bit, those of f32 activations rounded by
// the GEMMs (tuning().bf16_operands = false).
TEST(CudaModel, Bf16CheckpointMatchesCpuWithRoundedGemmInputsAndBf16Kv) {
  KILN_CUDA_OR_SKIP(be);
  const std::string dir = testing::tiny_checkpoint("cuda-bf16", 7);
  ASSERT_FALSE(dir.empty());
  const ModelConfig cfg = preset_config("tiny").value();
  std::vector<int32_t> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 13 + 5) % cfg.vocab_size);
  testing::CpuWithDeviceNumerics rounded = CpuWithCudaNumerics(true);
  auto cpu = std::move(create_backend("cpu").value());
  const Tensor tf32 = prefill_logits(*be, dir, prompt);
  cuda::tuning().gdn_tf32 = false;
  const Tensor lg = prefill_logits(*be, dir, prompt);
  cuda::tuning().bf16_operands = false;
  const Tensor lf = prefill_logits(*be, dir, prompt);
  cuda::tuning().bf16_operands = cuda::tuning().gdn_tf32 = true;
  const Tensor lr = prefill_logits(rounded, dir, prompt);
  const Tensor lc = prefill_logits(*cpu, dir, prompt);
  ASSERT_TRUE(tf32.defined() && lg.defined() && lr.defined() && lc.defined() && lf.defined());
  EXPECT_EQ(testing::rel_error(lg, lf), 0.0) << "the bf16 operands changed the logits";
  const double e = testing::rel_error(lg, lr), bf16_inputs = testing::rel_error(lg, lc);
  const double tf32_products = testing::rel_error(tf32, lg);
  EXPECT_LE(e, 2e-2);
  EXPECT_GT(tf32_products, 0.0) << "one tf32 pass gave 3xTF32's bits: did it run?";
  EXPECT_LE(tf32_products, 0.5 * bf16_inputs);
  std::printf("bf16 tiny checkpoint: max rel error vs cpu with bf16 gemm inputs and K/V %.3g (vs plain cpu %.3g); "
              "the delta rule's products in one tf32 pass move the logits by %.3g\n",
              e, bf16_inputs, tf32_products);
  std::filesystem::remove_all(dir);
}

// The fused GDN decode step (one kernel for conv, delta rule and gated norm) gives the logits of
// the three separate calls, over a prefill (chunked kernel) and 8 decode steps.
TEST(CudaModel, FusedGdnDecodeEqualsSeparateSteps) {
  KILN_CUDA_OR_SKIP(be);
  const cuda::Tuning saved = cuda::tuning();
  const char* name = "tied_dk_ne_dv";
  std::vector<int32_t> prompt(70);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 31 + 3) % 250);
  std::vector<Tensor> logits[2];
  for (int fused = 0; fused < 2; ++fused) {
    cuda::tuning().gdn_fused_decode = fused == 1;
    auto model = load(fixture_dir(name), *be);
    ASSERT_TRUE(model);
    auto state = model->create_state({1, 4}).value();
    auto seq = state.new_sequence().value();
    SequenceInput row{&seq, prompt};
    ASSERT_TRUE(model->forward({&row, 1}, LogitsMode::kLast, state).ok());
    for (int step = 0; step < 8; ++step) {
      int32_t tok = 17 + step;
      SequenceInput one{&seq, {&tok, 1}};
      auto l = model->forward({&one, 1}, LogitsMode::kLast, state);
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      logits[fused].push_back(l.value());
    }
  }
  cuda::tuning() = saved;
  double worst = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) worst = std::max(worst, testing::rel_error(logits[1][i], logits[0][i]));
  EXPECT_LE(worst, 1e-5);
  std::printf("fused vs separate gdn decode: max rel error %.3g over 8 steps\n", worst);
}

// Logits of `steps` decode steps from an empty sequence (one token a step), on model m.
std::vector<Tensor> decode_steps(Qwen35Model& m, int steps) {
  std::vector<Tensor> out;
  auto state = m.create_state({1, 4}).value();
  auto seq = state.new_sequence().value();
  const int64_t vocab = m.config().vocab_size;
  for (int step = 0; step < steps; ++step) {
    int32_t tok = static_cast<int32_t>((step * 41 + 7) % vocab);
    SequenceInput row{&seq, {&tok, 1}};
    auto l = m.forward({&row, 1}, LogitsMode::kLast, state);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    if (!l.ok()) return {};
    out.push_back(l.value());
  }
  return out;
}

double worst_rel_error(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  if (got.size() != want.size() || got.empty()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, testing::rel_error(got[i], want[i]));
  return worst;
}

// Decode steps of 16 rows (above the GEMV's m, so cuBLASLt): the norms and silu-mul write the
// projections' operands in bf16 there too, and the logits equal, bit for bit, those of f32
// activations rounded by the GEMMs (tuning().bf16_operands = false).
TEST(CudaModel, Bf16OperandsOfABatchedDecodeStepGiveTheSameLogits) {
  KILN_CUDA_OR_SKIP(be);
  const std::string dir = testing::tiny_checkpoint("cuda-bf16-batched", 13);
  ASSERT_FALSE(dir.empty());
  const int rows = 16;
  std::vector<Tensor> logits[2];
  // The same kernel for both operand dtypes: by the H200's crossovers, not timed per operand dtype.
  const bool autotune = cuda::tuning().gemm_autotune;
  cuda::tuning().gemm_autotune = false;
  for (int on = 0; on < 2; ++on) {
    cuda::tuning().bf16_operands = on == 1;
    auto m = load(dir, *be);
    ASSERT_TRUE(m);
    auto state = m->create_state({rows, 2 * rows}).value();
    std::vector<SequenceState> seqs;
    for (int r = 0; r < rows; ++r) seqs.push_back(state.new_sequence().value());
    const int64_t vocab = m->config().vocab_size;
    std::vector<int32_t> toks(rows);
    for (int step = 0; step < 4; ++step) {
      std::vector<SequenceInput> in;
      for (int r = 0; r < rows; ++r) {
        toks[r] = static_cast<int32_t>((r * 97 + step * 41 + 7) % vocab);
        in.push_back({&seqs[r], {&toks[r], 1}});
      }
      auto l = m->forward(in, LogitsMode::kLast, state);
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      logits[on].push_back(l.value());
    }
  }
  cuda::tuning().gemm_autotune = autotune;
  cuda::tuning().bf16_operands = true;
  EXPECT_EQ(worst_rel_error(logits[1], logits[0]), 0.0);
  std::filesystem::remove_all(dir);
}

// A bf16 checkpoint decoded token by token from an empty sequence: every GEMM has m = 1 and runs
// on the GEMV kernel, which does not round x, so the logits follow the CPU backend with only its
// K/V cache in bf16 (the cuBLASLt path with x rounded to bf16 moves this random model by ~0.2).
// The state's K/V is bf16: Qwen35Model::kv_dtype for a bf16 checkpoint on CUDA. With
// set_kv_dtype(f8e4m3) (memory.kv_cache_fp8) the state keeps e4m3 and the logits follow the CPU
// with its K/V rounded to e4m3; what e4m3 does to the logits against bf16 K/V is printed.
TEST(CudaModel, Bf16DecodeOnTheGemvKernelMatchesTheCpuWithBf16OrE4m3Kv) {
  KILN_CUDA_OR_SKIP(be);
  const std::string dir = testing::tiny_checkpoint("cuda-bf16-gemv", 11);
  ASSERT_FALSE(dir.empty());
  const ModelConfig cfg = preset_config("tiny").value();
  testing::CpuWithDeviceNumerics cpu = CpuWithCudaNumerics(false), cpu8 = CpuWithCudaNumerics(false, DType::kF8E4M3);
  auto mc = load(dir, cpu);
  auto mc8 = load(dir, cpu8);
  auto mg = load(dir, *be);
  auto mg8 = load(dir, *be);
  ASSERT_TRUE(mc && mc8 && mg && mg8);
  ASSERT_TRUE(mg8->set_kv_dtype(DType::kF8E4M3).ok());
  EXPECT_EQ(mg->kv_dtype(), DType::kBF16);
  EXPECT_EQ(mg8->kv_dtype(), DType::kF8E4M3);
  EXPECT_EQ(mc->kv_dtype(), DType::kF32);
  {
    auto sg = mg->create_state({1, 4}).value();
    auto sg8 = mg8->create_state({1, 4}).value();
    for (int64_t i = 0; i < cfg.num_layers; ++i)
      if (cfg.layer_types[i] == LayerKind::kFullAttention) {
        EXPECT_EQ(sg.k_cache(i).dtype(), DType::kBF16) << i;
        EXPECT_EQ(sg8.v_cache(i).dtype(), DType::kF8E4M3) << i;
      }
  }
  // The GEMV by the H200's crossovers (m = 1), not by timing: on these tiny shapes cuBLASLt could
  // time as fast, and it rounds x.
  const cuda::Tuning saved = cuda::tuning();
  cuda::tuning().gemm_autotune = false;
  const std::vector<Tensor> lg = decode_steps(*mg, 12), lg8 = decode_steps(*mg8, 12);
  cuda::tuning() = saved;
  const double bf16 = worst_rel_error(lg, decode_steps(*mc, 12));
  const double e4m3 = worst_rel_error(lg8, decode_steps(*mc8, 12));
  const double effect = worst_rel_error(lg8, lg);
  EXPECT_LE(bf16, 1e-3);
  EXPECT_LE(e4m3, 1e-3);
  EXPECT_GT(effect, 10 * e4m3) << "e4m3 K/V moved the logits no more than the kernels' own error";
  std::printf("bf16 tiny checkpoint, decode on the gemv kernel: max rel error vs cpu with bf16 K/V %.3g; "
              "e4m3 K/V vs cpu with e4m3 K/V %.3g; e4m3 K/V vs bf16 K/V %.3g\n",
              bf16, e4m3, effect);
  std::filesystem::remove_all(dir);
}

// set_kv_dtype names the dtypes the backend keeps when asked for one it does not.
TEST(CudaModel, KvDtypeTheBackendLacksIsRefusedByName) {
  KILN_CUDA_OR_SKIP(be);
  auto m = load(fixture_dir("gqa_untied"), *be);
  ASSERT_TRUE(m);
  const Status s = m->set_kv_dtype(DType::kF16);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("K/V cache dtype f16"), std::string::npos) << s.to_string();
  EXPECT_NE(s.to_string().find("f8e4m3"), std::string::npos) << s.to_string();
  EXPECT_EQ(m->kv_dtype(), DType::kF32);
}

}  // namespace
}  // namespace kiln
