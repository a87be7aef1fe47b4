// cuda_kernel_bench: each CUDA kernel variant against the one it replaced, on the Qwen3.5-4B
// shapes, through the facets (switched with cuda::tuning()). Not a test: it prints one line per
// measurement (median of 5 timed batches after a warm-up; each batch synchronises once) and the
// effective bandwidth where the kernel is memory-bound. Weights rotate over enough copies to
// exceed the L2 cache, as in a decode step. "default" is what the facet runs with every switch
// on (the GEMV kernel where gemv_beats_cublaslt says so). Usage:
// cuda_kernel_bench [gemv[:m]|gemm[:m]|gemv_rows|skinny_splits|gdn[:rows]|gdn_backward|conv|attention]...
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/tuning.h"
#include "backend/registry.h"
#include "core/dtype.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

// A device tensor of pseudo-random values in [-0.5, 0.5) * scale (no zeros: they can run faster).
Tensor filled(Backend& be, Shape shape, DType dt, float scale = 1.f, uint32_t seed = 1) {
  const int64_t n = shape.numel(), chunk = std::min<int64_t>(n, int64_t{1} << 22);
  Tensor dev = be.storage().allocate(shape, dt).value();
  Tensor host = Tensor::empty({chunk}, dt);
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < chunk; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = (static_cast<float>(s >> 8) / 16777216.f - 0.5f) * scale;
    if (dt == DType::kF32) host.data<float>()[i] = v;
    else if (dt == DType::kBF16) host.data<uint16_t>()[i] = f32_to_bf16(v);
    else if (dt == DType::kF16) host.data<uint16_t>()[i] = f32_to_f16(v);
  }
  Tensor flat = dev.as_strided({n}, {1});
  for (int64_t o = 0; o < n; o += chunk) {
    const int64_t len = std::min(chunk, n - o);
    Status st = be.storage().copy_from_host(host.slice(0, 0, len), flat.slice(0, o, o + len));
    if (!st.ok()) std::fprintf(stderr, "fill: %s\n", st.to_string().c_str());
  }
  return dev;
}

// Microseconds per call: median of 5 batches, each of `reps` calls and one synchronisation.
double time_us(Backend& be, const std::function<Status()>& f) {
  for (int i = 0; i < 2; ++i) {
    Status s = f();
    if (!s.ok()) {
      std::fprintf(stderr, "bench: %s\n", s.to_string().c_str());
      return -1;
    }
  }
  (void)be.storage().synchronize();
  auto t0 = Clock::now();
  (void)f();
  (void)be.storage().synchronize();
  const double once = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const int reps = static_cast<int>(std::clamp(3000.0 / std::max(once, 1.0), 3.0, 200.0));
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    t0 = Clock::now();
    for (int i = 0; i < reps; ++i) (void)f();
    (void)be.storage().synchronize();
    batches.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps);
  }
  std::sort(batches.begin(), batches.end());
  return batches[2];
}

HostBatchLayout one_row_per_sequence(const std::vector<int64_t>& past, const std::vector<int64_t>& n) {
  HostBatchLayout h;
  h.block_size = 64;
  int32_t next = 0;
  for (size_t i = 0; i < past.size(); ++i) {
    const int64_t need = (past[i] + n[i] + 63) / 64;
    std::vector<int32_t> blocks(need);
    std::iota(blocks.begin(), blocks.end(), next);
    next += static_cast<int32_t>(need);
    h.add_row(past[i], n[i], blocks, static_cast<int32_t>(i));
  }
  return h;
}

// Copies of a bf16 [n, k] weight, enough to exceed the L2 cache (256 MB, at most 64), so that
// calls rotating over them stream the weight from memory as a decode step does.
std::vector<Tensor> weight_copies(Backend& be, int64_t n, int64_t k) {
  const int copies = static_cast<int>(std::clamp(std::ceil(256e6 / (2.0 * n * k)), 1.0, 64.0));
  std::vector<Tensor> ws;
  for (int c = 0; c < copies; ++c) ws.push_back(filled(be, {n, k}, DType::kBF16, 0.05f, 10 + c));
  return ws;
}

// m = 1..8 with f32 x: the default path (the GEMV where gemv_beats_cublaslt says so), the
// skinny tensor-core GEMM alone, and cuBLASLt (x rounded).
void bench_gemv(Backend& be, int64_t only_m) {
  const cuda::Tuning saved = cuda::tuning();
  struct Shape2 {
    const char* what;
    int64_t n, k;
  } shapes[] = {{"in_proj_qkv, q_proj", 8192, 2560}, {"in_proj_z", 4096, 2560}, {"in_proj_a/b", 64, 2560},
                {"k_proj/v_proj", 1024, 2560},       {"out_proj/o_proj", 2560, 4096}, {"gate/up", 9216, 2560},
                {"down", 2560, 9216},                {"lm_head", 248320, 2560}};
  for (const auto& sh : shapes) {
    const double bytes = 2.0 * sh.n * sh.k;
    const std::vector<Tensor> ws = weight_copies(be, sh.n, sh.k);
    for (int64_t m : {1, 2, 4, 8}) {
      if (only_m > 0 && m != only_m) continue;
      Tensor x = filled(be, {m, sh.k}, DType::kF32, 1.f, 3);
      Tensor y = be.storage().allocate({m, sh.n}, DType::kF32).value();
      double us[3];
      for (int g = 0; g < 3; ++g) {  // default (the skinny GEMM where it measured faster), skinny alone, cuBLASLt alone
        cuda::tuning().gemv = g == 0;
        cuda::tuning().skinny = g < 2;
        cuda::tuning().skinny_everywhere = g == 1;
        size_t i = 0;
        us[g] = time_us(be, [&] { return be.linear().matmul({x, ws[i++ % ws.size()], y}); });
      }
      cuda::tuning() = saved;
      std::printf("gemv  %-20s m=%lld n=%6lld k=%5lld  default %8.2f us (%6.0f GB/s)  skinny %8.2f us (%6.0f GB/s)  "
                  "cublaslt+round %8.2f us (%6.0f GB/s)\n",
                  sh.what, (long long)m, (long long)sh.n, (long long)sh.k, us[0], bytes / us[0] * 1e-3, us[1],
                  bytes / us[1] * 1e-3, us[2], bytes / us[2] * 1e-3);
    }
  }
}

// Decode-sized GEMMs (m = 3..128), each projection of the 4B shape alone, x in f32 (rounded by
// the GEMM) and in bf16 (written so by its producer): the default path, the skinny tensor-core
// GEMM alone (up to 64 rows) in each form (wgmma, mma.sync) and cuBLASLt alone (algorithm timed
// on first use unless KILN_CUDA_GEMM_AUTOTUNE=0). Bandwidth counts the weight bytes. Back-to-back
// calls without a graph: the small shapes include host time, and with PDL (the default) a skinny
// call's weight prefetch overlaps the previous call, which flatters it against cuBLASLt (no PDL);
// KILN_CUDA_PDL=0 times each call alone (docs/decisions.md, "The skinny GEMM takes 9-16 rows, not 64").
void bench_gemm(Backend& be, int64_t only_m) {
  const cuda::Tuning saved = cuda::tuning();
  struct Shape2 {
    const char* what;
    int64_t n, k;
  } shapes[] = {{"in_proj_qkv, q_proj", 8192, 2560}, {"in_proj_z", 4096, 2560}, {"in_proj_a/b", 64, 2560},
                {"k_proj/v_proj", 1024, 2560},       {"out_proj/o_proj", 2560, 4096}, {"gate/up", 9216, 2560},
                {"down", 2560, 9216},                {"lm_head", 248320, 2560}};
  for (const auto& sh : shapes) {
    const double bytes = 2.0 * sh.n * sh.k;
    const std::vector<Tensor> ws = weight_copies(be, sh.n, sh.k);
    for (int64_t m : {3, 8, 16, 32, 64, 128}) {
      if (only_m > 0 && m != only_m) continue;
      Tensor y = be.storage().allocate({m, sh.n}, DType::kF32).value();
      for (DType xd : {DType::kF32, DType::kBF16}) {
        if (xd == DType::kBF16 && m <= 8) continue;  // the GEMV's rows: f32 x only
        Tensor x = filled(be, {m, sh.k}, xd, 1.f, 3);
        double us[4];
        for (int v = 0; v < 4; ++v) {  // the default, the skinny GEMM alone in each form, cuBLASLt alone
          cuda::tuning().skinny = v < 3;
          cuda::tuning().skinny_everywhere = v == 1 || v == 2;
          if (v > 0) cuda::tuning().skinny_wgmma = v == 1;
          size_t i = 0;
          us[v] = time_us(be, [&] { return be.linear().matmul({x, ws[i++ % ws.size()], y}); });
        }
        cuda::tuning() = saved;
        std::printf("gemm  %-16s m=%4lld n=%6lld k=%5lld x=%-4s  default %7.2f us (%4.0f GB/s)  wgmma %7.2f us (%4.0f GB/s)  "
                    "mma.sync %7.2f us (%4.0f GB/s)  cublaslt %7.2f us (%4.0f GB/s)\n",
                    sh.what, (long long)m, (long long)sh.n, (long long)sh.k, std::string(dtype_name(xd)).c_str(),
                    us[0], bytes / us[0] * 1e-3, us[1], bytes / us[1] * 1e-3, us[2], bytes / us[2] * 1e-3, us[3],
                    bytes / us[3] * 1e-3);
      }
    }
  }
}

void bench_gdn(Backend& be, int64_t only_rows) {
  const int64_t hk = 16, hv = 32, dk = 128, dv = 128, C = 2 * hk * dk + hv * dv, K = 4;
  // Prefill: one sequence of T tokens, chunked vs recurrent.
  for (int64_t T : {512, 2048, 4096}) {
    if (only_rows > 0) break;
    HostBatchLayout h = one_row_per_sequence({0}, {T});
    BatchLayout l = make_batch_layout(h, be.storage()).value();
    Tensor mixed = filled(be, {T, C}, DType::kF32);
    Tensor a = filled(be, {T, hv}, DType::kF32), b = filled(be, {T, hv}, DType::kF32);
    Tensor a_log = filled(be, {hv}, DType::kF32, 0.5f), dtb = filled(be, {hv}, DType::kF32);
    Tensor state = filled(be, {1, hv, dk, dv}, DType::kF32, 0.1f);
    Tensor out = be.storage().allocate({T, hv, dv}, DType::kF32).value();
    GdnArgs g;
    g.form = GdnForm::kChunked;
    g.q = mixed.as_strided({T, hk, dk}, {C, dk, 1});
    g.k = mixed.as_strided({T, hk, dk}, {C, dk, 1}, hk * dk);
    g.v = mixed.as_strided({T, hv, dv}, {C, dv, 1}, 2 * hk * dk);
    g.a = a;
    g.b = b;
    g.a_log = a_log;
    g.dt_bias = dtb;
    g.state = state;
    g.out = out;
    g.layout = &l;
    const double chunked = time_us(be, [&] { return be.gdn().delta_rule(g); });
    g.compute = DType::kBF16;  // a bf16 checkpoint's: products in one tf32 pass
    const double tf32 = time_us(be, [&] { return be.gdn().delta_rule(g); });
    g.compute = DType::kF32;
    g.form = GdnForm::kRecurrent;
    const double recurrent = time_us(be, [&] { return be.gdn().delta_rule(g); });
    std::printf("gdn   prefill T=%lld (4B layer)  chunked %8.1f us (tf32 products %8.1f us)  recurrent %9.1f us  (%.1fx)\n",
                (long long)T, chunked, tf32, recurrent, recurrent / chunked);
  }
  // Decode: fused step vs conv + recurrent rule + gated norm, rows of one token.
  for (int64_t R : {1, 8, 32, 64, 128}) {
    if (only_rows > 0 && R != only_rows) continue;
    std::vector<int64_t> past(R, 600), n(R, 1);
    HostBatchLayout h = one_row_per_sequence(past, n);
    BatchLayout l = make_batch_layout(h, be.storage()).value();
    Tensor mixed = filled(be, {R, C}, DType::kF32), conv = be.storage().allocate({R, C}, DType::kF32).value();
    Tensor cw = filled(be, {C, K}, DType::kF32, 0.5f), cst = filled(be, {R, K - 1, C}, DType::kF32);
    Tensor z = filled(be, {R, hv, dv}, DType::kF32), a = filled(be, {R, hv}, DType::kF32);
    Tensor b = filled(be, {R, hv}, DType::kF32), a_log = filled(be, {hv}, DType::kF32, 0.5f);
    Tensor dtb = filled(be, {hv}, DType::kF32), nw = filled(be, {dv}, DType::kF32);
    Tensor state = filled(be, {R, hv, dk, dv}, DType::kF32, 0.1f);
    Tensor core = be.storage().allocate({R, hv, dv}, DType::kF32).value();
    Tensor out = be.storage().allocate({R, hv, dv}, DType::kF32).value();
    GdnDecodeArgs d{mixed, cw, cst, z, a, b, a_log, dtb, state, nw, out, hk, dk, 1e-6f, &l};
    double staged[4];  // one kernel; the split state kernel with 1, 2 and 3 stages
    for (int s = 0; s <= 3; ++s) {
      cuda::tuning().gdn_decode_form = s;
      staged[s] = time_us(be, [&] { return be.gdn().fused_decode(d); });
    }
    cuda::tuning().gdn_decode_form = -1;
    const double fused = *std::min_element(staged, staged + 4);
    GdnArgs g;
    g.form = GdnForm::kRecurrent;
    g.q = conv.as_strided({R, hk, dk}, {C, dk, 1});
    g.k = conv.as_strided({R, hk, dk}, {C, dk, 1}, hk * dk);
    g.v = conv.as_strided({R, hv, dv}, {C, dv, 1}, 2 * hk * dk);
    g.a = a;
    g.b = b;
    g.a_log = a_log;
    g.dt_bias = dtb;
    g.state = state;
    g.out = core;
    g.layout = &l;
    const double separate = time_us(be, [&]() -> Status {
      KILN_RETURN_IF_ERROR(be.conv().causal_conv1d({mixed, cw, cst, conv, &l}));
      KILN_RETURN_IF_ERROR(be.gdn().delta_rule(g));
      return be.norm().rms_norm({NormKind::kGated, core.reshape({R * hv, dv}), {}, nw, z.reshape({R * hv, dv}),
                                 out.reshape({R * hv, dv}), 1e-6f});
    });
    const double state_bytes = 2.0 * R * hv * dk * dv * 4;
    std::printf("gdn   decode rows=%-3lld (4B layer)  fused %8.2f us (%5.0f GB/s of state)  one kernel %8.2f  split "
                "stages 1/2/3 %8.2f %8.2f %8.2f us  conv+recurrent+norm %8.2f us\n",
                (long long)R, fused, state_bytes / fused * 1e-3, staged[0], staged[1], staged[2], staged[3], separate);
  }
}

// Training's GDN backward on a 4B layer: 4 rows of 1024 tokens (kiln bench train's shape), the
// register walk against the chunked form.
void bench_gdn_backward(Backend& be) {
  const int64_t hk = 16, hv = 32, dk = 128, dv = 128, C = 2 * hk * dk + hv * dv, R = 4, N = 1024, T = R * N;
  HostBatchLayout h = one_row_per_sequence(std::vector<int64_t>(R, 0), std::vector<int64_t>(R, N));
  BatchLayout l = make_batch_layout(h, be.storage()).value();
  Tensor qkv = filled(be, {T, C}, DType::kF32), ab = filled(be, {T, 2 * hv}, DType::kF32);
  Tensor a_log = filled(be, {hv}, DType::kF32, 0.5f), dtb = filled(be, {hv}, DType::kF32);
  Tensor dout = filled(be, {T, hv, dv}, DType::kF32, 1.f, 5);
  Tensor dqkv = be.storage().allocate({T, C}, DType::kF32).value();
  Tensor dab = be.storage().allocate({T, 2 * hv}, DType::kF32).value();
  GdnBackwardArgs g;
  g.chunk = 64;
  g.q = qkv.as_strided({T, hk, dk}, {C, dk, 1});
  g.k = qkv.as_strided({T, hk, dk}, {C, dk, 1}, hk * dk);
  g.v = qkv.as_strided({T, hv, dv}, {C, dv, 1}, 2 * hk * dk);
  g.a = ab.as_strided({T, hv}, {2 * hv, 1});
  g.b = ab.as_strided({T, hv}, {2 * hv, 1}, hv);
  g.a_log = a_log;
  g.dt_bias = dtb;
  g.dout = dout;
  g.dq = dqkv.as_strided({T, hk, dk}, {C, dk, 1});
  g.dk = dqkv.as_strided({T, hk, dk}, {C, dk, 1}, hk * dk);
  g.dv = dqkv.as_strided({T, hv, dv}, {C, dv, 1}, 2 * hk * dk);
  g.da = dab.as_strided({T, hv}, {2 * hv, 1});
  g.db = dab.as_strided({T, hv}, {2 * hv, 1}, hv);
  g.layout = &l;
  double us[2];
  for (int v = 0; v < 2; ++v) {
    cuda::tuning().gdn_backward_registers = v == 0;
    us[v] = time_us(be, [&] { return be.training().gdn_backward(g); });
  }
  cuda::tuning().gdn_backward_registers = false;
  std::printf("gdn   backward rows=%lld x %lld tokens (4B layer)  registers %9.1f us  chunked %9.1f us\n",
              (long long)R, (long long)N, us[0], us[1]);
}

// The 4B attention layer's backward over rows x N tokens (gated, bf16 products allowed): the
// flash form from the forward's log-sum-exps against the TF32 GEMMs over whole score rows. FLOPs:
// the causal products a backward needs (dV, dP, dK, dQ and the recomputed S: 5 x 2 x N^2 / 2 x D
// per head and row), whatever a form recomputes on top.
void bench_attention_backward(Backend& be) {
  const int64_t hq = 16, hkv = 4, D = 256;
  for (const auto& [R, N] : {std::pair<int64_t, int64_t>{2, 2048}, {1, 4096}}) {
    const int64_t T = R * N, blocks = T / 64;
    HostBatchLayout h = one_row_per_sequence(std::vector<int64_t>(R, 0), std::vector<int64_t>(R, N));
    BatchLayout l = make_batch_layout(h, be.storage()).value();
    Tensor qg = filled(be, {T, hq * 2 * D}, DType::kF32), k = filled(be, {T, hkv, D}, DType::kF32, 1.f, 2);
    Tensor v = filled(be, {T, hkv, D}, DType::kF32, 1.f, 3), dout = filled(be, {T, hq, D}, DType::kF32, 1.f, 4);
    Tensor kc = be.storage().allocate({blocks, 64, hkv, D}, DType::kBF16).value();
    Tensor vc = be.storage().allocate({blocks, 64, hkv, D}, DType::kBF16).value();
    Tensor y = be.storage().allocate({T, hq, D}, DType::kF32).value(), kept;
    Tensor dqg = be.storage().allocate({T, hq * 2 * D}, DType::kF32).value();
    Tensor dk = be.storage().allocate({T, hkv, D}, DType::kF32).value();
    Tensor dv = be.storage().allocate({T, hkv, D}, DType::kF32).value();
    auto heads = [&](const Tensor& t, int64_t off) { return t.as_strided({T, hq, D}, {hq * 2 * D, 2 * D, 1}, off); };
    const float scale = 1.f / 16.f;
    (void)be.attention().write_kv({k, v, kc, vc, l.slot_mapping});
    AttentionArgs f{heads(qg, 0), heads(qg, D), y, kc, vc, &l, scale};
    f.compute = DType::kBF16;
    f.kept = &kept;
    const Status fs = be.attention().attend(f);
    if (!fs.ok() || !kept.defined()) {
      std::printf("attn  backward: the forward kept nothing (%s)\n", fs.to_string().c_str());
      return;
    }
    AttentionBackwardArgs b{heads(qg, 0), k, v, heads(qg, D), dout, heads(dqg, 0), dk, dv, heads(dqg, D), &l, scale};
    b.compute = DType::kBF16;
    b.out = y;
    b.kept = kept;
    // TF32 GEMMs; flash recomputing S and dP for dQ; flash with dQ from the kept dS tiles.
    const long long ds_mb = cuda::tuning().flash_backward_ds_mb;
    double us[3];
    for (int s = 0; s < 3; ++s) {
      cuda::tuning().flash_backward = s > 0;
      cuda::tuning().flash_backward_ds_mb = s == 2 ? ds_mb : 0;
      us[s] = time_us(be, [&] { return be.training().attention_backward(b); });
    }
    cuda::tuning().flash_backward = true;
    cuda::tuning().flash_backward_ds_mb = ds_mb;
    const double flops = 5.0 * 2 * R * hq * D * (double(N) * (N + 1) / 2);
    std::printf("attn  backward rows=%lld x %lld (4B layer, gated)  flash, dQ from dS %9.1f us (%5.1f TFLOPS)  "
                "dQ recomputing %9.1f us  tf32 GEMMs %9.1f us (%.1fx)\n",
                (long long)R, (long long)N, us[2], flops / us[2] * 1e-6, us[1], us[0], us[0] / us[2]);
  }
}

void bench_conv(Backend& be) {
  const int64_t C = 8192, K = 4;
  for (int64_t T : {512, 2048, 4096}) {
    HostBatchLayout h = one_row_per_sequence({0}, {T});
    BatchLayout l = make_batch_layout(h, be.storage()).value();
    Tensor x = filled(be, {T, C}, DType::kF32), w = filled(be, {C, K}, DType::kF32, 0.5f);
    Tensor st = filled(be, {1, K - 1, C}, DType::kF32), out = be.storage().allocate({T, C}, DType::kF32).value();
    const double us = time_us(be, [&] { return be.conv().causal_conv1d({x, w, st, out, &l}); });
    std::printf("conv  prefill T=%lld C=%lld  %8.1f us (%5.0f GB/s)\n", (long long)T, (long long)C, us,
                2.0 * T * C * 4 / us * 1e-3);
  }
}

// The GEMV's rows a warp (0: by shape; 1, 2, 4 forced; -1 the block-split form) at m = 1..8.
void bench_gemv_rows(Backend& be) {
  const cuda::Tuning saved = cuda::tuning();
  struct Shape2 {
    const char* what;
    int64_t n, k;
  } shapes[] = {{"in_proj_qkv", 8192, 2560}, {"in_proj_a/b", 64, 2560}, {"k_proj", 1024, 2560},
                {"out_proj", 2560, 4096},    {"gate/up", 9216, 2560},   {"down", 2560, 9216}};
  for (const auto& sh : shapes) {
    const std::vector<Tensor> ws = weight_copies(be, sh.n, sh.k);
    for (int64_t m : {1, 2, 4, 8}) {
      Tensor x = filled(be, {m, sh.k}, DType::kF32, 1.f, 3);
      Tensor y = be.storage().allocate({m, sh.n}, DType::kF32).value();
      const int forms[] = {0, 1, 2, 4, -1};
      double us[5];
      for (int f = 0; f < 5; ++f) {
        cuda::tuning().skinny = false;
        cuda::tuning().gemm_autotune = false;  // the GEMV for every m it takes, not the timed choice
        cuda::tuning().gemv_rows = forms[f];
        size_t i = 0;
        us[f] = time_us(be, [&] { return be.linear().matmul({x, ws[i++ % ws.size()], y}); });
      }
      cuda::tuning() = saved;
      std::printf("gemv_rows %-12s m=%lld n=%6lld k=%5lld  by shape %7.2f  1 %7.2f  2 %7.2f  4 %7.2f  block-split %7.2f us\n",
                  sh.what, (long long)m, (long long)sh.n, (long long)sh.k, us[0], us[1], us[2], us[3], us[4]);
    }
  }
}

// The skinny GEMM's k splits across a cluster (0: by occupancy) at 9..64 rows, wgmma form.
void bench_skinny_splits(Backend& be) {
  const cuda::Tuning saved = cuda::tuning();
  struct Shape2 {
    const char* what;
    int64_t n, k;
  } shapes[] = {{"in_proj_qkv", 8192, 2560}, {"k_proj", 1024, 2560}, {"out_proj", 2560, 4096}, {"down", 2560, 9216}};
  for (const auto& sh : shapes) {
    const std::vector<Tensor> ws = weight_copies(be, sh.n, sh.k);
    for (int64_t m : {16, 64}) {
      Tensor x = filled(be, {m, sh.k}, DType::kBF16, 1.f, 3);
      Tensor y = be.storage().allocate({m, sh.n}, DType::kF32).value();
      const int splits[] = {0, 1, 2, 4, 8};
      double us[5];
      for (int v = 0; v < 5; ++v) {
        cuda::tuning().skinny_everywhere = true;
        cuda::tuning().skinny_splits = splits[v];
        size_t i = 0;
        us[v] = time_us(be, [&] { return be.linear().matmul({x, ws[i++ % ws.size()], y}); });
      }
      cuda::tuning() = saved;
      std::printf("skinny_splits %-12s m=%lld  by occupancy %7.2f  1 %7.2f  2 %7.2f  4 %7.2f  8 %7.2f us\n", sh.what,
                  (long long)m, us[0], us[1], us[2], us[3], us[4]);
    }
  }
}

// rows > 0: the decode cases of that many rows at 1,056 keys alone.
void bench_attention(Backend& be, int64_t rows) {
  const int64_t hq = 16, hkv = 4, D = 256;
  struct Case {
    const char* what;
    std::vector<int64_t> past, n;
  } cases[] = {{"prefill 512", {0}, {512}},          {"prefill 2048", {0}, {2048}},
               {"prefill 4096", {0}, {4096}},
               {"decode ctx 576", {575}, {1}},       {"decode ctx 4096", {4095}, {1}},
               {"decode ctx 32768", {32767}, {1}},   {"decode 8 rows ctx 4096", std::vector<int64_t>(8, 4095),
                                                      std::vector<int64_t>(8, 1)},
               {"decode ctx 1056", {1055}, {1}},
               {"decode 8 rows ctx 1056", std::vector<int64_t>(8, 1055), std::vector<int64_t>(8, 1)},
               {"decode 32 rows ctx 1056", std::vector<int64_t>(32, 1055), std::vector<int64_t>(32, 1)},
               {"decode 64 rows ctx 1056", std::vector<int64_t>(64, 1055), std::vector<int64_t>(64, 1)},
               {"decode 128 rows ctx 1056", std::vector<int64_t>(128, 1055), std::vector<int64_t>(128, 1)}};
  for (const auto& c : cases) {
    if (rows > 0 && (c.n[0] != 1 || static_cast<int64_t>(c.past.size()) != rows || c.past[0] != 1055)) continue;
    HostBatchLayout h = one_row_per_sequence(c.past, c.n);
    BatchLayout l = make_batch_layout(h, be.storage()).value();
    int64_t blocks = 0, T = 0, kv = 0;
    for (size_t i = 0; i < c.past.size(); ++i) {
      blocks += (c.past[i] + c.n[i] + 63) / 64;
      T += c.n[i];
      kv += c.past[i] + c.n[i];
    }
    Tensor kc = filled(be, {blocks, 64, hkv, D}, DType::kF32), vc = filled(be, {blocks, 64, hkv, D}, DType::kF32, 1.f, 2);
    Tensor qg = filled(be, {T, hq * 2 * D}, DType::kF32);
    Tensor q = qg.as_strided({T, hq, D}, {hq * 2 * D, 2 * D, 1}), g = qg.as_strided({T, hq, D}, {hq * 2 * D, 2 * D, 1}, D);
    Tensor out = be.storage().allocate({T, hq, D}, DType::kF32).value();
    AttentionArgs a{q, g, out, kc, vc, &l, 1.f / 16.f};
    const double split = time_us(be, [&] { return be.attention().attend(a); });
    const double kv_bytes = 2.0 * kv * hkv * D * 4;
    std::printf("attn  %-24s split %9.1f us (%5.0f GB/s of K/V)\n", c.what, split, kv_bytes / split * 1e-3);
    if (c.n[0] == 1) {  // decode over a bf16 cache (a bf16 checkpoint's): the f32 kernel, and tensor cores
      a.k_cache = filled(be, {blocks, 64, hkv, D}, DType::kBF16);
      a.v_cache = filled(be, {blocks, 64, hkv, D}, DType::kBF16, 1.f, 2);
      const double split16 = time_us(be, [&] { return be.attention().attend(a); });
      a.compute = DType::kBF16;
      double mma[3];
      for (int b = 0; b < 3; ++b) {
        cuda::tuning().attention_mma_units_per_warp = b + 1;
        mma[b] = time_us(be, [&] { return be.attention().attend(a); });
      }
      cuda::tuning().attention_mma_units_per_warp = 1;
      std::printf("attn  %-24s bf16 K/V: split %8.1f us (%5.0f GB/s)  mma, 1/2/3 units a warp %8.1f %8.1f %8.1f us "
                  "(best %5.0f GB/s)\n",
                  c.what, split16, kv_bytes / 2 / split16 * 1e-3, mma[0], mma[1], mma[2],
                  kv_bytes / 2 / std::min({mma[0], mma[1], mma[2]}) * 1e-3);
    }
    if (c.n[0] > 1) {  // prefill: the tensor-core kernel, which the bf16 contract allows
      a.compute = DType::kBF16;
      const double flash = time_us(be, [&] { return be.attention().attend(a); });
      const double flops = 4.0 * hq * D * (double(T) * (T + 1) / 2);  // causal QK^T and PV
      std::printf("attn  %-24s flash %9.1f us (%5.1f TFLOPS)  (%.1fx the split kernel)\n", c.what, flash,
                  flops / flash * 1e-6, split / flash);
      // A bf16 checkpoint's cache (staged by cp.async, as in the model's prefill).
      a.k_cache = filled(be, {blocks, 64, hkv, D}, DType::kBF16);
      a.v_cache = filled(be, {blocks, 64, hkv, D}, DType::kBF16, 1.f, 2);
      const double flash16 = time_us(be, [&] { return be.attention().attend(a); });
      std::printf("attn  %-24s flash, bf16 K/V %9.1f us (%5.1f TFLOPS)\n", c.what, flash16, flops / flash16 * 1e-6);
    }
  }
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  auto be = kiln::create_backend("cuda");
  if (!be.ok()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", be.status().to_string().c_str());
    return 0;
  }
  std::vector<std::string> what(argv + 1, argv + argc);
  if (what.empty()) what = {"gemv", "gdn", "conv", "attention"};
  std::printf("device: %s\n", be.value()->identity().device_name.c_str());
  for (const auto& arg : what) {
    const size_t colon = arg.find(':');  // gemv:<m>, gemm:<m>, gdn:<rows>, attention:<rows>: that m (decode rows) alone
    const std::string w = arg.substr(0, colon);
    const int64_t only_m = colon == std::string::npos ? 0 : std::atoll(arg.c_str() + colon + 1);
    if (w == "gemv") kiln::bench_gemv(*be.value(), only_m);
    else if (w == "gemm") kiln::bench_gemm(*be.value(), only_m);
    else if (w == "gdn") kiln::bench_gdn(*be.value(), only_m);
    else if (w == "gdn_backward") kiln::bench_gdn_backward(*be.value());
    else if (w == "attention_backward") kiln::bench_attention_backward(*be.value());
    else if (w == "conv") kiln::bench_conv(*be.value());
    else if (w == "gemv_rows") kiln::bench_gemv_rows(*be.value());
    else if (w == "skinny_splits") kiln::bench_skinny_splits(*be.value());
    else if (w == "attention") kiln::bench_attention(*be.value(), only_m);
    else std::printf("unknown benchmark '%s'\n", w.c_str());
    std::fflush(stdout);
  }
  return 0;
}
