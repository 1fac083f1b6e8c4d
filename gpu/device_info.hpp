#pragma once
// What the CUDA runtime sees on this machine: lets `troupe info` say whether the cuda backend can run.
#include <string>

namespace troupe::gpu {

struct device_info {
  int count = 0;          // usable CUDA devices
  std::string summary;    // one line per device, or why there is none
};

device_info query_devices();

}  // namespace troupe::gpu
