#include "backend/cuda/kernels/kv_write.h"
#include "backend/cuda/kernels/kv_elem.cuh"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"

namespace kiln::cuda {

namespace {

template <typename KV>
__global__ void kv_write_kernel(KvWriteParams p) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.slots) return;
  const int64_t row = p.kv_heads * p.head_dim;
  KV* k_cache = static_cast<KV*>(p.k_cache);
  KV* v_cache = static_cast<KV*>(p.v_cache);
  for (int64_t idx = threadIdx.x; idx < row; idx += blockDim.x) {
    const int64_t h = idx / p.head_dim, e = idx % p.head_dim;
    store_kv(k_cache + slot * row + idx, p.k.at(t, h)[e]);
    store_kv(v_cache + slot * row + idx, p.v.at(t, h)[e]);
  }
}

}  // namespace

Status kv_write(const KvWriteParams& p, cudaStream_t stream) {
  auto shape = [&] { return "tokens=" + std::to_string(p.tokens) + " kv_heads=" + std::to_string(p.kv_heads) +
                            " head_dim=" + std::to_string(p.head_dim) + " slots=" + std::to_string(p.slots); };
  if (p.tokens == 0) return {};
  with_kv_type(p.kv_dtype, [&](auto kv) {
    using KV = kv_t<decltype(kv)>;
    launch_pdl(kv_write_kernel<KV>, static_cast<unsigned>(p.tokens), 256, 0, stream, p);
  });
  return launch_status("kv_write_kernel", shape, stream);
}

}  // namespace kiln::cuda
