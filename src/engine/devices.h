// The accelerators ggml knows (CUDA, Vulkan, Metal...): every backend device
// but the CPU, whose "device memory" is the whole machine's.
#pragma once

#include <ggml-backend.h>

#include <vector>

namespace reclaim {

inline std::vector<ggml_backend_dev_t> accelerator_devices() {
  std::vector<ggml_backend_dev_t> out;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) out.push_back(dev);
  }
  return out;
}

}  // namespace reclaim
