#include "engine/placement.h"

#include "engine/devices.h"

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

std::string place_of(ggml_backend_buffer_type_t buft) {
  ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
  if (ggml_backend_buft_is_host(buft) || !dev || ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
    return kHostMemory;
  }
  return device_place(dev);
}

ggml_backend_buffer_type_t* cpu_extra_buffer_types() {
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!cpu) return nullptr;
  auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(cpu), "ggml_backend_dev_get_extra_bufts"));
  return extra ? extra(cpu) : nullptr;
}

bool is_cpu_extra_buffer_type(ggml_backend_buffer_type_t buft) {
  for (ggml_backend_buffer_type_t* t = cpu_extra_buffer_types(); buft && t && *t; ++t) {
    if (*t == buft) return true;
  }
  return false;
}

namespace {

void add(Placement& p, ggml_backend_buffer_type_t buft, uint64_t bytes) {
  if (bytes == 0) return;
  const std::string name = place_of(buft);
  if (name == kHostMemory) {
    p.host += bytes;
    return;
  }
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
    add(out.kv, buft, mb.context);
  }
  out.known = true;
#else
  (void)ctx;
#endif
  return out;
}

}  // namespace reclaim
