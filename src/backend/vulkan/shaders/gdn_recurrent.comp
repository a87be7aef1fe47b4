#version 450
// The gated delta rule, token by token (the CPU's recurrent form), continuing each row's f32
// state from its slot and writing it back. One workgroup a (value head, row, slice of the state's
// columns): x is the head, y the row, z the slice of COLS columns (columns are independent but for
// the norms of q and k, which every slice computes). The slice of the head's state S [DK, DV]
// stays in registers for the whole row: invocation (j, part) holds column j's entries i = part,
// part + P, ... (R of them), so a token's column sums (u = S^T k, o = S^T q) are P partial sums
// added through shared memory. Per token:
//   decay = exp(g), g = -exp(a_log) * softplus(a + dt_bias); beta = sigmoid(b)
//   S' = decay * S;  u = beta * (v - S'^T k);  S = S' + k u^T;  o = S^T q
// with q and k l2-normalised (eps 1e-6; q also scaled by 1/sqrt(DK)).
// The row's tokens go in stages of up to TC: a stage's q, k, v slice and gates are loaded into
// shared memory together (one wait on global memory a stage, not one a token), its q and k
// normalised there, and its outputs' partial sums kept in shared memory until the stage ends; so a
// token costs one barrier (its u sums, double-buffered so that the next token's writes cannot
// meet this one's reads). A slot outside the pool leaves the row untouched.
#include "common.glsl"
layout(constant_id = 0) const uint T = 128;    // invocations: COLS * P
layout(constant_id = 1) const uint DK = 128;
layout(constant_id = 2) const uint COLS = 128;  // columns of the state a workgroup (DV / slices)
layout(constant_id = 3) const uint RATIO = 1;  // value heads per key head
layout(constant_id = 4) const uint TC = 1;     // tokens a stage (from the device's shared memory)
layout(local_size_x_id = 0) in;
const uint P = T / COLS;          // parts of a column
const uint R = (DK + P - 1) / P;  // state entries an invocation holds
const bool WHOLE = DK % P == 0;   // every invocation's R entries exist: no bound to test

layout(push_constant) uniform Push {
  uint64_t q, k, v, a, b, a_log, dt_bias, state, out_, cu_seqlens, state_slots;
  uint q_stride, k_stride, qk_head_strides, v_stride, v_head_stride, a_stride, b_stride, out_stride, out_head_stride,
      slots;
} p;

// A stage: q and k [TC, DK] (normalised in place), v's slice [TC, COLS], each token's decay,
// beta and the inverse norms; the u partial sums of two tokens [2, P, COLS]; the o partial sums
// of the stage's tokens [TC, P, COLS].
shared float qs[TC * DK], ks[TC * DK], vs[TC * COLS];
shared float decays[TC], betas[TC], q_inv[TC], k_inv[TC];
shared float u_parts[2 * T], o_parts[TC * T];

bool holds(uint i) { return WHOLE || i < DK; }

// log(1 + e) for e in [0, 1] as 2 atanh(e / (2 + e)) (z <= 1/3: the series converges fast),
// accurate without a log1p or a precise log near 1.
float log1p_unit(float e) {
  const float z = e / (2.0 + e), z2 = z * z;
  float s = 1.0 / 17.0;
  for (int n = 15; n >= 1; n -= 2) s = s * z2 + 1.0 / float(n);
  return 2.0 * z * s;
}
float softplus(float x) { return max(x, 0.0) + log1p_unit(exp(-abs(x))); }

void main() {
  const uint h = gl_WorkGroupID.x, row = gl_WorkGroupID.y, v_heads = gl_NumWorkGroups.x;
  const uint tid = gl_LocalInvocationID.x, j = tid % COLS, part = tid / COLS;
  const uint DV = COLS * gl_NumWorkGroups.z, c0 = gl_WorkGroupID.z * COLS;  // c0: the slice's first column
  const int slot = I32(p.state_slots).v[row];
  if (slot < 0 || uint(slot) >= p.slots) return;  // the whole workgroup alike
  const uint t0 = uint(I32(p.cu_seqlens).v[row]), t1 = uint(I32(p.cu_seqlens).v[row + 1]);
  const uint kh = h / RATIO;
  const uint q_head_stride = p.qk_head_strides & 0xffffu, k_head_stride = p.qk_head_strides >> 16;
  const uint64_t S = advance(p.state, (uint64_t(slot) * v_heads + h) * (DK * DV) + c0, DTYPE_F32);

  float s[R];
  for (uint r = 0; r < R; ++r) {
    const uint i = part + r * P;
    s[r] = holds(i) ? F32(S).v[i * DV + j] : 0.0;
  }
  const float A = exp(F32(p.a_log).v[h]), dt_bias = F32(p.dt_bias).v[h];
  const float q_scale = 1.0 / sqrt(float(DK));

  uint buf = 0;
  for (uint ts = t0; ts < t1; ts += TC) {
    const uint n = min(TC, t1 - ts);
    // Load the stage. (The previous stage's last reads of these arrays ended before its closing
    // barrier.)
    for (uint e = tid; e < n * DK; e += T) {
      const uint tl = e / DK, i = e % DK;
      qs[e] = F32(advance(p.q, uint64_t(ts + tl) * p.q_stride + kh * q_head_stride, DTYPE_F32)).v[i];
      ks[e] = F32(advance(p.k, uint64_t(ts + tl) * p.k_stride + kh * k_head_stride, DTYPE_F32)).v[i];
    }
    for (uint e = tid; e < n * COLS; e += T) {
      const uint tl = e / COLS, c = e % COLS;
      vs[e] = F32(advance(p.v, uint64_t(ts + tl) * p.v_stride + uint64_t(h) * p.v_head_stride + c0, DTYPE_F32)).v[c];
    }
    for (uint tl = tid; tl < n; tl += T) {
      const float x = F32(advance(p.a, uint64_t(ts + tl) * p.a_stride, DTYPE_F32)).v[h] + dt_bias;
      decays[tl] = exp(-A * softplus(x));
      betas[tl] = 1.0 / (1.0 + exp(-F32(advance(p.b, uint64_t(ts + tl) * p.b_stride, DTYPE_F32)).v[h]));
    }
    barrier();
    for (uint tl = tid; tl < n; tl += T) {
      vec2 nn = vec2(0.0);
      for (uint i = 0; i < DK; ++i) nn += vec2(ks[tl * DK + i] * ks[tl * DK + i], qs[tl * DK + i] * qs[tl * DK + i]);
      k_inv[tl] = 1.0 / sqrt(nn.x + 1e-6);
      q_inv[tl] = q_scale / sqrt(nn.y + 1e-6);
    }
    barrier();
    for (uint e = tid; e < n * DK; e += T) {
      ks[e] *= k_inv[e / DK];
      qs[e] *= q_inv[e / DK];
    }
    barrier();

    for (uint tl = 0; tl < n; ++tl) {
      // S' = decay S, and the partial sums of S'^T k.
      const float decay = decays[tl];
      float u = 0.0;
      for (uint r = 0; r < R; ++r) {
        const uint i = part + r * P;
        if (holds(i)) {
          s[r] *= decay;
          u += s[r] * ks[tl * DK + i];
        }
      }
      u_parts[buf * T + tid] = u;
      barrier();
      // u = beta (v - S'^T k), then S = S' + k u^T and the partial sums of S^T q.
      float uj = 0.0;
      for (uint pp = 0; pp < P; ++pp) uj += u_parts[buf * T + pp * COLS + j];
      uj = betas[tl] * (vs[tl * COLS + j] - uj);
      float o = 0.0;
      for (uint r = 0; r < R; ++r) {
        const uint i = part + r * P;
        if (holds(i)) {
          s[r] += ks[tl * DK + i] * uj;
          o += s[r] * qs[tl * DK + i];
        }
      }
      o_parts[tl * T + tid] = o;
      buf ^= 1u;
    }
    barrier();

    // The stage's outputs: each column's P partial sums.
    for (uint e = tid; e < n * COLS; e += T) {
      const uint tl = e / COLS, c = e % COLS;
      float oj = 0.0;
      for (uint pp = 0; pp < P; ++pp) oj += o_parts[tl * T + pp * COLS + c];
      F32(advance(p.out_, uint64_t(ts + tl) * p.out_stride + uint64_t(h) * p.out_head_stride + c0, DTYPE_F32)).v[c] = oj;
    }
  }

  for (uint r = 0; r < R; ++r) {
    const uint i = part + r * P;
    if (holds(i)) F32(S).v[i * DV + j] = s[r];
  }
}
