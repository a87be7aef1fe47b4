#include "backend/cuda/kernels/occupancy.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

namespace kiln::cuda {

int resident_blocks(const void* kernel, int threads, size_t smem, int cluster) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t, int>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, threads, smem, cluster);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(cluster));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // not a launch's error
    clusters = 0;
  }
  return cache[key] = clusters * cluster;
}

}  // namespace kiln::cuda
