#include "core/resource.h"

namespace reclaim {

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::model: return "model";
    case Kind::context: return "context";
    case Kind::batch: return "batch";
    case Kind::sampler: return "sampler";
    case Kind::buffer: return "buffer";
    case Kind::mmap: return "mmap";
    case Kind::fd: return "fd";
    case Kind::thread: return "thread";
    case Kind::process: return "process";
    case Kind::device_buffer: return "device_buffer";
    case Kind::device_state: return "device_state";
    case Kind::prompt_cache: return "prompt_cache";
    case Kind::other: return "other";
  }
  return "other";
}

std::optional<Kind> kind_from_name(std::string_view name) {
  for (Kind k : kAllKinds) {
    if (kind_name(k) == name) return k;
  }
  return std::nullopt;
}

}  // namespace reclaim
