// Greedy selection on the device (kernels/argmax.cu), masked for structured-output rows; host
// logits are staged through the device.
// Sampling on the device (kernels/sample.cu): only ids, logprobs and the alternatives asked for
// come back; structured-output rows send their token masks and logit biases up with the parameters.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/argmax.h"
#include "backend/cuda/kernels/sample.h"
#include "backend/cuda/views.h"

namespace kiln::cuda {

Support Sampling::supports(const SampleRequest& r) const {
  if (!r.greedy && sample_shared_bytes(r.vocab) > sample_max_shared_bytes())
    return Support::declined("vocab " + std::to_string(r.vocab) + " exceeds the sampling kernel's shared-memory bitmap");
  return Support::native();
}

Status Sampling::argmax(const ArgmaxArgs& a) {
  SampleRequest r = describe(a);
  std::string req = r.describe();
  Support s = supports(r);
  if (!s.runs_natively()) return declined("cuda", req, s.constraint);
  if (!a.logits.defined() || !a.ids.defined()) return invalid_argument(req + ": logits or ids missing");
  if (a.logits.device().kind != a.ids.device().kind)
    return invalid_argument(req + ": logits and ids must be on the same device");
  const bool host = a.logits.device().kind == DeviceKind::kHost;
  ProfileScope prof(ctx_->profiler.get(), [&] { return std::string(host ? "argmax (host logits staged)" : "argmax"); });
  Tensor logits = a.logits, ids = a.ids;
  std::unique_lock<std::mutex> staging_lock;
  if (host) {
    if (!a.logits.is_contiguous() || !a.ids.is_contiguous())
      return invalid_argument(req + ": host logits and ids must be contiguous");
    if (a.logits.dtype() != DType::kF32 || a.ids.dtype() != DType::kI32)
      return invalid_argument(req + ": logits must be f32 and ids i32");
    KILN_ASSIGN_OR_RETURN(logits, ctx_->empty(a.logits.shape(), DType::kF32));
    KILN_ASSIGN_OR_RETURN(ids, ctx_->empty(a.ids.shape(), DType::kI32));
    // Through page-locked memory, held until the ids are back (the copy below synchronises).
    staging_lock = std::unique_lock<std::mutex>(ctx_->staging_mu);
    KILN_ASSIGN_OR_RETURN(void* buf, ctx_->staging(a.logits.nbytes()));
    std::memcpy(buf, a.logits.raw(), a.logits.nbytes());
    KILN_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(logits.raw(), buf, a.logits.nbytes(), cudaMemcpyHostToDevice, ctx_->stream),
        req + ": staging host logits"));
  }
  KILN_RETURN_IF_ERROR(validate(ArgmaxArgs{logits, ids, a.allowed}, DeviceKind::kCuda, req));
  ArgmaxParams p;
  p.rows = r.rows;
  p.vocab = r.vocab;
  p.logits = rows_of<const float>(logits);
  p.ids = ids.data<int32_t>();
  // Structured-output rows: their masks and each row's offset go up in one copy (from pageable
  // memory: the call returns once the driver holds the bytes).
  Tensor mask_buf;
  if (r.constrained) {
    const auto words = static_cast<size_t>((r.vocab + 31) / 32), rows = static_cast<size_t>(r.rows);
    std::vector<uint32_t> up(rows, ~0u);  // offsets (int32, -1: none), then the masks
    for (size_t i = 0; i < rows; ++i) {
      if (a.allowed[i] == nullptr) continue;
      up[i] = static_cast<uint32_t>(up.size() - rows);
      up.insert(up.end(), a.allowed[i], a.allowed[i] + words);
    }
    KILN_ASSIGN_OR_RETURN(mask_buf, ctx_->empty({static_cast<int64_t>(up.size())}, DType::kI32));
    KILN_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(mask_buf.raw(), up.data(), up.size() * 4, cudaMemcpyHostToDevice,
                                                     ctx_->stream),
                                     req + ": masks"));
    p.mask_offsets = mask_buf.data<int32_t>();
    p.masks = reinterpret_cast<const uint32_t*>(mask_buf.data<int32_t>() + rows);
  }
  Tensor part_values, part_indices;  // back to the pool on return: stream order makes the reuse safe
  if (const int64_t chunks = argmax_chunks(r.vocab); chunks > 1) {
    KILN_ASSIGN_OR_RETURN(part_values, ctx_->empty({r.rows * chunks}, DType::kF32));
    KILN_ASSIGN_OR_RETURN(part_indices, ctx_->empty({r.rows * chunks}, DType::kI32));
    if (!counters_.defined() || counters_.numel() < r.rows) {
      KILN_ASSIGN_OR_RETURN(counters_, ctx_->empty({std::max<int64_t>(r.rows, 64)}, DType::kI32));
      KILN_RETURN_IF_ERROR(
          cuda_status(cudaMemsetAsync(counters_.raw(), 0, counters_.nbytes(), ctx_->stream), req + ": zero counters"));
    }
    p.part_values = part_values.data<float>();
    p.part_indices = part_indices.data<int32_t>();
    p.counters = static_cast<unsigned*>(counters_.raw());
  }
  KILN_RETURN_IF_ERROR(cuda::argmax(p, ctx_->stream).with_context(req));
  if (!host) return {};
  ctx_->bytes_to_host.fetch_add(a.ids.nbytes(), std::memory_order_relaxed);
  KILN_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(a.ids.raw(), ids.raw(), a.ids.nbytes(), cudaMemcpyDeviceToHost, ctx_->stream), req + ": ids back"));
  return ctx_->synchronize(req + ": synchronize");
}

namespace {
// Scratch per launch (f32 working logits and f64 probabilities, 12 bytes a logit): rows beyond
// what fits run in further launches.
constexpr int64_t kSampleScratchBytes = int64_t{256} << 20;
constexpr size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }
}  // namespace

Status Sampling::sample(const SampleArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const SampleRequest r = describe(a);
  ProfileScope prof(ctx_->profiler.get(), [] { return std::string("sample"); });
  if (r.rows == 0) return {};
  // Each row's parameters, its seen ids (deduplicated on the device) and its generated ids as
  // (token, count) pairs, counted here as the host reference counts them.
  std::vector<SampleRowParams> params(static_cast<size_t>(r.rows));
  std::vector<int32_t> seen, generated, bias_ids;
  std::vector<float> bias_values;
  std::vector<const uint32_t*> masks;  // staged after the rest, in row order
  const auto words = static_cast<size_t>((r.vocab + 31) / 32);
  std::unordered_map<int32_t, int32_t> counts;
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const SampleRow& x = a.rows[i];
    SampleRowParams& q = params[i];
    q.u = x.u;
    q.temperature = x.temperature;
    q.top_p = x.top_p;
    q.min_p = x.min_p;
    q.repetition_penalty = x.repetition_penalty;
    q.presence_penalty = x.presence_penalty;
    q.frequency_penalty = x.frequency_penalty;
    q.top_k = x.top_k;
    q.top_n = x.top_logprobs;
    if (x.repetition_penalty != 1.f) {
      q.seen_offset = static_cast<int32_t>(seen.size());
      for (int32_t t : x.seen)
        if (t >= 0 && t < r.vocab) seen.push_back(t);
      q.seen_count = static_cast<int32_t>(seen.size()) - q.seen_offset;
    }
    if (x.presence_penalty != 0.f || x.frequency_penalty != 0.f) {
      counts.clear();
      for (int32_t t : x.generated)
        if (t >= 0 && t < r.vocab) ++counts[t];
      q.gen_offset = static_cast<int32_t>(generated.size() / 2);
      for (auto [t, n] : counts) {
        generated.push_back(t);
        generated.push_back(n);
      }
      q.gen_count = static_cast<int32_t>(counts.size());
    }
    if (x.allowed != nullptr) {
      q.mask_offset = static_cast<int32_t>(masks.size() * words);
      masks.push_back(x.allowed);
    }
    q.bias_offset = static_cast<int32_t>(bias_ids.size());
    q.bias_count = static_cast<int32_t>(x.bias.size());
    for (const auto& [id, b] : x.bias) {
      bias_ids.push_back(id);
      bias_values.push_back(b);
    }
  }
  // One device buffer and one staging buffer, laid out alike: parameters, seen, generated, logit
  // biases, masks, then the ids, logprobs and alternatives coming back.
  const size_t params_bytes = params.size() * sizeof(SampleRowParams);
  const size_t seen_at = params_bytes, gen_at = seen_at + seen.size() * 4;
  const size_t bias_ids_at = gen_at + generated.size() * 4, bias_values_at = bias_ids_at + bias_ids.size() * 4;
  const size_t masks_at = bias_values_at + bias_values.size() * 4;
  const size_t up_bytes = masks_at + masks.size() * words * 4;
  const auto rows = static_cast<size_t>(r.rows);
  const size_t top = a.top_ids.defined() ? static_cast<size_t>(a.top_ids.dim(1)) : 0;
  const size_t ids_at = align8(up_bytes), logprobs_at = ids_at + rows * 4;
  const size_t top_ids_at = logprobs_at + rows * 4, top_logprobs_at = top_ids_at + rows * top * 4;
  const size_t total = top_logprobs_at + rows * top * 4;
  KILN_ASSIGN_OR_RETURN(Tensor buf, ctx_->empty({static_cast<int64_t>(total)}, DType::kU8));
  auto* dev = static_cast<char*>(buf.raw());
  std::unique_lock<std::mutex> staging_lock(ctx_->staging_mu);  // until the results are read back
  KILN_ASSIGN_OR_RETURN(void* stage_raw, ctx_->staging(total));
  auto* stage = static_cast<char*>(stage_raw);
  std::memcpy(stage, params.data(), params_bytes);
  if (!seen.empty()) std::memcpy(stage + seen_at, seen.data(), seen.size() * 4);
  if (!generated.empty()) std::memcpy(stage + gen_at, generated.data(), generated.size() * 4);
  if (!bias_ids.empty()) {
    std::memcpy(stage + bias_ids_at, bias_ids.data(), bias_ids.size() * 4);
    std::memcpy(stage + bias_values_at, bias_values.data(), bias_values.size() * 4);
  }
  for (size_t k = 0; k < masks.size(); ++k) std::memcpy(stage + masks_at + k * words * 4, masks[k], words * 4);
  const std::string req = r.describe();
  KILN_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(dev, stage, up_bytes, cudaMemcpyHostToDevice, ctx_->stream), req + ": parameters"));
  const int64_t group = std::clamp<int64_t>(kSampleScratchBytes / (r.vocab * 12), 1, r.rows);
  KILN_ASSIGN_OR_RETURN(Tensor work, ctx_->empty({group, r.vocab}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor probs, ctx_->empty({group, r.vocab}, DType::kI64));  // f64
  for (int64_t row0 = 0; row0 < r.rows; row0 += group) {
    SampleParams p;
    p.rows = std::min(group, r.rows - row0);
    p.vocab = r.vocab;
    p.logits = {a.logits.data<float>() + row0 * a.logits.stride(0), a.logits.stride(0)};
    p.row_params = reinterpret_cast<const SampleRowParams*>(dev) + row0;
    p.seen = reinterpret_cast<const int32_t*>(dev + seen_at);
    p.generated = reinterpret_cast<const int32_t*>(dev + gen_at);
    p.bias_ids = reinterpret_cast<const int32_t*>(dev + bias_ids_at);
    p.bias_values = reinterpret_cast<const float*>(dev + bias_values_at);
    p.masks = reinterpret_cast<const uint32_t*>(dev + masks_at);
    p.work = work.data<float>();
    p.probs = static_cast<double*>(probs.raw());
    p.ids = reinterpret_cast<int32_t*>(dev + ids_at) + row0;
    p.logprobs = reinterpret_cast<float*>(dev + logprobs_at) + row0;
    if (top > 0) {
      p.top_stride = static_cast<int64_t>(top);
      p.top_ids = reinterpret_cast<int32_t*>(dev + top_ids_at) + row0 * p.top_stride;
      p.top_logprobs = reinterpret_cast<float*>(dev + top_logprobs_at) + row0 * p.top_stride;
    }
    KILN_RETURN_IF_ERROR(cuda::sample(p, ctx_->stream).with_context(req));
  }
  ctx_->bytes_to_host.fetch_add(total - ids_at, std::memory_order_relaxed);
  KILN_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(stage + ids_at, dev + ids_at, total - ids_at,
                                                   cudaMemcpyDeviceToHost, ctx_->stream),
                                   req + ": ids back"));
  KILN_RETURN_IF_ERROR(ctx_->synchronize(req + ": synchronize"));
  std::memcpy(a.ids.raw(), stage + ids_at, rows * 4);
  std::memcpy(a.logprobs.raw(), stage + logprobs_at, rows * 4);
  if (top > 0) {
    std::memcpy(a.top_ids.raw(), stage + top_ids_at, rows * top * 4);
    std::memcpy(a.top_logprobs.raw(), stage + top_logprobs_at, rows * top * 4);
  }
  return {};
}

}  // namespace kiln::cuda
