// The audit's warm-up of an accelerator, before the baseline (cycles.h).
#include "audit/cycles.h"
#include "engine/devices.h"

namespace reclaim::audit {

bool warm_device_first(SideResult& out) {
  const std::string names = accelerator_names();
  if (names.empty()) return false;
  out.devices = names;
  out.device_warm_before = Usage::capture();
  return true;
}

}  // namespace reclaim::audit
