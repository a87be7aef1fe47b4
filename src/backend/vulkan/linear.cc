// y[m, n] (+)= x[m, k] w[n, k]^T with compute shaders, f32 accumulation: up to kGemvMaxRows rows
// of x take the GEMV (gemv.comp, or gemv_vec.comp for aligned 16-bit weights: each weight row read
// once for all of them), more the tiled matmul (matmul.comp: 64 x 64 tiles of out through shared
// memory; matmul_coop.comp's 64 or 128 x 128 tiles on cooperative matrices for 16-bit weights,
// where the device has them). 16-bit weights are widened to f32 in the shader (the f32 product of
// the exact weights to within f32 rounding), or taken exactly as f16 on cooperative matrices, x
// rounded to f16 (as a bf16 GEMM rounds it to bf16).
#include <algorithm>
#include <cstdio>
#include <cmath>

#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

namespace {

constexpr int64_t kGemvMaxRows = 8;    // gemv.comp's M: rows of x sharing one pass over the weights
constexpr int64_t kGemvRows = 4;       // gemv.comp's R: rows of w a workgroup
constexpr int64_t kGemvThreads = 128;  // gemv.comp's WG
constexpr int64_t kTile = 64;          // matmul.comp's BM and BN
constexpr int64_t kTileK = 16;         // matmul.comp's BK
constexpr int64_t kCoopTileN = 128;    // matmul_coop.comp's BN (BM: 64 or 128)
constexpr int64_t kCoopTileK = 32;     // matmul_coop.comp's BK
// A matmul of fewer tiles than this splits over k (every device's compute units, a few times
// over, for the largest GPUs'), keeping kMinSplitSteps k steps a split.
constexpr int64_t kFillWorkgroups = 256;
constexpr int64_t kMinSplitSteps = 4;
// How far matmul_coop.comp's product may be from the f32 tiles' (relative to its largest value)
// before the startup check turns it off.
constexpr double kCoopTolerance = 2e-3;
// Indices within a row, strides and workgroup counts are 32-bit in the shaders (row bases are
// 64-bit addresses); each tensor is held to 32-bit element counts, which bounds them all.
constexpr int64_t kIndexLimit = int64_t{1} << 32;

// The shared memory a request's shader declares: the GEMV's partial sums (M x R a thread), or
// the tiled matmul's staged x and w tiles (BK x (64 + 1) floats each). Both stay within the
// 16 KiB every Vulkan device provides.
int64_t shared_bytes(int64_t m) {
  const int64_t floats = m <= kGemvMaxRows ? m * kGemvRows * kGemvThreads : 2 * kTileK * (kTile + 1);
  return floats * static_cast<int64_t>(sizeof(float));
}

}  // namespace

Support Linear::supports(const MatmulRequest& r) const {
  if (r.x_dtype != DType::kF32 || r.out_dtype != DType::kF32)
    return Support::declined("x and out must be f32 on the vulkan backend");
  if (!is_float(r.w_dtype)) return Support::declined("weight dtype must be f32, bf16 or f16");
  if (r.m * r.k >= kIndexLimit || r.n * r.k >= kIndexLimit || r.m * r.n >= kIndexLimit)
    return Support::declined("x, w and out must each have fewer than 2^32 elements");
  if (shared_bytes(r.m) > ctx_->info().shared_memory_bytes)
    return Support::declined("the shader needs " + std::to_string(shared_bytes(r.m)) +
                             " bytes of shared memory; the device has " +
                             std::to_string(ctx_->info().shared_memory_bytes));
  return Support::native();
}

Status Linear::matmul(const MatmulArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  auto req = [&] { return describe(a).describe(); };  // for an error's text only
  const MatmulRequest r = describe(a);
  if (r.m == 0 || r.n == 0) return {};
  if (a.x.stride(0) >= kIndexLimit || a.out.stride(0) >= kIndexLimit)
    return declined("vulkan", req(), "row strides of x and out must be below 2^32");
  const uint32_t wt = static_cast<uint32_t>(r.w_dtype);

  if (r.m <= kGemvMaxRows) {
    struct {
      uint64_t x, w, out;
      uint32_t m, n, k, x_stride, out_stride, accumulate;
    } p{address(a.x), address(a.w), address(a.out), u32(r.m), u32(r.n), u32(r.k), u32(a.x.stride(0)),
        u32(a.out.stride(0)), a.accumulate ? 1u : 0u};
    const auto groups = ctx_->grid((r.n + kGemvRows - 1) / kGemvRows);
    // Eight 16-bit weights a 16-byte load where rows of w and x start 16-byte aligned, summed
    // across subgroups where the device adds them; else two a 32-bit load where rows of w
    // start 4-byte aligned.
    const bool words = r.w_dtype != DType::kF32 && r.k % 8 == 0 && p.w % 16 == 0 && p.x % 16 == 0 &&
                       (r.m == 1 || p.x_stride % 4 == 0) && ctx_->info().subgroup_arithmetic;
    if (words) return ctx_->dispatch("gemv_vec", p, groups, {wt, u32(r.m), 0, 0});
    const bool pairs = r.w_dtype != DType::kF32 && r.k % 2 == 0 && p.w % 4 == 0;
    return ctx_->dispatch("gemv", p, groups, {wt, u32(r.m), pairs ? 1u : 0u, 0});
  }

  // 16-bit weights on cooperative matrices where the device has them and the rows allow its
  // 16-byte loads (64 x 128 tiles for up to 64 rows, else 128 x 128), else the f32 tiles.
  const bool coop = r.w_dtype != DType::kF32 && ctx_->info().cooperative_matrix && r.k % 8 == 0 &&
                    address(a.x) % 16 == 0 && a.x.stride(0) % 4 == 0 && address(a.w) % 16 == 0;
  const int64_t mt = r.m <= 64 ? 1 : 2;
  const int64_t tile_m = coop ? 64 * mt : kTile, tile_n = coop ? kCoopTileN : kTile;
  const int64_t step = coop ? kCoopTileK : kTileK;
  const int64_t tiles_n = (r.n + tile_n - 1) / tile_n, tiles = (r.m + tile_m - 1) / tile_m * tiles_n;
  // Too few tiles to fill the device (decode batches): k splits over workgroups, each writing
  // its partial product to a scratch that splitk_reduce.comp adds up. Each split keeps at least
  // kMinSplitSteps k steps.
  int64_t splits = 1, k_chunk = r.k;
  if (tiles < kFillWorkgroups) {
    const int64_t steps = (r.k + step - 1) / step;
    const int64_t want = std::min((kFillWorkgroups + tiles - 1) / tiles, steps / kMinSplitSteps);
    if (want > 1) {
      k_chunk = (steps + want - 1) / want * step;
      splits = (r.k + k_chunk - 1) / k_chunk;
    }
  }
  Tensor part;
  if (splits > 1) {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<kiln::Storage> s,
                          ctx_->memory().allocate(static_cast<size_t>(splits * r.m * r.n) * sizeof(float), ctx_));
    part = Tensor(std::move(s), DType::kF32, {splits * r.m, r.n});
  }
  struct {
    uint64_t x, w, out;
    uint32_t m, n, k, x_stride, out_stride, accumulate, tiles_n, k_chunk;
  } p{address(a.x), address(a.w), splits > 1 ? address(part) : address(a.out), u32(r.m), u32(r.n), u32(r.k),
      u32(a.x.stride(0)), splits > 1 ? u32(r.n) : u32(a.out.stride(0)), splits == 1 && a.accumulate ? 1u : 0u,
      u32(tiles_n), u32(k_chunk)};
  auto groups = ctx_->grid(static_cast<uint64_t>(tiles));
  groups[2] = u32(splits);
  KILN_RETURN_IF_ERROR(ctx_->dispatch(coop ? "matmul_coop" : "matmul", p, groups, {wt, coop ? u32(mt) : 0u, 0, 0}));
  if (splits == 1) return {};
  struct {
    uint64_t part, out;
    uint32_t m, n, splits, out_stride, accumulate;
  } q{address(part), address(a.out), u32(r.m), u32(r.n), u32(splits), u32(a.out.stride(0)), a.accumulate ? 1u : 0u};
  // The scratch goes back to the pool on return: later work that reuses it is ordered after this.
  ctx_->require_barrier();  // the sum reads the partial products (in a group too)
  return ctx_->dispatch("splitk_reduce", q, ctx_->grid(static_cast<uint64_t>((r.m * r.n + 255) / 256)));
}

// One product of 16-bit weights of `dtype` on cooperative matrices and on the f32 tiles; an
// error from the first (a pipeline the driver refuses) or a disagreement is the reason to return.
Result<std::string> disagreement(const std::shared_ptr<Context>& ctx, DType dtype) {
  // 136 rows and columns (two tiles each way, the second partial), k 96, x across magnitudes
  // and not representable in f16.
  const int64_t m = 136, n = 136, k = 96;
  Tensor x = Tensor::empty({m, k}, DType::kF32), w = Tensor::empty({n, k}, dtype);
  for (int64_t i = 0; i < m * k; ++i)
    x.data<float>()[i] = (static_cast<float>((i * 7919) % 201) - 100.37f) * (i % 5 == 0 ? 3.1f : 1.3e-3f);
  for (int64_t i = 0; i < n * k; ++i) {
    const float v = static_cast<float>((i * 104729) % 97) / 97.f - 0.5f;
    w.data<uint16_t>()[i] = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
  }
  Storage st(ctx);
  Linear lin(ctx);
  KILN_ASSIGN_OR_RETURN(Tensor dx, st.upload(x));
  KILN_ASSIGN_OR_RETURN(Tensor dw, st.upload(w));
  KILN_ASSIGN_OR_RETURN(Tensor coop, st.allocate({m, n}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor tiled, st.allocate({m, n}, DType::kF32));
  ctx->set_cooperative_matrix(true);
  Status ran = lin.matmul({dx, dw, coop});
  ctx->set_cooperative_matrix(false);
  KILN_RETURN_IF_ERROR(lin.matmul({dx, dw, tiled}));
  Tensor a = Tensor::empty({m, n}, DType::kF32), b = Tensor::empty({m, n}, DType::kF32);
  if (ran.ok()) ran = st.copy_to_host(coop, a);
  KILN_RETURN_IF_ERROR(st.copy_to_host(tiled, b));
  if (!ran.ok()) return ran.to_string();
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b.data<float>()[i])));
  }
  // x rounded to f16 moves the product by a few 1e-4 of its scale; a wrong product by far more.
  if (worst <= kCoopTolerance * scale) return std::string();
  return std::string(dtype_name(dtype)) + " weights: their product differs by " + std::to_string(worst / scale) +
         " of its largest value";
}

Status check_cooperative_matrix(const std::shared_ptr<Context>& ctx) {
  if (!ctx->info().cooperative_matrix) return {};
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    KILN_ASSIGN_OR_RETURN(const std::string why, disagreement(ctx, dtype));
    if (!why.empty()) {
      std::fprintf(stderr, "vulkan: %s: cooperative matrices off, the f32 tiled matmul runs instead (%s)\n",
                   ctx->info().name.c_str(), why.c_str());
      return {};  // left off by disagreement
    }
  }
  ctx->set_cooperative_matrix(true);
  return {};
}

namespace {

// The bytes a tensor's elements span, [first, last) from its first element's address.
std::pair<uint64_t, uint64_t> span_of(const Tensor& t) {
  uint64_t last = 0;
  for (int d = 0; d < t.rank(); ++d) last += static_cast<uint64_t>(t.dim(d) - 1) * static_cast<uint64_t>(t.stride(d));
  const uint64_t first = address(t);
  return {first, first + (last + 1) * dtype_size(t.dtype())};
}

bool overlap(const Tensor& a, const Tensor& b) {
  const auto [a0, a1] = span_of(a);
  const auto [b0, b1] = span_of(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

Status Linear::matmul_group(const MatmulGroupArgs& a) {
  bool independent = a.w.size() == a.out.size();
  for (size_t i = 0; independent && i < a.out.size(); ++i) {
    independent &= a.out[i].defined() && a.x.defined() && a.out[i].device().kind == DeviceKind::kVulkan &&
                    a.out[i].numel() > 0 && !overlap(a.out[i], a.x);
    for (size_t j = 0; independent && j < i; ++j) independent &= !overlap(a.out[i], a.out[j]);
  }
  if (!independent) return LinearFacet::matmul_group(a);  // one after another (and its errors)
  ctx_->group_begin();
  Status st;
  for (size_t i = 0; i < a.w.size() && st.ok(); ++i) st = matmul({a.x, a.w[i], a.out[i], a.accumulate});
  ctx_->group_end();
  return st;
}

}  // namespace kiln::vulkan
