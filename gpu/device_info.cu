#include "gpu/device_info.hpp"

#include <cuda_runtime.h>

namespace troupe::gpu {

device_info query_devices() {
  device_info info;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    info.summary = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
    return info;
  }
  info.count = n;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, i);
    info.summary += "cuda:" + std::to_string(i) + " " + p.name + ", " +
                    std::to_string(p.totalGlobalMem >> 20) + " MiB, sm_" +
                    std::to_string(p.major) + std::to_string(p.minor) + "\n";
  }
  return info;
}

}  // namespace troupe::gpu
