#version 450
// Paged causal GQA attention in f32: one workgroup per (query token, G query heads of one K/V
// head), so that each key and value read serves the G heads. Token t of row r sees keys
// 0..last, last = kv_len[r] - (tokens of r) + (t's place in r); key j is slot
// block_tables[r][j / block_size] * block_size + j % block_size of the caches, and a block outside
// the cache is skipped. Keys go N a tile:
//   scores: each invocation takes one key, its row read as vec4s against the G queries (held in
//     shared memory); a tree reduction takes the tile's max; the running max, sums and outputs
//     are rescaled to it (online softmax) and each key's probability goes to shared memory;
//   values: the invocations form KG key groups of LANES lanes, each lane owning VPL vec4s of
//     head_dim (consecutive lanes read consecutive vec4s of a value row); group k folds keys k,
//     k + KG, ... of the tile.
// At the end the key groups' sums are added, and out = acc / sum, times sigmoid(gate) where there
// is a gate.
//
// Split (gl_NumWorkGroups.z = splits > 1, for few long rows): workgroup z covers keys
// [z * split_keys, (z + 1) * split_keys) and writes its unnormalised record (acc[head_dim], max,
// sum) at t * o_stride0 + h * o_stride1 + z * (head_dim + 2) of `out_`, the scratch that
// attention_combine.comp reduces.
#include "common.glsl"
const uint N = 128;         // invocations, and keys a tile
const float NEG = -3.0e38;  // the score of no key (no infinities: a driver may assume there are none)
const uint NO_SLOT = 0xffffffffu;
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint G = 1;       // query heads a workgroup: a divisor of the GQA group
layout(constant_id = 1) const uint D4 = 64;     // head_dim / 4
layout(constant_id = 2) const uint VPL = 1;     // vec4s of head_dim a lane of the value pass (divides D4)
const uint LANES = D4 / VPL;                    // lanes of a key group
const uint KG = N / LANES;                      // key groups of the value pass

layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4 { vec4 v[]; };

layout(push_constant) uniform P {
  uint64_t q, gate, out_, k_cache, v_cache, cu_seqlens, kv_lens, block_tables;
  uint tokens, rows, q_heads, kv_heads, head_dim, block_size, max_blocks, cache_blocks;
  uint q_stride0, q_stride1, g_stride0, g_stride1, o_stride0, o_stride1, split_keys;
  float scale;
} p;

shared vec4 q_s[G * D4];
shared float score_s[G * N];  // the tile's scores, then its probabilities
shared float max_s[G * N];    // the tile's max, by reduction
shared uint slot_s[N];        // the tile's cache slots (NO_SLOT: skipped)
shared vec4 acc_s[N];         // the key groups' sums, added at the end
shared float sum_s[N];

void main() {
  const uint lid = gl_LocalInvocationID.x, D = D4 * 4u;
  const uint group = p.q_heads / p.kv_heads, chunks = group / G;
  const uint wg = flat_group();
  const uint t = wg / (p.kv_heads * chunks);
  if (t >= p.tokens) return;
  const uint kvh = (wg / chunks) % p.kv_heads;
  const uint h0 = kvh * group + (wg % chunks) * G;

  // The row owning t: the last r with cu_seqlens[r] <= t.
  uint lo = 0u, hi = p.rows - 1u;
  while (lo < hi) {
    const uint mid = (lo + hi + 1u) / 2u;
    if (I32(p.cu_seqlens).v[mid] <= int(t)) lo = mid;
    else hi = mid - 1u;
  }
  const uint row = lo;
  const int row_begin = I32(p.cu_seqlens).v[row], row_end = I32(p.cu_seqlens).v[row + 1u];
  const int last = I32(p.kv_lens).v[row] - (row_end - row_begin) + (int(t) - row_begin);
  const uint split = gl_WorkGroupID.z, splits = gl_NumWorkGroups.z;
  const int begin = splits > 1u ? int(split * p.split_keys) : 0;
  const int end = splits > 1u ? min(last + 1, int((split + 1u) * p.split_keys)) : last + 1;

  for (uint i = lid; i < G * D; i += N) {
    const uint g = i / D, e = i % D;
    q_s[g * D4 + e / 4u][e % 4u] =
        F32(advance(p.q, uint64_t(t) * p.q_stride0 + uint64_t(h0 + g) * p.q_stride1, DTYPE_F32)).v[e];
  }

  vec4 acc[G * VPL];
  float m[G], l[G];
  for (uint g = 0u; g < G; ++g) {
    for (uint i = 0u; i < VPL; ++i) acc[g * VPL + i] = vec4(0.0);
    m[g] = NEG;
    l[g] = 0.0;
  }
  const uint64_t kv_row = uint64_t(p.kv_heads) * D;  // floats a cache slot
  const uint table = row * p.max_blocks;
  const uint kg = lid / LANES, lane = lid % LANES;
  barrier();

  for (int j0 = begin; j0 < end; j0 += int(N)) {
    const uint n = min(N, uint(end - j0));
    // Score this invocation's key against the G queries.
    uint slot = NO_SLOT;
    if (lid < n) {
      const uint j = uint(j0) + lid;
      const int block = I32(p.block_tables).v[table + j / p.block_size];
      if (block >= 0 && uint(block) < p.cache_blocks) slot = uint(block) * p.block_size + j % p.block_size;
    }
    slot_s[lid] = slot;
    float d[G];
    for (uint g = 0u; g < G; ++g) d[g] = 0.0;
    if (slot != NO_SLOT) {
      V4 k = V4(advance(p.k_cache, uint64_t(slot) * kv_row + uint64_t(kvh) * D, DTYPE_F32));
      for (uint e4 = 0u; e4 < D4; ++e4) {
        const vec4 x = k.v[e4];
        for (uint g = 0u; g < G; ++g) d[g] += dot(q_s[g * D4 + e4], x);
      }
    }
    for (uint g = 0u; g < G; ++g) {
      const float s = slot != NO_SLOT ? d[g] * p.scale : NEG;
      score_s[g * N + lid] = s;
      max_s[g * N + lid] = s;
    }
    for (uint half_ = N / 2u; half_ > 0u; half_ /= 2u) {
      barrier();
      if (lid < half_)
        for (uint g = 0u; g < G; ++g) max_s[g * N + lid] = max(max_s[g * N + lid], max_s[g * N + lid + half_]);
    }
    barrier();
    // The new running max; this invocation's key's probability; the old sums rescaled.
    for (uint g = 0u; g < G; ++g) {
      const float m_new = max(m[g], max_s[g * N]);
      const float correction = exp(m[g] - m_new);  // 0 while m is NEG, 1 while both are
      l[g] *= correction;
      for (uint i = 0u; i < VPL; ++i) acc[g * VPL + i] *= correction;
      m[g] = m_new;
      score_s[g * N + lid] = slot != NO_SLOT ? exp(score_s[g * N + lid] - m_new) : 0.0;
    }
    barrier();
    // Fold this key group's keys of the tile into its lane's vec4 of the output.
    if (kg < KG) {
      for (uint jj = kg; jj < n; jj += KG) {
        const uint sj = slot_s[jj];
        if (sj == NO_SLOT) continue;
        V4 v = V4(advance(p.v_cache, uint64_t(sj) * kv_row + uint64_t(kvh) * D, DTYPE_F32));
        vec4 x[VPL];
        for (uint i = 0u; i < VPL; ++i) x[i] = v.v[lane + i * LANES];
        for (uint g = 0u; g < G; ++g) {
          const float pj = score_s[g * N + jj];
          l[g] += pj;
          for (uint i = 0u; i < VPL; ++i) acc[g * VPL + i] += pj * x[i];
        }
      }
    }
    barrier();  // slot_s, score_s and max_s are rewritten by the next tile
  }

  for (uint gi = 0u; gi < G * VPL; ++gi) {
    const uint g = gi / VPL, i = gi % VPL;
    acc_s[lid] = acc[gi];
    sum_s[lid] = l[g];
    barrier();
    if (lid < LANES) {
      vec4 a = vec4(0.0);
      float sum = 0.0;
      for (uint k = 0u; k < KG; ++k) {
        a += acc_s[k * LANES + lid];
        sum += sum_s[k * LANES + lid];
      }
      const uint e4 = lid + i * LANES;
      const uint h = h0 + g;
      F32 o = F32(advance(p.out_, uint64_t(t) * p.o_stride0 + uint64_t(h) * p.o_stride1 + split * (D + 2u), DTYPE_F32));
      if (splits > 1u) {
        for (uint c = 0u; c < 4u; ++c) o.v[4u * e4 + c] = a[c];
        if (gi % VPL == 0u && lid == 0u) {
          o.v[D] = m[g];
          o.v[D + 1u] = sum;
        }
      } else {
        // A token that sees no key (every block outside the cache) gets zeros.
        const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
        for (uint c = 0u; c < 4u; ++c) {
          const uint e = 4u * e4 + c;
          float y = a[c] * inv;
          if (p.gate != 0ul) {
            const float z = F32(advance(p.gate, uint64_t(t) * p.g_stride0 + uint64_t(h) * p.g_stride1, DTYPE_F32)).v[e];
            y /= 1.0 + exp(-z);
          }
          o.v[e] = y;
        }
      }
    }
    barrier();  // acc_s and sum_s are rewritten for the next head or vec4
  }
}
