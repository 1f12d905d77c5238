// Which loaded models give up their room for a model that waits to load.
//
// A pure decision over a snapshot of the other models, so that the policy is
// tested without loading anything (tests/room_test.cpp). The registry asks it
// again after every change and does one step of what it says.
//
// The policy: idle models go first, least recently used first. A model that
// serves requests is never unloaded under them: it is chosen to drain (it
// admits no new request, its requests run to their end) and is unloaded once
// idle. Models already draining stay chosen before others are added, so that
// a second look never spreads the cost over more models.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace reclaim {

// Bytes by place: "host", or an accelerator by ggml's name in lower case
// ("vulkan0", "cuda0").
using Places = std::map<std::string, int64_t>;

// The memory budget: `total` over every place (0: none) and a cap for each
// place named in `at`, since host RAM and each device's memory are not one
// pool.
struct MemoryBudget {
  int64_t total = 0;
  Places at;
};

// "8GiB" (a total) or "host=16GiB,vulkan0=2GiB" (a cap a place; "total=..."
// may be one of them). Throws Error naming what is wrong.
MemoryBudget parse_memory_budget(const std::string& text);
// The budget in the form it is given, for logs and /v1/resources.
std::string format_memory_budget(const MemoryBudget& budget);

struct Occupant {
  std::string name;
  int64_t reserved = 0;   // bytes the budget counts for it
  Places reserved_at;     // the same by place
  bool counted = false;   // loaded or loading: counts against --max-loaded
  bool pinned = false;
  bool idle = false;      // loaded, no request, no unload pending: can go now
  bool busy = false;      // loaded with requests in flight: can go after a drain
  bool draining = false;  // already chosen to drain
  bool unloading = false; // on its way out: its room comes back soon
  int in_flight = 0;
  std::chrono::steady_clock::time_point last_use{};
};

struct RoomPlan {
  enum class Step { fits, evict, drain, wait, never };
  Step step = Step::wait;
  size_t evict = 0;            // fits: -; evict: the index of the idle model to unload now
  std::vector<size_t> drain;   // drain: the indexes of the models that must drain (others stop draining)
  std::string why;             // never: what can never make room
};

// `others`: every model but the one that waits; `needed_at`: what it needs
// by place. A budget of 0 and max_loaded 0 mean no limit.
RoomPlan plan_room(const std::vector<Occupant>& others, const std::string& name, int64_t needed, const Places& needed_at,
                   const MemoryBudget& budget, int max_loaded);
// With a total budget only.
inline RoomPlan plan_room(const std::vector<Occupant>& others, const std::string& name, int64_t needed, int64_t budget,
                          int max_loaded) {
  return plan_room(others, name, needed, {}, MemoryBudget{budget, {}}, max_loaded);
}

}  // namespace reclaim
