// The audit's warm-up of an accelerator, before the baseline (cycles.h).
#include "audit/cycles.h"
#include "engine/devices.h"

namespace reclaim::audit {

bool warm_device_first(const CycleOptions&, SideResult& out) {
  std::string names;
  for (ggml_backend_dev_t dev : accelerator_devices()) names += (names.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(dev));
  if (names.empty()) return false;
  out.devices = names;
  out.device_warm_before = Usage::capture();
  return true;
}

}  // namespace reclaim::audit
