#version 450
// Each row's token drawn on the device, by the transforms of backend/sampling_math.h in their
// order: a structured-output row's logit biases and token mask (apply_bias_and_mask), repetition,
// presence and frequency penalties (the host sends each row's distinct penalised tokens, biased
// ids and mask words), temperature, top-k, softmax, min-p, top-p, then the token whose interval of
// cumulative probability (in index order) holds u; a greedy row (temperature 0) takes the first
// largest logit. Then the token's logprob under the final distribution and the row's most likely
// alternatives (ties: lower id first; tokens the cuts removed, probability 0, come after every
// kept one). One workgroup a row.
//
// In f32, against the reference's f64: probabilities are kept unnormalised, e = exp(w - max),
// so that min-p compares e with min_p, top-p's target is (top_p - 1e-6) times the kept mass, the
// draw compares u times the final mass with running sums, and a logprob is (w - max) - log(mass).
// Only where u or the top-p target lies within f32 rounding of an interval boundary can the token
// differ from the reference's.
//
// Every pass gives invocation i the contiguous index range [i * chunk, (i + 1) * chunk), so that
// "the first tokens in index order" (top-p's tied tokens, the draw, tied alternatives) follow
// from per-range counts and sums. Thresholds are found by radix selection over an
// order-preserving uint image of the logits: top-k's and the alternatives' by counts (8-bit
// digits, shared atomics), top-p's by masses (4-bit digits, per-invocation sums added in a fixed
// tree, so that a call gives the same tokens every time).
#include "common.glsl"
const uint N = 256u;
layout(local_size_x = 256) in;

// One row's request (48 bytes, std430; vulkan/sampling.cc's SampleRowParams).
// `mask`: the first of the row's mask words in Masks, NONE for every id allowed.
struct Row {
  float u, temperature, top_p, min_p, repetition_penalty;
  int top_k, top_n;
  uint pen_offset, pen_count, mask, bias_offset, bias_count;
};
// A penalised token of a row: repeat != 0 applies the repetition penalty; then minus `sub`
// (presence + frequency * count, rounded once on the host as the reference rounds it).
struct Pen {
  int token;
  uint repeat;
  float sub;
  uint pad;
};
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Rows { Row r[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Pens { Pen e[]; };
// A biased id of a row and its bias (distinct ids).
struct Bias {
  int token;
  float value;
};
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Biases { Bias e[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Masks { uint w[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer Work { float v[]; };

layout(push_constant) uniform P {
  uint64_t logits, work, rows, pens, biases, masks, ids, logprobs, top_ids, top_logprobs;
  uint vocab, stride, top_stride, row0;
} p;

const float NEG_INF = -1.0 / 0.0;
const uint NONE = 0xffffffffu;
const uint MAX_TOP = 20u;  // kMaxTopLogprobs

shared uint hist[256];
shared float red_f[16 * 128];
shared float fsum[N];
shared uint usum[N];
shared uint lastj[N];
shared uint s_u[4];
shared float s_f[2];
shared uint cand[MAX_TOP], cand_s[MAX_TOP];  // the alternatives and their scores
shared uint cand_n;

uint lid;
uint row;       // the row in `logits`
uint64_t wrow;  // this row's working logits (worked rows only)
bool worked;    // penalised or constrained: the transforms before temperature are in wrow
float inv_t;    // divide by the temperature (1 for a greedy row)
float temperature;

// Larger float, larger key; -0 below +0; 0 is below every float's key (-inf's is 0x007fffff).
uint fkey(float f) {
  const uint u = floatBitsToUint(f);
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}
float keyf(uint k) { return uintBitsToFloat((k & 0x80000000u) != 0u ? (k & 0x7fffffffu) : ~k); }

// The logit after penalties and temperature.
float w(uint j) {
  if (worked) return Work(wrow).v[j];
  const float l = F32(p.logits).v[row * p.stride + j];
  return temperature > 0.0 ? l / temperature : l;
}

float workgroup_sum(float x) {
  barrier();  // the previous result has been read
  fsum[lid] = x;
  barrier();
  for (uint s = N / 2u; s > 0u; s >>= 1) {
    if (lid < s) fsum[lid] += fsum[lid + s];
    barrier();
  }
  return fsum[0];
}

// Exclusive prefix of x over the invocations (index order); the total in s_u[3].
uint workgroup_prefix(uint x) {
  barrier();
  usum[lid] = x;
  barrier();
  if (lid == 0u) {
    uint run = 0u;
    for (uint i = 0u; i < N; ++i) {
      const uint c = usum[i];
      usum[i] = run;
      run += c;
    }
    s_u[3] = run;
  }
  barrier();
  return usum[lid];
}

// The cuts in effect (set as each is found): top-k keeps w >= kth; min-p keeps e >= min_p;
// top-p keeps keys above tau, and of the keys equal to tau the first `ties` in index order.
bool cut_k = false, cut_min = false, cut_p = false;
float kth = NEG_INF, min_p = 0.0, max_w = 0.0;
uint tau = 0u, ties = 0u;

// Whether token j (logit wj, key kj) survives the cuts; `tie` counts the invocation's tokens
// equal to tau so far (its range's tied tokens before it, plus the ranges' before it).
bool kept(float wj, uint kj, inout uint tie) {
  if (cut_k && !(wj >= kth)) return false;
  if (cut_min && exp(wj - max_w) < min_p) return false;
  if (cut_p) {
    if (kj < tau) return false;
    if (kj == tau) return tie++ < ties;
  }
  return true;
}

// The key of the k-th largest (1-based) among the keys this invocation offers through `score`
// (mode 0: every token's logit key; mode 1: a kept token's logit key, else 0): 8-bit digits,
// most significant first.
uint score(uint j, uint mode, inout uint tie) {
  const float wj = w(j);
  const uint kj = fkey(wj);
  if (mode == 0u) return kj;
  return kept(wj, kj, tie) && wj > NEG_INF ? kj : 0u;
}

uint select_kth(uint k, uint mode, uint lo, uint hi, uint tie_base) {
  uint prefix = 0u, mask = 0u, r = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    barrier();
    hist[lid] = 0u;
    barrier();
    uint tie = tie_base;
    for (uint j = lo; j < hi; ++j) {
      const uint s = score(j, mode, tie);
      if ((s & mask) == prefix) atomicAdd(hist[(s >> uint(shift)) & 255u], 1u);
    }
    barrier();
    if (lid == 0u) {
      uint cum = 0u, d = 0u;
      for (int b = 255; b >= 0; --b) {
        if (cum + hist[b] >= r) {
          d = uint(b);
          break;
        }
        cum += hist[b];
      }
      s_u[0] = d;
      s_u[1] = r - cum;
    }
    barrier();
    prefix |= s_u[0] << uint(shift);
    mask |= 255u << uint(shift);
    r = s_u[1];
  }
  return prefix;
}

void main() {
  lid = gl_LocalInvocationID.x;
  const uint r_index = p.row0 + flat_group();
  const Row q = Rows(p.rows).r[r_index];
  row = flat_group();
  const uint V = p.vocab;
  const uint chunk = (V + N - 1u) / N;
  const uint lo = min(V, lid * chunk), hi = min(V, lo + chunk);
  temperature = q.temperature;
  const bool greedy = q.temperature == 0.0;
  const bool masked = q.mask != NONE;
  worked = q.pen_count > 0u || masked || q.bias_count > 0u;
  wrow = p.work + uint64_t(row) * uint64_t(V) * 4ul;

  // The working row, in the reference's order: each biased id's logit plus its bias, every id the
  // mask disallows at -inf, then each penalised token's penalties, then over the temperature.
  if (worked) {
    for (uint j = lid; j < V; j += N) {
      const bool allowed = !masked || ((Masks(p.masks).w[q.mask + (j >> 5)] >> (j & 31u)) & 1u) != 0u;
      Work(wrow).v[j] = allowed ? F32(p.logits).v[row * p.stride + j] : NEG_INF;
    }
    memoryBarrierBuffer();
    barrier();
    for (uint i = lid; i < q.bias_count; i += N) {
      const Bias b = Biases(p.biases).e[q.bias_offset + i];
      const uint j = uint(b.token);
      if (Work(wrow).v[j] > NEG_INF) Work(wrow).v[j] = F32(p.logits).v[row * p.stride + j] + b.value;
    }
    memoryBarrierBuffer();
    barrier();
    for (uint i = lid; i < q.pen_count; i += N) {
      const Pen e = Pens(p.pens).e[q.pen_offset + i];
      float l = Work(wrow).v[uint(e.token)];
      if (e.repeat != 0u) l = l > 0.0 ? l / q.repetition_penalty : l * q.repetition_penalty;
      Work(wrow).v[uint(e.token)] = l - e.sub;
    }
    memoryBarrierBuffer();
    barrier();
    if (!greedy) {
      for (uint j = lid; j < V; j += N) Work(wrow).v[j] = Work(wrow).v[j] / q.temperature;
      memoryBarrierBuffer();
      barrier();
    }
  }

  // The largest logit (the first of equals: the greedy token).
  {
    float bv = NEG_INF;
    uint bi = NONE;
    for (uint j = lo; j < hi; ++j) {
      const float v = w(j);
      if (v > bv || bi == NONE && v == bv) bv = v, bi = j;
    }
    fsum[lid] = bv;
    usum[lid] = bi;
    barrier();
    if (lid == 0u) {  // ranges in index order: the first strictly larger wins
      float best = NEG_INF;
      uint at = NONE;
      for (uint i = 0u; i < N; ++i)
        if (usum[i] != NONE && (fsum[i] > best || at == NONE)) best = fsum[i], at = usum[i];
      s_f[0] = best;
      s_u[2] = at == NONE ? 0u : at;
    }
    barrier();
    max_w = s_f[0];
  }
  uint token = s_u[2];

  if (!greedy) {
    // Top-k: the k-th largest logit, ties kept.
    if (q.top_k > 0 && uint(q.top_k) < V) {
      kth = keyf(select_kth(uint(q.top_k), 0u, lo, hi, 0u));
      cut_k = true;
    }
    // Min-p: probability below min_p times the largest one, that is e below min_p.
    if (q.min_p > 0.0) {
      min_p = q.min_p;
      cut_min = true;
    }
    // Top-p: the kept tokens in order of probability until their mass reaches the target.
    if (q.top_p < 1.0) {
      uint none = 0u;
      float mass = 0.0;
      for (uint j = lo; j < hi; ++j) {
        const float wj = w(j);
        if (kept(wj, 0u, none)) mass += exp(wj - max_w);
      }
      const float target = (q.top_p - 1e-6) * workgroup_sum(mass);
      // 4-bit digits of the key, most significant first; R is what the tokens below the
      // digits fixed so far must still bring.
      uint prefix = 0u, mask = 0u;
      float R = target;
      for (int shift = 28; shift >= 0; shift -= 4) {
        float hm[16];
        for (uint b = 0u; b < 16u; ++b) hm[b] = 0.0;
        uint present = 0u;
        for (uint j = lo; j < hi; ++j) {
          const float wj = w(j);
          const uint kj = fkey(wj);
          if ((kj & mask) != prefix || !kept(wj, kj, none)) continue;
          const uint d = (kj >> uint(shift)) & 15u;
          hm[d] += exp(wj - max_w);
          present |= 1u << d;
        }
        barrier();
        if (lid == 0u) s_u[0] = 0u;
        barrier();
        atomicOr(s_u[0], present);
        for (uint s = N / 2u; s > 0u; s >>= 1) {  // a fixed tree: the same sums every call
          barrier();
          if (lid >= s && lid < 2u * s)
            for (uint b = 0u; b < 16u; ++b) red_f[b * 128u + lid - s] = hm[b];
          barrier();
          if (lid < s)
            for (uint b = 0u; b < 16u; ++b) hm[b] += red_f[b * 128u + lid];
        }
        if (lid == 0u) {
          const uint bits = s_u[0];
          float cum = 0.0;
          uint d = 0u;
          for (int b = 15; b >= 0; --b) {
            if ((bits & (1u << uint(b))) == 0u) continue;
            // The digit where the target is reached, or the last one there is.
            if (cum + hm[b] >= R || (bits & ((1u << uint(b)) - 1u)) == 0u) {
              d = uint(b);
              break;
            }
            cum += hm[b];
          }
          s_u[1] = d;
          s_f[1] = R - cum;
        }
        barrier();
        prefix |= s_u[1] << uint(shift);
        mask |= 15u << uint(shift);
        R = s_f[1];
      }
      // Above tau everything is kept; of the tokens at tau (equal probabilities) as many as the
      // target still needs, at least one overall, the first in index order.
      float above = 0.0;
      uint at = 0u;
      for (uint j = lo; j < hi; ++j) {
        const float wj = w(j);
        const uint kj = fkey(wj);
        if (!kept(wj, kj, none)) continue;
        if (kj > prefix) above += exp(wj - max_w);
        if (kj == prefix) ++at;
      }
      above = workgroup_sum(above);
      workgroup_prefix(at);
      const uint n_tau = s_u[3];
      const float e_tau = exp(keyf(prefix) - max_w);
      float need = e_tau > 0.0 ? ceil((target - above) / e_tau) : float(n_tau);
      need = clamp(need, 1.0, float(max(n_tau, 1u)));
      tau = prefix;
      ties = uint(need);
      cut_p = true;
    }
  }
  barrier();
  // usum holds each range's tied tokens before it (top-p's, else zeros).
  const uint tie_base = cut_p ? usum[lid] : 0u;

  // The final mass (per range, in index order) and each range's last token with mass.
  float mass = 0.0;
  uint last = NONE;
  {
    uint tie = tie_base;
    for (uint j = lo; j < hi; ++j) {
      const float wj = w(j);
      if (!kept(wj, fkey(wj), tie)) continue;
      const float e = exp(wj - max_w);
      mass += e;
      if (e > 0.0) last = j;
    }
  }
  barrier();
  fsum[lid] = mass;
  lastj[lid] = last;
  barrier();
  if (lid == 0u) {
    // The total in index order of ranges; then the draw: the first range whose interval holds
    // u times the total, walked token by token.
    float total = 0.0;
    uint last_all = NONE;
    for (uint i = 0u; i < N; ++i) {
      total += fsum[i];
      if (lastj[i] != NONE) last_all = lastj[i];
    }
    s_f[0] = total;
    if (!greedy) {
      const float U = q.u * total;
      float cum = 0.0;
      uint i = 0u;
      for (; i < N; ++i) {
        if (fsum[i] > 0.0 && U < cum + fsum[i]) break;
        cum += fsum[i];
      }
      token = last_all == NONE ? 0u : last_all;
      if (i < N) {
        uint tie = cut_p ? usum[i] : 0u;
        const uint a = min(V, i * chunk), z = min(V, a + chunk);
        for (uint j = a; j < z; ++j) {
          const float wj = w(j);
          if (!kept(wj, fkey(wj), tie)) continue;
          const float e = exp(wj - max_w);
          if (e <= 0.0) continue;
          token = j;
          cum += e;
          if (U < cum) break;
        }
      }
      s_u[2] = token;
    }
  }
  barrier();
  token = s_u[2];
  const float log_total = log(s_f[0]);
  if (lid == 0u) {
    I32(p.ids).v[r_index] = int(token);
    F32(p.logprobs).v[r_index] = (w(token) - max_w) - log_total;
  }

  // The alternatives: the top_n largest scores (a kept token's logit key, else 0), ties by id.
  const uint n = min(uint(max(q.top_n, 0)), min(MAX_TOP, V));
  if (n == 0u) return;
  const uint edge = select_kth(n, 1u, lo, hi, tie_base);
  barrier();
  if (lid == 0u) cand_n = 0u;
  barrier();
  uint at_edge = 0u;
  {
    uint tie = tie_base;
    for (uint j = lo; j < hi; ++j) {
      const uint s = score(j, 1u, tie);
      if (s > edge) {
        const uint slot = atomicAdd(cand_n, 1u);
        cand[slot] = j;
        cand_s[slot] = s;
      } else if (s == edge) {
        ++at_edge;
      }
    }
  }
  const uint before = workgroup_prefix(at_edge);  // tokens at the edge in earlier ranges
  const uint above_n = cand_n;
  if (before < n - above_n) {
    uint tie = tie_base, k = before;
    for (uint j = lo; j < hi && k < n - above_n; ++j)
      if (score(j, 1u, tie) == edge) {
        cand[above_n + k] = j;
        cand_s[above_n + k++] = edge;
      }
  }
  barrier();
  if (lid == 0u) {
    // Those above the edge, largest first (then by id); the edge's follow, already by id.
    for (uint i = 1u; i < above_n; ++i) {
      const uint c = cand[i], sc = cand_s[i];
      uint k = i;
      for (; k > 0u; --k) {
        const uint sp = cand_s[k - 1u];
        if (sp > sc || (sp == sc && cand[k - 1u] < c)) break;
        cand[k] = cand[k - 1u];
        cand_s[k] = sp;
      }
      cand[k] = c;
      cand_s[k] = sc;
    }
    for (uint i = 0u; i < n; ++i) {
      const uint c = cand[i];
      // Kept: its logprob; cut (or a -inf logit): probability 0.
      I32(p.top_ids).v[r_index * p.top_stride + i] = int(c);
      F32(p.top_logprobs).v[r_index * p.top_stride + i] = cand_s[i] != 0u ? (w(c) - max_w) - log_total : NEG_INF;
    }
  }
}
