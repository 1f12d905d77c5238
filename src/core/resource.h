// Kinds of resource that reclaim tracks. One list, so that the ledger, the
// logs, the audit and (later) the metrics all name a resource the same way.
#pragma once

#include <optional>
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
  other,
};

inline constexpr Kind kAllKinds[] = {Kind::model,  Kind::context, Kind::batch,  Kind::sampler,
                                     Kind::buffer, Kind::mmap,    Kind::fd,     Kind::thread,
                                     Kind::process, Kind::device_buffer, Kind::other};

std::string_view kind_name(Kind kind);
std::optional<Kind> kind_from_name(std::string_view name);

}  // namespace reclaim
