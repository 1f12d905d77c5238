// The environment switches that turn a mechanism off to measure what it does
// (RECLAIM_LOAD_ARENA=0, RECLAIM_HUGE_BUFFERS=0, RECLAIM_HEAP_RELEASE=none):
// on unless the variable holds the off value.
#pragma once

#include <cstdlib>
#include <cstring>

namespace reclaim {

inline bool env_switch_on(const char* name, const char* off = "0") {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, off) == 0);
}

}  // namespace reclaim
