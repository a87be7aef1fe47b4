// Greedy selection on the device (shaders/argmax.comp): only the ids come back to the host. Host
// logits (a forward that returned them there) are staged through the device, as CUDA's are.
// Sampling on the device (shaders/sample.comp): only ids, logprobs and the alternatives asked for
// come back. Structured-output rows' token masks and logit biases go up with the parameters.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

namespace {

constexpr uint32_t kNone = 0xffffffffu;

// One row's request as sample.comp reads it (std430: 48 bytes); `mask` is the first of its mask
// words, kNone for every id allowed.
struct SampleRowParams {
  float u, temperature, top_p, min_p, repetition_penalty;
  int32_t top_k, top_n;
  uint32_t pen_offset, pen_count, mask, bias_offset, bias_count;
};
static_assert(sizeof(SampleRowParams) == 48);
// A distinct penalised token of a row.
struct SamplePenalty {
  int32_t token;
  uint32_t repeat;  // the repetition penalty applies
  float sub;        // presence + frequency * count, rounded once as the reference rounds it
  uint32_t pad;
};
static_assert(sizeof(SamplePenalty) == 16);
// A biased id of a row.
struct SampleBias {
  int32_t token;
  float value;
};
static_assert(sizeof(SampleBias) == 8);

// Working logits of penalised rows, per launch; rows beyond what fits run in further launches.
constexpr int64_t kSampleScratchBytes = int64_t{256} << 20;

}  // namespace

Support Sampling::supports(const SampleRequest&) const { return Support::native(); }

Status Sampling::argmax(const ArgmaxArgs& a) {
  const SampleRequest r = describe(a);
  auto req = [&] { return r.describe(); };  // for an error's text only
  if (const Support s = supports(r); !s.runs_natively()) return declined("vulkan", req(), s.constraint);
  if (!a.logits.defined() || !a.ids.defined()) return invalid_argument(req() + ": logits or ids missing");
  if (a.logits.device().kind != a.ids.device().kind)
    return invalid_argument(req() + ": logits and ids must be on the same device");
  const bool host = a.logits.device().kind == DeviceKind::kHost;
  Tensor logits = a.logits, ids = a.ids;
  if (host) {
    if (!a.logits.is_contiguous() || !a.ids.is_contiguous())
      return invalid_argument(req() + ": host logits and ids must be contiguous");
    if (a.logits.dtype() != DType::kF32 || a.ids.dtype() != DType::kI32)
      return invalid_argument(req() + ": logits must be f32 and ids i32");
    Storage staging(ctx_);
    KILN_ASSIGN_OR_RETURN(logits, staging.upload(a.logits));
    KILN_ASSIGN_OR_RETURN(ids, staging.empty(a.ids.shape(), DType::kI32));
  }
  if (!validate(ArgmaxArgs{logits, ids}, DeviceKind::kVulkan, std::string()).ok())
    return validate(ArgmaxArgs{logits, ids}, DeviceKind::kVulkan, req());
  // The masks go up as one buffer: each row's first word (kNone: every id allowed), then the
  // masked rows' words.
  const int64_t rows = logits.dim(0), words = (logits.dim(1) + 31) / 32;
  std::vector<uint32_t> up;
  for (int64_t r = 0; r < static_cast<int64_t>(a.allowed.size()) && r < rows; ++r)
    if (a.allowed[static_cast<size_t>(r)] != nullptr) {
      if (up.empty()) up.assign(static_cast<size_t>(rows), kNone);
      up[static_cast<size_t>(r)] = static_cast<uint32_t>(up.size() - static_cast<size_t>(rows));
      up.insert(up.end(), a.allowed[static_cast<size_t>(r)], a.allowed[static_cast<size_t>(r)] + words);
    }
  Storage storage(ctx_);
  Tensor masks;
  if (!up.empty()) {
    KILN_ASSIGN_OR_RETURN(masks, storage.empty({static_cast<int64_t>(up.size())}, DType::kI32));
    KILN_RETURN_IF_ERROR(ctx_->upload(up.data(), locate(masks), up.size() * 4));
  }
  struct {
    uint64_t logits, ids, masks;
    uint32_t vocab, stride, rows, pad;
  } p{address(logits),
      address(ids),
      masks.defined() ? address(masks) : 0,
      static_cast<uint32_t>(logits.dim(1)),
      static_cast<uint32_t>(logits.stride(0)),
      static_cast<uint32_t>(rows),
      0};
  KILN_RETURN_IF_ERROR(ctx_->dispatch("argmax", p, ctx_->grid(static_cast<uint64_t>(logits.dim(0)))));
  if (host) KILN_RETURN_IF_ERROR(ctx_->download(locate(ids), a.ids.raw(), a.ids.nbytes()));
  return {};
}

}  // namespace kiln::vulkan

namespace kiln::vulkan {

Status Sampling::sample(const SampleArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const int64_t rows = a.logits.dim(0), V = a.logits.dim(1);
  if (rows == 0) return {};
  auto req = [&] { return describe(a).describe(); };  // for an error's text only
  if (V >= int64_t{1} << 31 || a.logits.stride(0) >= int64_t{1} << 32 || rows * V >= int64_t{1} << 32)
    return invalid_argument(req() + ": 2^32 logits or more");
  if (a.logits.stride(1) != 1) return invalid_argument(req() + ": logits rows must be contiguous");
  std::lock_guard<std::mutex> lock(mu_);

  // Each row's parameters and its distinct penalised tokens (the repetition penalty once per
  // distinct seen token, then presence and frequency over the generated tokens' counts).
  std::vector<SampleRowParams> params(static_cast<size_t>(rows));
  std::vector<SamplePenalty> pens;
  std::vector<SampleBias> biases;
  std::vector<uint32_t> masks;
  const int64_t words = (V + 31) / 32;
  bool worked = false;  // some row's transforms before temperature run in a working copy
  if (marks_.size() < static_cast<size_t>(V)) {
    marks_.assign(static_cast<size_t>(V), 0);
    slots_.resize(static_cast<size_t>(V));
  }
  std::unordered_map<int32_t, int32_t> counts;
  for (int64_t i = 0; i < rows; ++i) {
    const SampleRow& x = a.rows[static_cast<size_t>(i)];
    SampleRowParams& q = params[static_cast<size_t>(i)];
    q = SampleRowParams{static_cast<float>(x.u),
                        x.temperature,
                        x.top_p,
                        x.min_p,
                        x.repetition_penalty,
                        x.top_k,
                        x.top_logprobs,
                        static_cast<uint32_t>(pens.size()),
                        0,
                        kNone,
                        static_cast<uint32_t>(biases.size()),
                        static_cast<uint32_t>(x.bias.size())};
    for (const auto& [id, b] : x.bias) biases.push_back({id, b});
    if (x.allowed != nullptr) {
      q.mask = static_cast<uint32_t>(masks.size());
      masks.insert(masks.end(), x.allowed, x.allowed + words);
    }
    worked |= x.constrained();
    const bool repeat = x.repetition_penalty != 1.f, subtract = x.presence_penalty != 0.f || x.frequency_penalty != 0.f;
    if (!repeat && !subtract) continue;
    worked = true;
    if (++stamp_ == 0) {  // wrapped: every mark is stale
      std::fill(marks_.begin(), marks_.end(), 0);
      stamp_ = 1;
    }
    auto entry = [&](int32_t t) -> SamplePenalty& {
      if (marks_[t] != stamp_) {
        marks_[t] = stamp_;
        slots_[t] = static_cast<int32_t>(pens.size());
        pens.push_back({t, 0, 0.f, 0});
      }
      return pens[static_cast<size_t>(slots_[t])];
    };
    if (repeat)
      for (int32_t t : x.seen)
        if (t >= 0 && t < V) entry(t).repeat = 1;
    if (subtract) {
      counts.clear();
      for (int32_t t : x.generated)
        if (t >= 0 && t < V) ++counts[t];
      for (auto [t, n] : counts) entry(t).sub = std::fma(x.frequency_penalty, static_cast<float>(n), x.presence_penalty);
    }
    q.pen_count = static_cast<uint32_t>(pens.size()) - q.pen_offset;
  }

  // One buffer up (parameters, penalties, biases, mask words) and one down (ids, logprobs,
  // alternatives).
  const int64_t top = a.top_ids.defined() ? a.top_ids.dim(1) : 0;
  const size_t params_bytes = params.size() * sizeof(SampleRowParams);
  const size_t pens_bytes = pens.size() * sizeof(SamplePenalty), bias_bytes = biases.size() * sizeof(SampleBias);
  const size_t up_bytes = params_bytes + pens_bytes + bias_bytes + masks.size() * 4;
  std::vector<char> up(up_bytes);
  std::memcpy(up.data(), params.data(), params_bytes);
  if (!pens.empty()) std::memcpy(up.data() + params_bytes, pens.data(), pens_bytes);
  if (!biases.empty()) std::memcpy(up.data() + params_bytes + pens_bytes, biases.data(), bias_bytes);
  if (!masks.empty()) std::memcpy(up.data() + params_bytes + pens_bytes + bias_bytes, masks.data(), masks.size() * 4);
  const auto n = static_cast<size_t>(rows), nt = static_cast<size_t>(rows * top);
  const size_t down_bytes = (2 * n + 2 * nt) * 4;
  Storage storage(ctx_);
  KILN_ASSIGN_OR_RETURN(Tensor up_t, storage.empty({static_cast<int64_t>(up_bytes)}, DType::kU8));
  KILN_ASSIGN_OR_RETURN(Tensor down_t, storage.empty({static_cast<int64_t>(down_bytes)}, DType::kU8));
  KILN_RETURN_IF_ERROR(ctx_->upload(up.data(), locate(up_t), up_bytes));
  const int64_t group = worked ? std::clamp<int64_t>(kSampleScratchBytes / (V * 4), 1, rows) : rows;
  Tensor work;
  if (worked) {
    KILN_ASSIGN_OR_RETURN(work, storage.empty({group, V}, DType::kF32));
  }

  const uint64_t down = address(down_t);
  for (int64_t row0 = 0; row0 < rows; row0 += group) {
    struct {
      uint64_t logits, work, rows, pens, biases, masks, ids, logprobs, top_ids, top_logprobs;
      uint32_t vocab, stride, top_stride, row0;
    } p{address(a.logits) + static_cast<uint64_t>(row0 * a.logits.stride(0)) * 4,
        address(work),
        address(up_t),
        address(up_t) + params_bytes,
        address(up_t) + params_bytes + pens_bytes,
        address(up_t) + params_bytes + pens_bytes + bias_bytes,
        down,
        down + n * 4,
        down + 2 * n * 4,
        down + (2 * n + nt) * 4,
        u32(V),
        u32(a.logits.stride(0)),
        u32(top),
        u32(row0)};
    KILN_RETURN_IF_ERROR(ctx_->dispatch("sample", p, ctx_->grid(static_cast<uint64_t>(std::min(group, rows - row0)))));
  }
  std::vector<char> back(down_bytes);
  KILN_RETURN_IF_ERROR(ctx_->download(locate(down_t), back.data(), down_bytes));
  std::memcpy(a.ids.raw(), back.data(), n * 4);
  std::memcpy(a.logprobs.raw(), back.data() + n * 4, n * 4);
  if (top > 0) {
    std::memcpy(a.top_ids.raw(), back.data() + 2 * n * 4, nt * 4);
    std::memcpy(a.top_logprobs.raw(), back.data() + (2 * n + nt) * 4, nt * 4);
  }
  return {};
}

}  // namespace kiln::vulkan
