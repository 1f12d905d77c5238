// Kinds of resource that reclaim tracks. One list, so that the ledger, the
// logs, the audit and (later) the metrics all name a resource the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace reclaim {

enum class Kind {
  model,
  context,
  batch,
  sampler,
  buffer,
  mmap,
  fd,
  thread,
  process,  // a child process, from its start until it is reaped
  device_buffer,
  device_state,  // an accelerator's runtime state (driver, compiled pipelines), freed only at exit
  prompt_cache,  // KV cells a finished request left for the next one (engine/batcher.h)
  other,
};

inline constexpr Kind kAllKinds[] = {Kind::model,  Kind::context, Kind::batch,  Kind::sampler,
                                     Kind::buffer, Kind::mmap,    Kind::fd,     Kind::thread,
                                     Kind::process, Kind::device_buffer, Kind::device_state, Kind::prompt_cache,
                                     Kind::other};

// Bytes of an entry that are an accelerator's memory (a model's offloaded
// weights, a context's KV cache and compute buffers there), by the device's
// place name: ggml's name in lower case ("vulkan0", "cuda0").
struct DeviceBytes {
  std::string device;
  uint64_t bytes = 0;
  bool operator==(const DeviceBytes&) const = default;
};

std::string_view kind_name(Kind kind);
std::optional<Kind> kind_from_name(std::string_view name);

}  // namespace reclaim
