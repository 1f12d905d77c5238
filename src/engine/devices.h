// The accelerators ggml knows (CUDA, Vulkan, Metal...): every backend device
// but the CPU, whose "device memory" is the whole machine's.
#pragma once

#include <ggml-backend.h>

#include <cctype>
#include <string>
#include <vector>

#include "core/ledger.h"

namespace reclaim {

inline std::vector<ggml_backend_dev_t> accelerator_devices() {
  std::vector<ggml_backend_dev_t> out;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) out.push_back(dev);
  }
  return out;
}

// A device as a place of memory: ggml's name in lower case ("vulkan0",
// "cuda0"), as the ledger, the estimates and --memory-budget all name it.
inline std::string device_place(ggml_backend_dev_t dev) {
  std::string name = ggml_backend_dev_name(dev);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// Every place of memory here: kHostMemory, then each accelerator.
inline std::vector<std::string> places_here() {
  std::vector<std::string> out = {kHostMemory};
  for (ggml_backend_dev_t dev : accelerator_devices()) out.push_back(device_place(dev));
  return out;
}

// The accelerators by ggml's own names, for reports ("Vulkan0, CUDA0");
// empty where there is none.
inline std::string accelerator_names() {
  std::string out;
  for (ggml_backend_dev_t dev : accelerator_devices()) out += (out.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(dev));
  return out;
}

}  // namespace reclaim
