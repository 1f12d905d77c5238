#include "runtime/room.h"

#include <algorithm>
#include <numeric>

#include "core/size.h"

namespace reclaim {

RoomPlan plan_room(const std::vector<Occupant>& others, const std::string& name, int64_t needed, int64_t budget,
                   int max_loaded) {
  RoomPlan plan;
  int64_t used = 0, pinned_bytes = 0;
  int loaded = 0, pinned_count = 0;
  std::string pins;
  for (const Occupant& o : others) {
    used += o.reserved;
    loaded += o.counted ? 1 : 0;
    if (o.pinned && o.counted) {
      pinned_bytes += o.reserved;
      ++pinned_count;
      pins += (pins.empty() ? "" : ", ") + o.name + " " + format_bytes(o.reserved);
    }
  }
  auto fits = [&](int64_t bytes, int count) {
    return (budget == 0 || bytes + needed <= budget) && (max_loaded == 0 || count < max_loaded);
  };

  // What no wait can change is said at once.
  if (budget > 0 && needed > budget) {
    plan.step = RoomPlan::Step::never;
    plan.why = "model '" + name + "' needs about " + format_bytes(needed) + ", more than the whole memory budget of " +
               format_bytes(budget);
    return plan;
  }
  if (!fits(pinned_bytes, pinned_count)) {
    plan.step = RoomPlan::Step::never;
    plan.why = "model '" + name + "' needs about " + format_bytes(needed) + " and cannot fit beside the pinned models (" +
               pins + ")" +
               (budget > 0 ? " in the " + format_bytes(budget) + " budget" : "") +
               (max_loaded > 0 ? " with --max-loaded " + std::to_string(max_loaded) : "") +
               "; unpin one with POST /v1/models/unload";
    return plan;
  }
  if (fits(used, loaded)) {
    plan.step = RoomPlan::Step::fits;
    return plan;
  }

  std::vector<size_t> order(others.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return others[a].last_use < others[b].last_use; });

  for (size_t i : order) {
    if (others[i].idle && !others[i].pinned) {
      plan.step = RoomPlan::Step::evict;
      plan.evict = i;
      return plan;
    }
  }

  // What will be free once the models on their way out are gone, and then
  // once the chosen busy ones have drained.
  int64_t bytes = used;
  int count = loaded;
  for (const Occupant& o : others) {
    if (o.unloading) {
      bytes -= o.reserved;
      count -= o.counted ? 1 : 0;
    }
  }
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return others[i].draining; });
  for (size_t i : order) {
    if (fits(bytes, count)) break;
    const Occupant& o = others[i];
    if (!o.busy || o.pinned || o.unloading) continue;
    plan.drain.push_back(i);
    bytes -= o.reserved;
    count -= o.counted ? 1 : 0;
  }
  // Nothing to drain: the room is held by models loading or unloading, which
  // end by themselves.
  plan.step = plan.drain.empty() ? RoomPlan::Step::wait : RoomPlan::Step::drain;
  return plan;
}

}  // namespace reclaim
