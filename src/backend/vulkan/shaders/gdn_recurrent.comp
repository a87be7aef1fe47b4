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
// with q and k l2-normalised (eps 1e-6; q also scaled by 1/sqrt(DK)). The norms' sums are
// gathered with the first column sums, so S'^T k is summed over the raw k and scaled after.
// A slot outside the pool leaves the row untouched.
#include "common.glsl"
layout(constant_id = 0) const uint T = 128;    // invocations: COLS * P
layout(constant_id = 1) const uint DK = 128;
layout(constant_id = 2) const uint COLS = 128;  // columns of the state a workgroup (DV / slices)
layout(constant_id = 3) const uint RATIO = 1;  // value heads per key head
layout(local_size_x_id = 0) in;
const uint P = T / COLS;          // parts of a column
const uint R = (DK + P - 1) / P;  // state entries an invocation holds
const bool WHOLE = DK % P == 0;   // every invocation's R entries exist: no bound to test

layout(push_constant) uniform Push {
  uint64_t q, k, v, a, b, a_log, dt_bias, state, out_, cu_seqlens, state_slots;
  uint q_stride, k_stride, qk_head_strides, v_stride, v_head_stride, a_stride, b_stride, out_stride, out_head_stride,
      slots;
} p;

shared float qs[DK], ks[DK], vs[COLS];  // this token's raw q and k, and v's slice
shared float gates[2];                // decay, beta
shared vec2 norm_parts[P];            // partial |k|^2, |q|^2
shared float u_parts[T], o_parts[T];  // partial column sums, [P, COLS]

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

  for (uint t = t0; t < t1; ++t) {
    // This token's inputs. (Every read of the previous token's ended before its last barrier.)
    const uint64_t qt = advance(p.q, uint64_t(t) * p.q_stride + kh * q_head_stride, DTYPE_F32);
    const uint64_t kt = advance(p.k, uint64_t(t) * p.k_stride + kh * k_head_stride, DTYPE_F32);
    for (uint i = tid; i < DK; i += T) {
      qs[i] = F32(qt).v[i];
      ks[i] = F32(kt).v[i];
    }
    const uint64_t vt = advance(p.v, uint64_t(t) * p.v_stride + uint64_t(h) * p.v_head_stride + c0, DTYPE_F32);
    if (tid < COLS) vs[tid] = F32(vt).v[tid];
    if (tid == 0) {
      const float x = F32(advance(p.a, uint64_t(t) * p.a_stride, DTYPE_F32)).v[h] + dt_bias;
      gates[0] = exp(-A * softplus(x));
      gates[1] = 1.0 / (1.0 + exp(-F32(advance(p.b, uint64_t(t) * p.b_stride, DTYPE_F32)).v[h]));
    }
    barrier();

    // S' = decay S, and the partial sums of S'^T k (raw k), |k|^2 and |q|^2.
    const float decay = gates[0];
    float u = 0.0;
    for (uint r = 0; r < R; ++r) {
      const uint i = part + r * P;
      if (holds(i)) {
        s[r] *= decay;
        u += s[r] * ks[i];
      }
    }
    u_parts[tid] = u;
    if (j == 0) {
      vec2 n = vec2(0.0);
      for (uint r = 0; r < R; ++r) {
        const uint i = part + r * P;
        if (holds(i)) n += vec2(ks[i] * ks[i], qs[i] * qs[i]);
      }
      norm_parts[part] = n;
    }
    barrier();

    // u = beta (v - S'^T k), then S = S' + k u^T and the partial sums of S^T q.
    vec2 n = vec2(0.0);
    float uj = 0.0;
    for (uint pp = 0; pp < P; ++pp) {
      n += norm_parts[pp];
      uj += u_parts[pp * COLS + j];
    }
    const float k_inv = 1.0 / sqrt(n.x + 1e-6), q_inv = q_scale / sqrt(n.y + 1e-6);
    uj = gates[1] * (vs[j] - uj * k_inv);
    float o = 0.0;
    for (uint r = 0; r < R; ++r) {
      const uint i = part + r * P;
      if (holds(i)) {
        s[r] += (ks[i] * k_inv) * uj;
        o += s[r] * (qs[i] * q_inv);
      }
    }
    o_parts[tid] = o;
    barrier();

    if (part == 0) {
      float oj = 0.0;
      for (uint pp = 0; pp < P; ++pp) oj += o_parts[pp * COLS + j];
      F32(advance(p.out_, uint64_t(t) * p.out_stride + uint64_t(h) * p.out_head_stride + c0, DTYPE_F32)).v[j] = oj;
    }
  }

  for (uint r = 0; r < R; ++r) {
    const uint i = part + r * P;
    if (holds(i)) F32(S).v[i * DV + j] = s[r];
  }
}
