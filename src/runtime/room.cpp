#include "runtime/room.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/size.h"

namespace reclaim {

MemoryBudget parse_memory_budget(const std::string& text) {
  MemoryBudget b;
  if (text.find('=') == std::string::npos) {
    b.total = parse_size(text);
    return b;
  }
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error("--memory-budget '" + text + "': '" + item + "' is not PLACE=SIZE (e.g. host=16GiB,vulkan0=2GiB)");
    }
    std::string place = item.substr(0, eq);
    std::transform(place.begin(), place.end(), place.begin(), [](unsigned char c) { return std::tolower(c); });
    const int64_t bytes = parse_size(item.substr(eq + 1));
    if (place == "total") {
      b.total = bytes;
    } else if (!b.at.emplace(place, bytes).second) {
      throw Error("--memory-budget '" + text + "' names '" + place + "' twice");
    }
  }
  return b;
}

std::string format_memory_budget(const MemoryBudget& budget) {
  if (budget.at.empty()) return budget.total > 0 ? format_bytes(budget.total) : "none";
  std::string out;
  if (budget.total > 0) out = "total " + format_bytes(budget.total);
  for (const auto& [place, bytes] : budget.at) out += (out.empty() ? "" : ", ") + place + " " + format_bytes(bytes);
  return out;
}

namespace {

int64_t at(const Places& p, const std::string& place) {
  auto it = p.find(place);
  return it == p.end() ? 0 : it->second;
}

// What a set of models holds: in all, and by place.
struct Held {
  int64_t total = 0;
  Places at;
  int count = 0;
  void add(const Occupant& o, int sign) {
    total += sign * o.reserved;
    for (const auto& [place, bytes] : o.reserved_at) at[place] += sign * bytes;
    count += o.counted ? sign : 0;
  }
};

}  // namespace

RoomPlan plan_room(const std::vector<Occupant>& others, const std::string& name, int64_t needed, const Places& needed_at,
                   const MemoryBudget& budget, int max_loaded) {
  RoomPlan plan;
  Held used, pinned;
  std::string pins;
  for (const Occupant& o : others) {
    used.add(o, 1);
    if (o.pinned && o.counted) {
      pinned.add(o, 1);
      pins += (pins.empty() ? "" : ", ") + o.name + " " + format_bytes(o.reserved);
    }
  }
  auto fits = [&](const Held& h) {
    if (budget.total > 0 && h.total + needed > budget.total) return false;
    for (const auto& [place, cap] : budget.at) {
      if (at(h.at, place) + at(needed_at, place) > cap) return false;
    }
    return max_loaded == 0 || h.count < max_loaded;
  };
  // Whether `o` going would give back something that `h` lacks: a model on
  // the host only makes no room on a full device.
  auto helps = [&](const Held& h, const Occupant& o) {
    if (budget.total > 0 && h.total + needed > budget.total && o.reserved > 0) return true;
    for (const auto& [place, cap] : budget.at) {
      if (at(h.at, place) + at(needed_at, place) > cap && at(o.reserved_at, place) > 0) return true;
    }
    return max_loaded > 0 && h.count >= max_loaded && o.counted;
  };

  // What no wait can change is said at once.
  if (budget.total > 0 && needed > budget.total) {
    plan.step = RoomPlan::Step::never;
    plan.why = "model '" + name + "' needs about " + format_bytes(needed) + ", more than the whole memory budget of " +
               format_bytes(budget.total);
    return plan;
  }
  for (const auto& [place, cap] : budget.at) {
    if (at(needed_at, place) > cap) {
      plan.step = RoomPlan::Step::never;
      plan.why = "model '" + name + "' needs about " + format_bytes(at(needed_at, place)) + " on " + place +
                 ", more than its memory budget of " + format_bytes(cap);
      return plan;
    }
  }
  if (!fits(pinned)) {
    plan.step = RoomPlan::Step::never;
    plan.why = "model '" + name + "' needs about " + format_bytes(needed) + " and cannot fit beside the pinned models (" +
               pins + ")" +
               (budget.total > 0 || !budget.at.empty() ? " in the budget (" + format_memory_budget(budget) + ")" : "") +
               (max_loaded > 0 ? " with --max-loaded " + std::to_string(max_loaded) : "") +
               "; unpin one with POST /v1/models/unload";
    return plan;
  }
  if (fits(used)) {
    plan.step = RoomPlan::Step::fits;
    return plan;
  }

  std::vector<size_t> order(others.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return others[a].last_use < others[b].last_use; });

  for (size_t i : order) {
    if (others[i].idle && !others[i].pinned && helps(used, others[i])) {
      plan.step = RoomPlan::Step::evict;
      plan.evict = i;
      return plan;
    }
  }

  // What will be free once the models on their way out are gone, and then
  // once the chosen busy ones have drained.
  Held left = used;
  for (const Occupant& o : others) {
    if (o.unloading) left.add(o, -1);
  }
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return others[i].draining; });
  for (size_t i : order) {
    if (fits(left)) break;
    const Occupant& o = others[i];
    if (!o.busy || o.pinned || o.unloading || !helps(left, o)) continue;
    plan.drain.push_back(i);
    left.add(o, -1);
  }
  // Nothing to drain: the room is held by models loading or unloading, which
  // end by themselves.
  plan.step = plan.drain.empty() ? RoomPlan::Step::wait : RoomPlan::Step::drain;
  return plan;
}

}  // namespace reclaim
