#include "engine/projector.h"

#include <mtmd.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "core/heap.h"
#include "core/usage.h"
#include "engine/devices.h"
#include "engine/llama_runtime.h"
#include "engine/model.h"
#include "engine/model_info.h"

namespace reclaim {

namespace {

// mtmd's estimate swaps mtmd's log callback for a quiet one and back, on
// state of mtmd's own without a lock: two at once could leave the quiet one
// for good, and a projector loading meanwhile would log its errors to it.
// Projectors load and are estimated one at a time.
std::mutex& mtmd_setup_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

Projector::Projector(Model& model, const std::string& path)
    : scope_(model.scope(), "mmproj", ScopeOptions{.release_heap_on_close = true}) {
  check_model_file(path);
  Scope::Slot slot = scope_.reserve(Kind::model, base_name(path));
  const mtmd_context_params p = projector_params(model.n_gpu_layers(), model.n_threads());
  const auto host_now = [] { return static_cast<int64_t>(heap_stats().in_use); };
  const int64_t host_before = host_now(), device_before = device_memory_used();
  std::unique_lock setup(mtmd_setup_mutex());
  take_llama_errors();
  mtmd_context* ctx = mtmd_init_from_file(path.c_str(), model.get(), p);
  if (!ctx) {
    const std::string why = take_llama_errors();
    throw InvalidModelFile("projector '" + path + "' cannot be used with this model: " +
                           (why.empty() ? "llama.cpp's mtmd gave no reason" : why));
  }
  setup.unlock();
  const auto host = static_cast<uint64_t>(std::max<int64_t>(0, host_now() - host_before));
  const auto device = static_cast<uint64_t>(std::max<int64_t>(0, device_memory_used() - device_before));
  bytes_ = host + device;
  const CleanupId id = slot.arm(bytes_, [ctx] { mtmd_free(ctx); });
  if (device > 0) scope_.place(id, host, {DeviceBytes{device_place(accelerator_devices().front()), device}});
  ctx_ = {ctx, &scope_, id};
}

mtmd_context_params projector_params(int32_t n_gpu_layers, int32_t n_threads) {
  mtmd_context_params p = mtmd_context_params_default();
  p.use_gpu = n_gpu_layers != 0 && !accelerator_devices().empty();
  p.n_threads = n_threads;
  p.print_timings = false;
  p.warmup = true;
  return p;
}

void add_projector_estimate(MemoryEstimate& e, const std::string& path, int32_t n_gpu_layers) {
  check_model_file(path);
  const mtmd_context_params p = projector_params(n_gpu_layers, 1);
  std::unique_lock setup(mtmd_setup_mutex());
  take_llama_errors();
  const std::map<ggml_backend_dev_t, size_t> usage = mtmd_get_memory_usage(path.c_str(), p);
  setup.unlock();
  if (usage.empty()) {
    const std::string why = take_llama_errors();
    throw InvalidModelFile("projector '" + path + "' cannot be read: " + (why.empty() ? "llama.cpp's mtmd gave no reason" : why));
  }
  for (const auto& [dev, bytes] : usage) {
    const auto n = static_cast<int64_t>(bytes);
    if (!dev || ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
      e.model_host += n;
    } else {
      e.model_device += n;
      e.device_by_name[device_place(dev)] += n;
    }
  }
}

}  // namespace reclaim
