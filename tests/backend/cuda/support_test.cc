// A CUDA support predicate that says yes must not be contradicted by its method, and a request it
// declines must be refused by the method with kUnsupported naming the request. Also: the
// capabilities come from the device, and the policy is strict.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "backend/fallback.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/tuning.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::to_device;

template <typename Run>
void expect_agreement(const Support& s, Run run, const std::string& request) {
  Status st = run();
  if (s.runs_natively()) {
    EXPECT_TRUE(st.ok()) << request << ": " << st.to_string();
  } else {
    EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << request << ": " << st.to_string();
    EXPECT_NE(st.message().find(request), std::string::npos) << st.message();
    EXPECT_FALSE(s.constraint.empty());
  }
}

TEST(CudaSupport, MatmulPredicateAgreesWithMethod) {
  KILN_CUDA_OR_SKIP(be);
  struct Case {
    DType x, w;
  } cases[] = {{DType::kF32, DType::kF32}, {DType::kF32, DType::kBF16}, {DType::kF32, DType::kF16},
               {DType::kBF16, DType::kBF16}, {DType::kF32, DType::kI32}};
  for (const auto& c : cases) {
    Tensor x = to_device(*be, random_tensor({2, 8}, 1, 1.f, c.x));
    Tensor w = c.w == DType::kI32 ? be->storage().allocate({4, 8}, DType::kI32).value()
                                  : to_device(*be, random_tensor({4, 8}, 2, 1.f, c.w));
    Tensor y = be->storage().allocate({2, 4}, DType::kF32).value();
    MatmulArgs a{x, w, y};
    expect_agreement(be->linear().supports(describe(a)), [&] { return be->linear().matmul(a); }, describe(a).describe());
  }
}

TEST(CudaSupport, ConvGdnAndAttentionPredicatesAgreeWithMethods) {
  KILN_CUDA_OR_SKIP(be);
  HostBatchLayout h;
  h.add_row(0, 3, {0}, 0);
  BatchLayout l = make_batch_layout(h, be->storage()).value();
  StorageFacet& s = be->storage();
  // Conv: kernel 4 runs, kernel 9 is beyond the register window.
  for (int64_t K : {4, 9}) {
    ConvArgs a{s.allocate({3, 16}, DType::kF32).value(), s.allocate({16, K}, DType::kF32).value(),
               s.allocate({1, K - 1, 16}, DType::kF32).value(), s.allocate({3, 16}, DType::kF32).value(), &l};
    expect_agreement(be->conv().supports(describe(a)), [&] { return be->conv().causal_conv1d(a); },
                     describe(a).describe());
  }
  // GDN: both forms run (the chunked one with its constraint stated); 3 key heads for 4 value
  // heads do not divide.
  for (auto [form, hk] : {std::pair{GdnForm::kRecurrent, 2}, std::pair{GdnForm::kChunked, 2},
                          std::pair{GdnForm::kChunked, 3}}) {
    GdnArgs a;
    a.form = form;
    a.q = s.allocate({3, hk, 8}, DType::kF32).value();
    a.k = s.allocate({3, hk, 8}, DType::kF32).value();
    a.v = s.allocate({3, 4, 8}, DType::kF32).value();
    a.a = s.allocate({3, 4}, DType::kF32).value();
    a.b = s.allocate({3, 4}, DType::kF32).value();
    a.a_log = s.allocate({4}, DType::kF32).value();
    a.dt_bias = s.allocate({4}, DType::kF32).value();
    a.state = s.allocate({1, 4, 8, 8}, DType::kF32).value();
    a.out = s.allocate({3, 4, 8}, DType::kF32).value();
    a.layout = &l;
    Support sup = be->gdn().supports(describe(a));
    if (form == GdnForm::kChunked && hk == 2) {
      EXPECT_EQ(sup.state, SupportState::kNativeWithConstraints);
      EXPECT_NE(sup.constraint.find("recurrent kernel"), std::string::npos);
    }
    expect_agreement(sup, [&] { return be->gdn().delta_rule(a); }, describe(a).describe());
  }
  // GDN chunked with dk = 16: the chunked kernel, natively at chunk 64, constrained otherwise.
  for (int chunk : {64, 16}) {
    GdnArgs a;
    a.form = GdnForm::kChunked;
    a.chunk = chunk;
    a.q = s.allocate({3, 2, 16}, DType::kF32).value();
    a.k = s.allocate({3, 2, 16}, DType::kF32).value();
    a.v = s.allocate({3, 4, 8}, DType::kF32).value();
    a.a = s.allocate({3, 4}, DType::kF32).value();
    a.b = s.allocate({3, 4}, DType::kF32).value();
    a.a_log = s.allocate({4}, DType::kF32).value();
    a.dt_bias = s.allocate({4}, DType::kF32).value();
    a.state = s.allocate({1, 4, 16, 8}, DType::kF32).value();
    a.out = s.allocate({3, 4, 8}, DType::kF32).value();
    a.layout = &l;
    Support sup = be->gdn().supports(describe(a));
    EXPECT_EQ(sup.state, chunk == 64 ? SupportState::kNative : SupportState::kNativeWithConstraints);
    expect_agreement(sup, [&] { return be->gdn().delta_rule(a); }, describe(a).describe());
  }
  // The fused GDN decode: runs for 2 key heads over 4 value heads, declined for 3 over 4 and when
  // switched off.
  for (auto [hk, on] : {std::pair{2, true}, std::pair{3, true}, std::pair{2, false}}) {
    const cuda::Tuning saved = cuda::tuning();
    cuda::tuning().gdn_fused_decode = on;
    const int64_t C = 2 * hk * 8 + 4 * 8;
    GdnDecodeArgs a{s.allocate({3, C}, DType::kF32).value(), s.allocate({C, 4}, DType::kF32).value(),
                    s.allocate({1, 3, C}, DType::kF32).value(), s.allocate({3, 4, 8}, DType::kF32).value(),
                    s.allocate({3, 4}, DType::kF32).value(), s.allocate({3, 4}, DType::kF32).value(),
                    s.allocate({4}, DType::kF32).value(), s.allocate({4}, DType::kF32).value(),
                    s.allocate({1, 4, 8, 8}, DType::kF32).value(), s.allocate({8}, DType::kF32).value(),
                    s.allocate({3, 4, 8}, DType::kF32).value(), hk, 8, 1e-6f, &l};
    Support sup = be->gdn().supports(describe(a));
    EXPECT_EQ(sup.runs_natively(), hk == 2 && on);
    expect_agreement(sup, [&] { return be->gdn().fused_decode(a); }, describe(a).describe());
    cuda::tuning() = saved;
  }
  // Attention: GQA 4/2 runs; 6 query heads over 4 KV heads do not group.
  for (int64_t hq : {4, 6}) {
    Tensor kc = s.allocate({1, 64, hq == 4 ? 2 : 4, 16}, DType::kF32).value();
    Tensor vc = s.allocate({1, 64, hq == 4 ? 2 : 4, 16}, DType::kF32).value();
    AttentionArgs a{s.allocate({3, hq, 16}, DType::kF32).value(), Tensor(), s.allocate({3, hq, 16}, DType::kF32).value(),
                    kc, vc, &l, 0.25f};
    expect_agreement(be->attention().supports(describe(a)), [&] { return be->attention().attend(a); },
                     describe(a).describe());
  }
  // RoPE: an odd rotary_dim is declined.
  for (int64_t rot : {8, 5}) {
    RopeArgs a{s.allocate({3, 2, 16}, DType::kF32).value(), s.allocate({3, 1, 16}, DType::kF32).value(), l.positions,
               rot, 1e4f};
    expect_agreement(be->attention().supports(describe(a)), [&] { return be->attention().rope(a); },
                     describe(a).describe());
  }
  // Sampling: greedy and sampled rows run natively; a vocabulary whose penalty bitmap does not
  // fit the sampling kernel's shared memory is declined, naming the vocabulary.
  EXPECT_TRUE(be->sampling().supports(SampleRequest{1, 10, false}).runs_natively());
  EXPECT_TRUE(be->sampling().supports(SampleRequest{64, 248320, false}).runs_natively());
  const Support huge = be->sampling().supports(SampleRequest{1, int64_t{1} << 30, false});
  EXPECT_EQ(huge.state, SupportState::kDeclined);
  EXPECT_NE(huge.constraint.find("vocab"), std::string::npos) << huge.constraint;
}

TEST(CudaSupport, CapabilitiesComeFromTheDeviceAndThePolicyIsStrict) {
  KILN_CUDA_OR_SKIP(be);
  const BackendCapabilities& c = be->capabilities();
  EXPECT_EQ(be->identity().name, "cuda");
  EXPECT_EQ(be->identity().device.kind, DeviceKind::kCuda);
  EXPECT_GT(c.storage.device_memory_bytes, uint64_t{1} << 30);
  EXPECT_NE(be->identity().device_name.find("SMs"), std::string::npos);
  // The compute capability, shared memory, SM count and memory are the runtime's own answers for
  // device 0, the first two narrowed to the emulated device's under KILN_CUDA_TARGET.
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  const cuda::DeviceTarget& t = cuda::device_target();
  EXPECT_EQ(t.device_major, p.major);
  EXPECT_EQ(t.device_minor, p.minor);
  if (t.emulated.empty()) {
    EXPECT_EQ(t.major, p.major);
    EXPECT_EQ(t.minor, p.minor);
    EXPECT_EQ(t.shared_optin, static_cast<int64_t>(p.sharedMemPerBlockOptin));
  } else {
    EXPECT_LT(t.shared_optin, static_cast<int64_t>(p.sharedMemPerBlockOptin));
    EXPECT_FALSE(t.sm90_features);
  }
  EXPECT_EQ(c.compute.capability, std::to_string(t.major) + "." + std::to_string(t.minor));
  EXPECT_EQ(c.compute.shared_memory_per_block, t.shared_optin);
  EXPECT_EQ(c.compute.target, t.label());
  EXPECT_EQ(c.compute.multiprocessors, p.multiProcessorCount);
  EXPECT_FALSE(c.kernels.empty());
  for (const auto& [op, family] : c.kernels) std::printf("kernel: %s -> %s\n", op.c_str(), family.c_str());
  EXPECT_EQ(c.storage.device_memory_bytes, p.totalGlobalMem);
  EXPECT_EQ(c.fallback.generic_op, FallbackMode::kStrict);
  EXPECT_EQ(c.fallback.decode_hot_path, FallbackMode::kNativeRequired);
  EXPECT_EQ(c.fallback.training_optimizer, FallbackMode::kNativeRequired);
  EXPECT_TRUE(c.matmul.algorithm_cache);
  // A decline under this policy is an error, never a counted host trip.
  Support declined = Support::declined("test");
  auto r = resolve_fallback(c.fallback, "cuda", OpClass::kGenericOp, 1, declined, "op");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(FallbackCounters::global().total("cuda"), 0u);
  std::printf("device: %s\n", be->identity().device_name.c_str());
}

// The backend starts only on a device this build has code for: the present one passes the check
// it makes at start; a device below compute capability 8.0 is refused naming itself and the limit.
TEST(CudaSupport, TheDeviceCodeCheckPassesHereAndRefusesDevicesBelow80) {
  KILN_CUDA_OR_SKIP(be);
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  const Status here = cuda::check_device_code(p.name, p.major, p.minor);
  EXPECT_TRUE(here.ok()) << here.to_string() << " (compiled for " << cuda::compiled_architectures() << ")";
  const Status old = cuda::check_device_code("Tesla T4", 7, 5);
  EXPECT_EQ(old.code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(old.message(), "CUDA device Tesla T4 (compute capability 7.5) is older than compute capability 8.0, the oldest Kiln runs on");
}

TEST(CudaSupport, HostTensorsAreRefusedByDeviceKernels) {
  KILN_CUDA_OR_SKIP(be);
  Tensor x = random_tensor({2, 8}, 1), w = random_tensor({4, 8}, 2), y = Tensor::empty({2, 4}, DType::kF32);
  Status s = be->linear().matmul({x, w, y});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not cuda"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kiln
