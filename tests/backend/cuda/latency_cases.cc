#include "backend/cuda/latency_cases.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>

#include "backend/batch_layout.h"
#include "backend/facets.h"
#include "core/dtype.h"

namespace kiln::latency {
namespace {

using Clock = std::chrono::steady_clock;

// Qwen3.5-4B.
constexpr int64_t kHidden = 2560, kInter = 9216, kVocab = 248320;
constexpr int64_t kHq = 16, kHkv = 4, kHeadDim = 256;
constexpr int64_t kGdnHk = 16, kGdnHv = 32, kGdnDk = 128, kGdnDv = 128, kConv = 4;
constexpr int64_t kGdnChannels = 2 * kGdnHk * kGdnDk + kGdnHv * kGdnDv;  // 8192: in_proj_qkv's n
constexpr double kRotateBytes = 256e6;  // inputs read per call rotate over at least this much (L2 is 50 MB)

// A device tensor of pseudo-random values in [-0.5, 0.5) * scale (no zeros: they can run faster).
Result<Tensor> filled(Backend& be, Shape shape, DType dt, float scale = 1.f, uint32_t seed = 1) {
  const int64_t n = shape.numel(), chunk = std::min<int64_t>(n, int64_t{1} << 22);
  KILN_ASSIGN_OR_RETURN(Tensor dev, be.storage().allocate(shape, dt));
  Tensor host = Tensor::empty({chunk}, dt);
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < chunk; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = (static_cast<float>(s >> 8) / 16777216.f - 0.5f) * scale;
    if (dt == DType::kF32) host.data<float>()[i] = v;
    else host.data<uint16_t>()[i] = f32_to_bf16(v);
  }
  Tensor flat = dev.as_strided({n}, {1});
  for (int64_t o = 0; o < n; o += chunk) {
    const int64_t len = std::min(chunk, n - o);
    KILN_RETURN_IF_ERROR(be.storage().copy_from_host(host.slice(0, 0, len), flat.slice(0, o, o + len)));
  }
  return dev;
}

// How many copies of `bytes` make at least kRotateBytes (1 to 128).
int copies_for(double bytes) { return static_cast<int>(std::clamp(std::ceil(kRotateBytes / bytes), 1.0, 128.0)); }

struct Timing {
  double median_us = 0, p90_us = 0;
};

// Per-call microseconds: two warm-up calls, then 11 batches of `reps` calls (reps chosen so a
// batch lasts about 3 ms), each ended by one synchronisation; the median and the p90 batch.
Result<Timing> time_calls(Backend& be, const std::function<Status()>& f) {
  for (int i = 0; i < 2; ++i) KILN_RETURN_IF_ERROR(f());
  KILN_RETURN_IF_ERROR(be.storage().synchronize());
  auto t0 = Clock::now();
  KILN_RETURN_IF_ERROR(f());
  KILN_RETURN_IF_ERROR(be.storage().synchronize());
  const double once = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const int reps = static_cast<int>(std::clamp(3000.0 / std::max(once, 1.0), 3.0, 200.0));
  std::vector<double> batches;
  for (int b = 0; b < 11; ++b) {
    t0 = Clock::now();
    for (int i = 0; i < reps; ++i) KILN_RETURN_IF_ERROR(f());
    KILN_RETURN_IF_ERROR(be.storage().synchronize());
    batches.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps);
  }
  std::sort(batches.begin(), batches.end());
  return Timing{batches[5], batches[9]};  // p90: nearest rank ceil(0.9 * 11) = 10
}

HostBatchLayout one_row(int64_t past, int64_t n) {
  HostBatchLayout h;
  h.block_size = 64;
  std::vector<int32_t> blocks((past + n + 63) / 64);
  std::iota(blocks.begin(), blocks.end(), 0);
  h.add_row(past, n, blocks, 0);
  return h;
}

struct Measured {
  std::string shape;
  double bytes = 0, flops = 0;
  Timing t;
};

// m rows through `calls` projections of n x k bf16 weights (gate and up are two calls).
Result<Measured> matmul_case(Backend& be, int64_t m, int64_t n, int64_t k, int calls, const std::string& what) {
  const double wbytes = 2.0 * n * k;
  std::vector<Tensor> ws;
  for (int c = 0, copies = std::max(copies_for(wbytes), calls); c < copies; ++c) {
    KILN_ASSIGN_OR_RETURN(Tensor w, filled(be, {n, k}, DType::kBF16, 0.05f, 10 + c));
    ws.push_back(w);
  }
  KILN_ASSIGN_OR_RETURN(Tensor x, filled(be, {m, k}, DType::kF32, 1.f, 3));
  KILN_ASSIGN_OR_RETURN(Tensor y, be.storage().allocate({m, n}, DType::kF32));
  size_t i = 0;
  Measured r;
  auto call = [&]() -> Status {
    for (int c = 0; c < calls; ++c) KILN_RETURN_IF_ERROR(be.linear().matmul({x, ws[i++ % ws.size()], y}));
    return Status();
  };
  KILN_ASSIGN_OR_RETURN(r.t, time_calls(be, call));
  std::ostringstream s;
  s << what << ": m=" << m << " n=" << n << " k=" << k << " bf16 weights, f32 x";
  r.shape = s.str();
  r.bytes = calls * (wbytes + 4.0 * m * k + 4.0 * m * n);
  r.flops = calls * 2.0 * m * n * k;
  return r;
}

// One decode token of a full-attention layer over `ctx` keys (f32 paged K/V, blocks of 64).
Result<Measured> attention_decode_case(Backend& be, int64_t ctx) {
  HostBatchLayout h = one_row(ctx - 1, 1);
  KILN_ASSIGN_OR_RETURN(BatchLayout l, make_batch_layout(h, be.storage()));
  const int64_t blocks = (ctx + 63) / 64;
  const double kv_bytes = 2.0 * blocks * 64 * kHkv * kHeadDim * 4;
  std::vector<std::pair<Tensor, Tensor>> kv;
  for (int c = 0, copies = copies_for(kv_bytes); c < copies; ++c) {
    KILN_ASSIGN_OR_RETURN(Tensor kc, filled(be, {blocks, 64, kHkv, kHeadDim}, DType::kF32, 1.f, 20 + 2 * c));
    KILN_ASSIGN_OR_RETURN(Tensor vc, filled(be, {blocks, 64, kHkv, kHeadDim}, DType::kF32, 1.f, 21 + 2 * c));
    kv.emplace_back(kc, vc);
  }
  KILN_ASSIGN_OR_RETURN(Tensor qg, filled(be, {1, kHq * 2 * kHeadDim}, DType::kF32));
  Tensor q = qg.as_strided({1, kHq, kHeadDim}, {kHq * 2 * kHeadDim, 2 * kHeadDim, 1});
  Tensor g = qg.as_strided({1, kHq, kHeadDim}, {kHq * 2 * kHeadDim, 2 * kHeadDim, 1}, kHeadDim);
  KILN_ASSIGN_OR_RETURN(Tensor out, be.storage().allocate({1, kHq, kHeadDim}, DType::kF32));
  size_t i = 0;
  Measured r;
  auto call = [&] {
    const auto& [kc, vc] = kv[i++ % kv.size()];
    return be.attention().attend({q, g, out, kc, vc, &l, 1.f / 16.f});
  };
  KILN_ASSIGN_OR_RETURN(r.t, time_calls(be, call));
  r.shape = "1 token, context " + std::to_string(ctx) + ", 16 q / 4 kv heads, head_dim 256, f32 paged K/V (blocks of 64), output gate";
  const double keys = static_cast<double>(ctx);
  r.bytes = 2.0 * keys * kHkv * kHeadDim * 4 + 3.0 * kHq * kHeadDim * 4;
  r.flops = 4.0 * keys * kHq * kHeadDim;  // q.k and p.v
  return r;
}

// The fused decode step of one GDN layer for one row: conv update, l2 norms, gates, recurrence,
// gated RMSNorm.
Result<Measured> gdn_decode_case(Backend& be) {
  const int64_t C = kGdnChannels, hv = kGdnHv, dk = kGdnDk, dv = kGdnDv;
  HostBatchLayout h = one_row(600, 1);
  KILN_ASSIGN_OR_RETURN(BatchLayout l, make_batch_layout(h, be.storage()));
  const double state_bytes = 4.0 * hv * dk * dv;
  std::vector<std::pair<Tensor, Tensor>> states;  // (recurrent state, conv state)
  for (int c = 0, copies = copies_for(state_bytes); c < copies; ++c) {
    KILN_ASSIGN_OR_RETURN(Tensor s, filled(be, {1, hv, dk, dv}, DType::kF32, 0.1f, 40 + c));
    KILN_ASSIGN_OR_RETURN(Tensor cs, filled(be, {1, kConv - 1, C}, DType::kF32, 1.f, 200 + c));
    states.emplace_back(s, cs);
  }
  KILN_ASSIGN_OR_RETURN(Tensor mixed, filled(be, {1, C}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor cw, filled(be, {C, kConv}, DType::kF32, 0.5f));
  KILN_ASSIGN_OR_RETURN(Tensor z, filled(be, {1, hv, dv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor a, filled(be, {1, hv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor b, filled(be, {1, hv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor a_log, filled(be, {hv}, DType::kF32, 0.5f));
  KILN_ASSIGN_OR_RETURN(Tensor dtb, filled(be, {hv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor nw, filled(be, {dv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor out, be.storage().allocate({1, hv, dv}, DType::kF32));
  size_t i = 0;
  Measured r;
  auto call = [&] {
    const auto& [s, cs] = states[i++ % states.size()];
    return be.gdn().fused_decode({mixed, cw, cs, z, a, b, a_log, dtb, s, nw, out, kGdnHk, dk, 1e-6f, &l});
  };
  KILN_ASSIGN_OR_RETURN(r.t, time_calls(be, call));
  r.shape = "1 row: conv 4 over 8192 channels, 16 key heads x 128, 32 value heads x 128, f32 state, gated norm";
  // State read and written; conv state read and written; mixed, conv weights, z, out.
  r.bytes = 2 * state_bytes + 2.0 * (kConv - 1) * C * 4 + C * 4.0 + C * kConv * 4.0 + 2.0 * hv * dv * 4;
  // Per value head: decay (1), k.S (2), rank-1 update (2), q.S (2) per state element.
  r.flops = 7.0 * hv * dk * dv;
  return r;
}

// The chunked gated delta rule of one GDN layer over a 4096-token prompt (one row).
Result<Measured> gdn_prefill_case(Backend& be, int64_t T) {
  const int64_t C = kGdnChannels, hk = kGdnHk, hv = kGdnHv, dk = kGdnDk, dv = kGdnDv;
  HostBatchLayout h = one_row(0, T);
  KILN_ASSIGN_OR_RETURN(BatchLayout l, make_batch_layout(h, be.storage()));
  KILN_ASSIGN_OR_RETURN(Tensor mixed, filled(be, {T, C}, DType::kF32));  // 134 MB: beyond L2 alone
  KILN_ASSIGN_OR_RETURN(Tensor a, filled(be, {T, hv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor b, filled(be, {T, hv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor a_log, filled(be, {hv}, DType::kF32, 0.5f));
  KILN_ASSIGN_OR_RETURN(Tensor dtb, filled(be, {hv}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor state, filled(be, {1, hv, dk, dv}, DType::kF32, 0.1f));
  KILN_ASSIGN_OR_RETURN(Tensor out, be.storage().allocate({T, hv, dv}, DType::kF32));
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
  Measured r;
  KILN_ASSIGN_OR_RETURN(r.t, time_calls(be, [&] { return be.gdn().delta_rule(g); }));
  r.shape = "1 row of " + std::to_string(T) + " tokens, 16 key heads x 128, 32 value heads x 128, chunks of 64, f32 state";
  const double chunk = 64;
  r.bytes = 4.0 * T * C + 2.0 * 4 * T * hv + 4.0 * T * hv * dv + 2.0 * 4 * hv * dk * dv;
  // Per token and value head: q.S, k.S and the state update (2 dk dv each), and the
  // intra-chunk products q.k^T and A.v over the chunk (2 chunk (dk + dv)).
  r.flops = static_cast<double>(T) * hv * (6.0 * dk * dv + 2.0 * chunk * (dk + dv));
  return r;
}

}  // namespace

const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names = {
      "decode_qkv_proj",        "prefill_qkv_proj_m256",    "prefill_gate_up_m256", "lm_head_m1",
      "attention_decode_ctx512", "attention_decode_ctx4096", "gdn_decode_step",      "gdn_chunked_prefill_4096"};
  return names;
}

Result<Roofline> measure_roofline(Backend& be) {
  Roofline r;
  {
    const int64_t n = int64_t{1} << 28;  // 1 GiB of f32 each way
    KILN_ASSIGN_OR_RETURN(Tensor src, filled(be, {n}, DType::kF32));
    KILN_ASSIGN_OR_RETURN(Tensor dst, be.storage().allocate({n}, DType::kF32));
    KILN_ASSIGN_OR_RETURN(Timing t, time_calls(be, [&] { return be.storage().copy(src, dst); }));
    r.copy_bytes_per_s = 2.0 * 4.0 * n / (t.median_us * 1e-6);
  }
  {
    const int64_t n = 4096;
    KILN_ASSIGN_OR_RETURN(Tensor x, filled(be, {n, n}, DType::kF32));
    KILN_ASSIGN_OR_RETURN(Tensor w, filled(be, {n, n}, DType::kBF16, 0.05f));
    KILN_ASSIGN_OR_RETURN(Tensor y, be.storage().allocate({n, n}, DType::kF32));
    KILN_ASSIGN_OR_RETURN(Timing t, time_calls(be, [&] { return be.linear().matmul({x, w, y}); }));
    r.gemm_flops_per_s = 2.0 * n * n * n / (t.median_us * 1e-6);
  }
  return r;
}

Result<CaseResult> run_case(Backend& be, const std::string& name, const Roofline& roof) {
  Result<Measured> m = [&]() -> Result<Measured> {
    if (name == "decode_qkv_proj") return matmul_case(be, 1, kGdnChannels, kHidden, 1, "in_proj_qkv (= q_proj with its gate)");
    if (name == "prefill_qkv_proj_m256") return matmul_case(be, 256, kGdnChannels, kHidden, 1, "in_proj_qkv (= q_proj with its gate)");
    if (name == "prefill_gate_up_m256") return matmul_case(be, 256, kInter, kHidden, 2, "gate_proj and up_proj, 2 calls");
    if (name == "lm_head_m1") return matmul_case(be, 1, kVocab, kHidden, 1, "lm_head");
    if (name == "attention_decode_ctx512") return attention_decode_case(be, 512);
    if (name == "attention_decode_ctx4096") return attention_decode_case(be, 4096);
    if (name == "gdn_decode_step") return gdn_decode_case(be);
    if (name == "gdn_chunked_prefill_4096") return gdn_prefill_case(be, 4096);
    return invalid_argument("unknown latency case '" + name + "'");
  }();
  if (!m.ok()) return m.status();
  KILN_RETURN_IF_ERROR(be.storage().synchronize());
  CaseResult r;
  r.name = name;
  r.shape = m.value().shape;
  r.median_us = m.value().t.median_us;
  r.p90_us = m.value().t.p90_us;
  r.bytes = m.value().bytes;
  r.flops = m.value().flops;
  const double mem = roof.copy_bytes_per_s > 0 ? r.bytes / roof.copy_bytes_per_s * 1e6 : 0;
  const double math = roof.gemm_flops_per_s > 0 ? r.flops / roof.gemm_flops_per_s * 1e6 : 0;
  r.bound_us = std::max(mem, math);
  return r;
}

nlohmann::json to_json(const CaseResult& r) {
  return {{"name", r.name},     {"shape", r.shape},  {"median_us", r.median_us}, {"p90_us", r.p90_us},
          {"bytes", r.bytes},   {"flops", r.flops},  {"bound_us", r.bound_us}};
}

Result<std::map<std::string, double>> read_thresholds(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("no thresholds file at " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("cases") || !j["cases"].is_object())
    return format_error(path + ": not a thresholds file (no 'cases' object)");
  std::map<std::string, double> out;
  for (auto it = j["cases"].begin(); it != j["cases"].end(); ++it) {
    if (!it->is_object() || !it->contains("threshold_us") || !(*it)["threshold_us"].is_number())
      return format_error(path + ": case '" + it.key() + "' has no numeric threshold_us");
    out[it.key()] = (*it)["threshold_us"].get<double>();
  }
  return out;
}

std::string device_slug(const std::string& device_name) {
  std::string slug;
  for (char c : device_name.substr(0, device_name.find(" ("))) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug;
}

std::string thresholds_dir() {
  const std::string rel = "tests/backend/cuda/latency_thresholds";
  std::error_code ec;
  if (std::filesystem::is_directory(rel, ec)) return rel;
  return std::string(KILN_SOURCE_DIR) + "/" + rel;
}

std::string thresholds_path(const std::string& device_name) {
  if (const char* p = std::getenv("KILN_LATENCY_THRESHOLDS"); p && *p) return p;
  return thresholds_dir() + "/" + device_slug(device_name) + ".json";
}

}  // namespace kiln::latency
