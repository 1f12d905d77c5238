#include "engine/placement.h"

#include <ggml-backend.h>

#include <string>

// llama_get_memory_breakdown is in llama.cpp's staging header (see
// model_info.cpp).
#ifdef RECLAIM_LLAMA_EXT_HEADER
#include RECLAIM_LLAMA_EXT_HEADER
#endif

namespace reclaim {

uint64_t Placement::device_total() const {
  uint64_t n = 0;
  for (const DeviceBytes& d : devices) n += d.bytes;
  return n;
}

namespace {

void add(Placement& p, ggml_backend_buffer_type_t buft, uint64_t bytes) {
  if (bytes == 0) return;
  ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
  // A device's host buffers (pinned staging memory) are host memory.
  if (ggml_backend_buft_is_host(buft) || !dev || ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
    p.host += bytes;
    return;
  }
  const std::string name = ggml_backend_dev_name(dev);
  for (DeviceBytes& d : p.devices) {
    if (d.device == name) {
      d.bytes += bytes;
      return;
    }
  }
  p.devices.push_back({name, bytes});
}

}  // namespace

ContextPlacement placement_of(const llama_context* ctx) {
  ContextPlacement out;
#ifdef RECLAIM_LLAMA_EXT_HEADER
  for (const auto& [buft, mb] : llama_get_memory_breakdown(ctx)) {
    add(out.model, buft, mb.model);
    add(out.context, buft, mb.context + mb.compute);
  }
  out.known = true;
#else
  (void)ctx;
#endif
  return out;
}

}  // namespace reclaim
