#version 450
// Paged causal GQA attention in f32 for prefill: one workgroup per (tile of up to BQ query tokens
// of one row, G query heads of one K/V head), so that each key and value row read from the cache
// serves M = BQ * G query rows (attention.comp serves G). The host lists the tiles (`tiles`:
// row, first token, tokens, the row's end). Token t of row r sees keys 0..last, last = kv_len[r] - (tokens of r)
// + (t's place in r); key j is slot block_tables[r][j / block_size] * block_size + j % block_size
// of the caches, and a block outside the cache is skipped. The tile's queries stay in shared
// memory; keys go BK a step:
//   the step's key rows are read into shared memory (consecutive invocations, consecutive vec4s);
//   scores: invocation i takes (query row, key) pairs i, i + 256, ... (keys fastest);
//   softmax: one invocation a query row folds the step's scores into its running max and sum
//     (online softmax) and leaves each key's probability and the row's rescaling factor;
//   values: the step's value rows replace its keys in shared memory; invocation i owns vec4
//     i % D4 of head_dim for query rows i / D4, i / D4 + 256 / D4, ..., in registers.
// At the end out = acc / sum, times sigmoid(gate) where there is a gate; a token that sees no
// key gets zeros.
#include "common.glsl"
const uint N = 256;         // invocations
const float NEG = -3.0e38;  // the score of no key (no infinities: a driver may assume there are none)
const uint NO_SLOT = 0xffffffffu;
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint G = 1;    // query heads a workgroup: a divisor of the GQA group
layout(constant_id = 1) const uint D4 = 64;  // head_dim / 4, a divisor of N
layout(constant_id = 2) const uint BQ = 8;   // query tokens a tile
layout(constant_id = 3) const uint BK = 8;   // keys a step
const uint M = BQ * G;                       // query rows a workgroup (row m: token m / G, head m % G)
const uint DP = D4 + 1u;                     // a shared row's vec4s, padded against bank conflicts
const uint RG = N / D4;                      // query rows the value pass covers at once
const uint RPI = (M + RG - 1u) / RG;         // query rows an invocation owns in the value pass

layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4 { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Tiles { uvec4 t[]; };

layout(push_constant) uniform P {
  uint64_t q, gate, out_, k_cache, v_cache, tiles, kv_lens, block_tables;
  uint n_tiles, q_heads, kv_heads, block_size, max_blocks, cache_blocks;
  uint q_stride0, q_stride1, g_stride0, g_stride1, o_stride0, o_stride1;
  float scale;
} p;

shared vec4 q_s[M * DP];
shared vec4 kv_s[BK * DP];  // the step's key rows, then its value rows
shared float p_s[M * BK];   // the step's scores, then its probabilities
shared float corr_s[M];     // each query row's rescaling factor for the step
shared float sum_s[M];      // each query row's running sum, at the end
shared uint slot_s[BK];     // the step's cache slots (NO_SLOT: skipped)

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint group = p.q_heads / p.kv_heads, chunks = group / G;
  const uint wg = flat_group();
  const uint tile = wg / (p.kv_heads * chunks);
  if (tile >= p.n_tiles) return;
  const uint kvh = (wg / chunks) % p.kv_heads;
  const uint h0 = kvh * group + (wg % chunks) * G;
  const uvec4 td = Tiles(p.tiles).t[tile];  // row, first token, tokens, the row's end
  const uint row = td.x, t0 = td.y, nt = td.z;
  // Token t0 + i sees keys 0..last0 + i (the row's history ends with its last token's key).
  const int last0 = I32(p.kv_lens).v[row] - int(td.w) + int(t0);
  const int end = last0 + int(nt);  // keys [0, end) are seen by some token of the tile

  for (uint i = lid; i < M * D4; i += N) {
    const uint m = i / D4, e4 = i % D4;
    const uint tok = m / G;
    vec4 x = vec4(0.0);
    if (tok < nt)
      x = V4(advance(p.q, uint64_t(t0 + tok) * p.q_stride0 + uint64_t(h0 + m % G) * p.q_stride1, DTYPE_F32)).v[e4];
    q_s[m * DP + e4] = x;
  }
  float run_max = NEG, run_sum = 0.0;  // invocation lid < M: query row lid's
  vec4 acc[RPI];
  for (uint r = 0u; r < RPI; ++r) acc[r] = vec4(0.0);
  const uint c4 = lid % D4, mr = lid / D4;  // the value pass: this invocation's vec4 and first row
  const uint64_t kv_row = uint64_t(p.kv_heads) * D4 * 4u;  // floats a cache slot
  const uint table = row * p.max_blocks;

  for (int j0 = 0; j0 < end; j0 += int(BK)) {
    barrier();  // the previous step's values and probabilities are consumed
    if (lid < BK) {
      const uint j = uint(j0) + lid;
      uint slot = NO_SLOT;
      if (int(j) < end) {
        const int block = I32(p.block_tables).v[table + j / p.block_size];
        if (block >= 0 && uint(block) < p.cache_blocks) slot = uint(block) * p.block_size + j % p.block_size;
      }
      slot_s[lid] = slot;
    }
    barrier();
    for (uint i = lid; i < BK * D4; i += N) {
      const uint jj = i / D4, e4 = i % D4, slot = slot_s[jj];
      kv_s[jj * DP + e4] =
          slot != NO_SLOT ? V4(advance(p.k_cache, uint64_t(slot) * kv_row + uint64_t(kvh) * D4 * 4u, DTYPE_F32)).v[e4]
                          : vec4(0.0);
    }
    barrier();
    for (uint i = lid; i < M * BK; i += N) {
      const uint m = i / BK, jj = i % BK;
      float d = 0.0;
      for (uint e4 = 0u; e4 < D4; ++e4) d += dot(q_s[m * DP + e4], kv_s[jj * DP + e4]);
      p_s[i] = d * p.scale;
    }
    barrier();
    // The values replace the keys while each query row's softmax step runs.
    for (uint i = lid; i < BK * D4; i += N) {
      const uint jj = i / D4, e4 = i % D4, slot = slot_s[jj];
      kv_s[jj * DP + e4] =
          slot != NO_SLOT ? V4(advance(p.v_cache, uint64_t(slot) * kv_row + uint64_t(kvh) * D4 * 4u, DTYPE_F32)).v[e4]
                          : vec4(0.0);
    }
    if (lid < M) {
      const int last = last0 + int(lid / G);
      float step_max = NEG;
      for (uint jj = 0u; jj < BK; ++jj) {
        const int j = j0 + int(jj);
        if (j <= last && slot_s[jj] != NO_SLOT) step_max = max(step_max, p_s[lid * BK + jj]);
      }
      const float m_new = max(run_max, step_max);
      const float corr = exp(run_max - m_new);  // 0 while the row has seen no key, 1 while unchanged
      float s = 0.0;
      for (uint jj = 0u; jj < BK; ++jj) {
        const int j = j0 + int(jj);
        const float e = j <= last && slot_s[jj] != NO_SLOT ? exp(p_s[lid * BK + jj] - m_new) : 0.0;
        p_s[lid * BK + jj] = e;
        s += e;
      }
      run_sum = run_sum * corr + s;
      run_max = m_new;
      corr_s[lid] = corr;
    }
    barrier();
    for (uint r = 0u; r < RPI; ++r) {
      const uint m = mr + r * RG;
      if (m >= M) break;
      vec4 a = acc[r] * corr_s[m];
      for (uint jj = 0u; jj < BK; ++jj) a += p_s[m * BK + jj] * kv_s[jj * DP + c4];
      acc[r] = a;
    }
  }

  if (lid < M) sum_s[lid] = run_sum;
  barrier();
  for (uint r = 0u; r < RPI; ++r) {
    const uint m = mr + r * RG;
    if (m >= M) break;
    const uint tok = m / G;
    if (tok >= nt) continue;
    const uint t = t0 + tok, h = h0 + m % G;
    const float sum = sum_s[m];
    const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
    vec4 y = acc[r] * inv;
    if (p.gate != 0ul) {
      const vec4 z = V4(advance(p.gate, uint64_t(t) * p.g_stride0 + uint64_t(h) * p.g_stride1, DTYPE_F32)).v[c4];
      y /= vec4(1.0) + exp(-z);
    }
    V4(advance(p.out_, uint64_t(t) * p.o_stride0 + uint64_t(h) * p.o_stride1, DTYPE_F32)).v[c4] = y;
  }
}
