// Partial rotary embedding, paged K/V writes and causal GQA attention with the fused output gate
// (shaders/rope.comp, kv_write.comp, attention.comp, attention_tiled.comp and
// attention_combine.comp), all f32 over an f32 K/V cache.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/batch_layout.h"
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

namespace {

constexpr int64_t kU32 = int64_t{1} << 32;
constexpr int64_t kMaxRotaryHalf = 256;  // rope.comp's shared sin/cos tables
constexpr int64_t kMaxHeadDim = 256;     // attention.comp: its value lanes (head_dim / 4 or / 8) within 128
constexpr int64_t kTileKeys = 128;       // attention.comp's invocations, and keys a tile
constexpr int64_t kMaxHeadsPerGroup = 4; // query heads a workgroup (shared memory within 16 KiB)

// Split attention (attention.comp over key ranges, then attention_combine.comp) where there are
// fewer workgroups than this and enough keys: a decode of a few long rows would otherwise leave
// most of a GPU idle, each workgroup walking thousands of keys.
constexpr int64_t kSplitBelowGroups = 256;
constexpr int64_t kMinSplitKeys = 256;

// Every stride of a view below 2^32 elements (the shaders' push constants are 32-bit).
bool strides_fit(const Tensor& t) {
  for (int i = 0; i < t.rank(); ++i)
    if (t.stride(i) >= kU32) return false;
  return true;
}

Status strides_error(const std::string& req, const char* name) {
  return invalid_argument(req + ": tensor '" + name + "' has a stride of 2^32 elements or more");
}

// The largest divisor of the GQA group not above kMaxHeadsPerGroup.
int64_t heads_per_workgroup(int64_t group) {
  for (int64_t g = kMaxHeadsPerGroup; g > 1; --g)
    if (group % g == 0) return g;
  return 1;
}

// attention_tiled.comp: its invocations, and the query rows (tokens x heads) a tile aims for.
constexpr int64_t kTiledInvocations = 256;
constexpr int64_t kTiledRows[] = {32, 16, 8};
constexpr int64_t kTiledKeys[] = {32, 16, 8};
// Prefill rows shorter than this keep attention.comp (a tile of one token wastes most of it).
constexpr int64_t kTiledMinTokens = 8;

// attention_tiled.comp's shared memory for M query rows, BK keys a step and D4 vec4s a row.
int64_t tiled_shared_bytes(int64_t M, int64_t BK, int64_t D4) {
  return (M + BK) * (D4 + 1) * 16 + M * BK * 4 + M * 8 + BK * 4;
}

}  // namespace

Attention::Attention(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {
  const char* v = std::getenv("KILN_VULKAN_TILED_PREFILL");
  tiled_prefill_ = v == nullptr || std::strcmp(v, "0") != 0;
}

Support Attention::supports(const RopeRequest& r) const {
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 != 0 || r.rotary_dim > r.head_dim)
    return Support::declined("rotary_dim must be even and within head_dim");
  if (r.rotary_dim / 2 > kMaxRotaryHalf)
    return Support::declined("rotary_dim above " + std::to_string(2 * kMaxRotaryHalf));
  if (r.heads * r.rotary_dim >= kU32) return Support::declined("2^32 rotated dims a token or more");
  return Support::native();
}

Support Attention::supports(const KvWriteRequest& r) const {
  if (r.kv_dtype != DType::kF32)
    return Support::declined("the vulkan K/V cache is f32 (no bf16 or f8e4m3 cache)");
  if (r.tokens * r.kv_heads * r.head_dim >= kU32) return Support::declined("2^32 elements or more");
  return Support::native();
}

Support Attention::supports(const AttentionRequest& r) const {
  if (r.dtype != DType::kF32) return Support::declined("the vulkan backend attends in f32");
  if (r.kv_dtype != DType::kF32)
    return Support::declined("the vulkan K/V cache is f32 (no bf16 or f8e4m3 cache)");
  if (r.kv_heads <= 0 || r.q_heads % r.kv_heads != 0)
    return Support::declined("q_heads must be a multiple of kv_heads");
  if (r.head_dim > kMaxHeadDim) return Support::declined("head_dim above " + std::to_string(kMaxHeadDim));
  if (r.head_dim % 4 != 0) return Support::declined("head_dim must be a multiple of 4 (vec4 reads)");
  if (r.block_size <= 0) return Support::declined("no K/V block size");
  if (r.tokens * r.q_heads >= kU32) return Support::declined("2^32 (token, head) pairs or more");
  // compute = kBF16 allows rounding; these shaders keep every product in f32.
  return Support::native();
}

Result<Tensor> Attention::inv_freq(float theta, int64_t rotary_dim) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inv_freq_.find({theta, rotary_dim});
  if (it != inv_freq_.end()) return it->second;
  // inv_freq_i = theta^(-2i / rotary_dim) rounded to f32, as the CPU reference computes it.
  const int64_t half = rotary_dim / 2;
  std::vector<float> host(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    host[i] = static_cast<float>(1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / rotary_dim));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<kiln::Storage> s, ctx_->memory().allocate(half * sizeof(float), ctx_));
  Tensor t(std::move(s), DType::kF32, {half});
  KILN_RETURN_IF_ERROR(ctx_->upload(host.data(), locate(t), half * sizeof(float)));
  inv_freq_.emplace(std::pair{theta, rotary_dim}, t);
  return t;
}

Status Attention::rope(const RopeArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  auto req = [&] { return describe(a).describe(); };  // for an error's text only
  if (!strides_fit(a.q)) return strides_error(req(), "q");
  if (!strides_fit(a.k)) return strides_error(req(), "k");
  const int64_t tokens = a.q.dim(0);
  if (tokens == 0) return {};
  KILN_ASSIGN_OR_RETURN(Tensor freq, inv_freq(a.theta, a.rotary_dim));
  struct {
    uint64_t q, k, positions, inv_freq;
    uint32_t tokens, q_heads, kv_heads, half, q_stride0, q_stride1, k_stride0, k_stride1;
  } p{address(a.q),       address(a.k),       address(a.positions),  address(freq),
      u32(tokens),        u32(a.q.dim(1)),    u32(a.k.dim(1)),       u32(a.rotary_dim / 2),
      u32(a.q.stride(0)), u32(a.q.stride(1)), u32(a.k.stride(0)),    u32(a.k.stride(1))};
  return ctx_->dispatch("rope", p, ctx_->grid(static_cast<uint64_t>(tokens)));
}

Status Attention::write_kv(const KvWriteArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  auto req = [&] { return describe(a).describe(); };  // for an error's text only
  if (!strides_fit(a.k)) return strides_error(req(), "k");
  if (!strides_fit(a.v)) return strides_error(req(), "v");
  const int64_t slots = a.k_cache.dim(0) * a.k_cache.dim(1);
  if (slots >= int64_t{1} << 31) return invalid_argument(req() + ": 2^31 cache slots or more (slots are i32)");
  const int64_t elements = a.k.dim(0) * a.k.dim(1) * a.k.dim(2);
  if (elements == 0) return {};
  struct {
    uint64_t k, v, k_cache, v_cache, slot_mapping;
    uint32_t tokens, kv_heads, head_dim, slots, k_stride0, k_stride1, v_stride0, v_stride1;
  } p{address(a.k),       address(a.v),       address(a.k_cache),  address(a.v_cache),  address(a.slot_mapping),
      u32(a.k.dim(0)),    u32(a.k.dim(1)),    u32(a.k.dim(2)),     u32(slots),          u32(a.k.stride(0)),
      u32(a.k.stride(1)), u32(a.v.stride(0)), u32(a.v.stride(1))};
  return ctx_->dispatch("kv_write", p, ctx_->grid(static_cast<uint64_t>((elements + 255) / 256)));
}

Status Attention::attend(const AttentionArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  auto req = [&] { return describe(a).describe(); };  // for an error's text only
  if (a.kept != nullptr) *a.kept = Tensor();  // nothing kept: a backward recomputes the softmax
  for (auto [t, n] : {std::pair{&a.q, "q"}, std::pair{&a.gate, "gate"}, std::pair{&a.out, "out"}})
    if (t->defined() && !strides_fit(*t)) return strides_error(req(), n);
  const BatchLayout& l = *a.layout;
  const int64_t tokens = a.q.dim(0), q_heads = a.q.dim(1), D = a.q.dim(2);
  const int64_t kv_heads = a.k_cache.dim(2), block_size = a.k_cache.dim(1), cache_blocks = a.k_cache.dim(0);
  if (cache_blocks * block_size >= kU32) return invalid_argument(req() + ": 2^32 cache slots or more");
  for (auto [t, n] : {std::pair{&a.k_cache, "k_cache"}, std::pair{&a.v_cache, "v_cache"}})
    if (address(*t) % 16 != 0) return invalid_argument(req() + ": " + n + " must start at a multiple of 16 bytes");
  if (tokens == 0) return {};
  // Rows whose history is shorter than their new tokens are not checked here (the kv_lens live on
  // the device); their first tokens see no key and get zeros.
  KILN_ASSIGN_OR_RETURN(const bool tiled, attend_tiled(a));
  if (tiled) return {};
  const int64_t group = q_heads / kv_heads, G = heads_per_workgroup(group);
  const int64_t groups = tokens * kv_heads * (group / G);

  // Splits over the keys where the workgroups are few and the rows long. The layout's max_kv_len
  // bounds every row's history (a replayed decode's covers every length its tables hold).
  int64_t splits = 1, split_keys = 0;
  if (groups < kSplitBelowGroups && l.max_kv_len >= 2 * kMinSplitKeys) {
    splits = std::min((l.max_kv_len + kMinSplitKeys - 1) / kMinSplitKeys,
                      (kSplitBelowGroups + groups - 1) / groups);
    split_keys = ((l.max_kv_len + splits - 1) / splits + kTileKeys - 1) / kTileKeys * kTileKeys;
    splits = (l.max_kv_len + split_keys - 1) / split_keys;
  }

  struct {
    uint64_t q, gate, out, k_cache, v_cache, cu_seqlens, kv_lens, block_tables;
    uint32_t tokens, rows, q_heads, kv_heads, head_dim, block_size, max_blocks, cache_blocks;
    uint32_t q_stride0, q_stride1, g_stride0, g_stride1, o_stride0, o_stride1, split_keys;
    float scale;
  } p{address(a.q),        address(a.gate),          address(a.out),         address(a.k_cache),
      address(a.v_cache),  address(l.cu_seqlens),    address(l.kv_lens),     address(l.block_tables),
      u32(tokens),         u32(l.rows),              u32(q_heads),           u32(kv_heads),
      u32(D),              u32(block_size),          u32(l.block_tables.dim(1)), u32(cache_blocks),
      u32(a.q.stride(0)),  u32(a.q.stride(1)),       0,                      0,
      u32(a.out.stride(0)), u32(a.out.stride(1)),    u32(split_keys),        a.scale};
  if (a.gate.defined()) {
    p.g_stride0 = u32(a.gate.stride(0));
    p.g_stride1 = u32(a.gate.stride(1));
  }
  // Wide heads: two vec4s a lane in the value pass, the per-key shared reads shared by more dims.
  const int64_t vec4s_per_lane = D >= 128 && (D / 4) % 2 == 0 ? 2 : 1;
  const Spec spec{u32(G), u32(D / 4), u32(vec4s_per_lane), 0};
  std::array<uint32_t, 3> grid = ctx_->grid(static_cast<uint64_t>(groups));
  if (splits == 1) return ctx_->dispatch("attention", p, grid, spec);

  // Each split's record: acc[D], max, sum (attention.comp), by (token, head, split).
  const int64_t record = D + 2, bytes = tokens * q_heads * splits * record * int64_t{sizeof(float)};
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<kiln::Storage> s, ctx_->memory().allocate(bytes, ctx_));
  Tensor partial(std::move(s), DType::kF32, {tokens * q_heads * splits * record});
  p.out = address(partial);
  p.o_stride0 = u32(q_heads * splits * record);
  p.o_stride1 = u32(splits * record);
  grid[2] = u32(splits);
  KILN_RETURN_IF_ERROR(ctx_->dispatch("attention", p, grid, spec));
  struct {
    uint64_t partial, gate, out;
    uint32_t tokens, q_heads, head_dim, splits, g_stride0, g_stride1, o_stride0, o_stride1;
  } c{address(partial), address(a.gate),       address(a.out),        u32(tokens),
      u32(q_heads),     u32(D),                u32(splits),           p.g_stride0,
      p.g_stride1,      u32(a.out.stride(0)),  u32(a.out.stride(1))};
  // The scratch goes back to the pool on return: later work that reuses it is ordered after these.
  return ctx_->dispatch("attention_combine", c, ctx_->grid(static_cast<uint64_t>(tokens * q_heads)));
}

Result<bool> Attention::attend_tiled(const AttentionArgs& a) {
  const BatchLayout& l = *a.layout;
  const int64_t q_heads = a.q.dim(1), D4 = a.q.dim(2) / 4;
  const int64_t kv_heads = a.k_cache.dim(2), group = q_heads / kv_heads, G = heads_per_workgroup(group);
  if (!tiled_prefill_ || l.phase != Phase::kPrefill || l.host_cu_seqlens.size() != static_cast<size_t>(l.rows + 1) ||
      l.max_q_len < kTiledMinTokens || kTiledInvocations % D4 != 0)
    return false;
  // vec4 reads and writes: 16-byte aligned rows and heads.
  for (const Tensor* t : {&a.q, &a.gate, &a.out})
    if (t->defined() && (address(*t) % 16 != 0 || t->stride(0) % 4 != 0 || t->stride(1) % 4 != 0 || t->stride(2) != 1))
      return false;
  // The most query rows a tile, then the most keys a step, that the device's shared memory holds.
  int64_t M = 0, BK = 0;
  for (int64_t m : kTiledRows) {
    for (int64_t bk : kTiledKeys)
      if (m >= G && tiled_shared_bytes(m, bk, D4) <= ctx_->info().shared_memory_bytes) {
        M = m;
        BK = bk;
        break;
      }
    if (M > 0) break;
  }
  if (M == 0) return false;
  const int64_t BQ = M / G;

  // The tiles: (row, first token, tokens, the row's end), BQ tokens of one row each.
  std::vector<uint32_t> tiles;
  for (int64_t r = 0; r < l.rows; ++r) {
    const int32_t begin = l.host_cu_seqlens[r], end = l.host_cu_seqlens[r + 1];
    for (int32_t t = begin; t < end; t += static_cast<int32_t>(BQ))
      tiles.insert(tiles.end(), {u32(r), u32(t), u32(std::min<int64_t>(BQ, end - t)), u32(end)});
  }
  const int64_t n_tiles = static_cast<int64_t>(tiles.size() / 4);
  if (n_tiles == 0) return true;
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<kiln::Storage> s, ctx_->memory().allocate(tiles.size() * 4, ctx_));
  Tensor tile_t(std::move(s), DType::kI32, {static_cast<int64_t>(tiles.size())});
  KILN_RETURN_IF_ERROR(ctx_->upload(tiles.data(), locate(tile_t), tiles.size() * 4));

  struct {
    uint64_t q, gate, out, k_cache, v_cache, tiles, kv_lens, block_tables;
    uint32_t n_tiles, q_heads, kv_heads, block_size, max_blocks, cache_blocks;
    uint32_t q_stride0, q_stride1, g_stride0, g_stride1, o_stride0, o_stride1;
    float scale;
  } p{address(a.q),          address(a.gate),       address(a.out),         address(a.k_cache),
      address(a.v_cache),    address(tile_t),       address(l.kv_lens),     address(l.block_tables),
      u32(n_tiles),          u32(q_heads),          u32(kv_heads),          u32(a.k_cache.dim(1)),
      u32(l.block_tables.dim(1)), u32(a.k_cache.dim(0)), u32(a.q.stride(0)), u32(a.q.stride(1)),
      0,                     0,                     u32(a.out.stride(0)),   u32(a.out.stride(1)),
      a.scale};
  if (a.gate.defined()) {
    p.g_stride0 = u32(a.gate.stride(0));
    p.g_stride1 = u32(a.gate.stride(1));
  }
  const Spec spec{u32(G), u32(D4), u32(BQ), u32(BK)};
  // The tile list goes back to the pool on return: later work that reuses it is ordered after this.
  KILN_RETURN_IF_ERROR(ctx_->dispatch("attention_tiled", p, ctx_->grid(static_cast<uint64_t>(n_tiles * kv_heads * (group / G))), spec));
  return true;
}

}  // namespace kiln::vulkan
