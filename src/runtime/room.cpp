#include "runtime/room.h"

#include <algorithm>
#include <numeric>
#include <optional>
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

namespace {

// One choice of room: the others, what the waiting model needs, and the
// limits it must fit in.
class Planner {
 public:
  Planner(const std::vector<Occupant>& others, const std::string& name, int64_t needed, const Places& needed_at,
          const MemoryBudget& budget, int max_loaded)
      : others_(others), name_(name), needed_(needed), needed_at_(needed_at), budget_(budget), max_loaded_(max_loaded) {
    for (const Occupant& o : others) {
      used_.add(o, 1);
      if (o.pinned && o.counted) {
        pinned_.add(o, 1);
        pins_ += (pins_.empty() ? "" : ", ") + o.name + " " + format_bytes(o.reserved);
      }
    }
  }

  // What no wait can change, said at once; empty when a wait could.
  std::string never() const {
    if (budget_.total > 0 && needed_ > budget_.total) {
      return "model '" + name_ + "' needs about " + format_bytes(needed_) + ", more than the whole memory budget of " +
             format_bytes(budget_.total);
    }
    for (const auto& [place, cap] : budget_.at) {
      if (at(needed_at_, place) > cap) {
        return "model '" + name_ + "' needs about " + format_bytes(at(needed_at_, place)) + " on " + place +
               ", more than its memory budget of " + format_bytes(cap);
      }
    }
    if (fits(pinned_)) return "";
    return "model '" + name_ + "' needs about " + format_bytes(needed_) + " and cannot fit beside the pinned models (" +
           pins_ + ")" +
           (budget_.total > 0 || !budget_.at.empty() ? " in the budget (" + format_memory_budget(budget_) + ")" : "") +
           (max_loaded_ > 0 ? " with --max-loaded " + std::to_string(max_loaded_) : "") +
           "; unpin one with POST /v1/models/unload";
  }

  bool fits_now() const { return fits(used_); }

  // The others, least recently used first.
  std::vector<size_t> by_age() const {
    std::vector<size_t> order(others_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return others_[a].last_use < others_[b].last_use; });
    return order;
  }

  // The oldest idle model whose going helps; none where no idle one does.
  std::optional<size_t> idle_to_evict(const std::vector<size_t>& order) const {
    for (size_t i : order) {
      if (others_[i].idle && !others_[i].pinned && helps(used_, others_[i])) return i;
    }
    return std::nullopt;
  }

  // The busy models that must drain, those already draining first: what
  // will be free once the models on their way out are gone, and then once
  // the chosen ones have drained.
  std::vector<size_t> busy_to_drain(std::vector<size_t> order) const {
    Held left = used_;
    for (const Occupant& o : others_) {
      if (o.unloading) left.add(o, -1);
    }
    std::stable_partition(order.begin(), order.end(), [&](size_t i) { return others_[i].draining; });
    std::vector<size_t> drain;
    for (size_t i : order) {
      if (fits(left)) break;
      const Occupant& o = others_[i];
      if (!o.busy || o.pinned || o.unloading || !helps(left, o)) continue;
      drain.push_back(i);
      left.add(o, -1);
    }
    return drain;
  }

 private:
  bool fits(const Held& h) const {
    if (budget_.total > 0 && h.total + needed_ > budget_.total) return false;
    for (const auto& [place, cap] : budget_.at) {
      if (at(h.at, place) + at(needed_at_, place) > cap) return false;
    }
    return max_loaded_ == 0 || h.count < max_loaded_;
  }
  // Whether `o` going would give back something that `h` lacks: a model on
  // the host only makes no room on a full device.
  bool helps(const Held& h, const Occupant& o) const {
    if (budget_.total > 0 && h.total + needed_ > budget_.total && o.reserved > 0) return true;
    for (const auto& [place, cap] : budget_.at) {
      if (at(h.at, place) + at(needed_at_, place) > cap && at(o.reserved_at, place) > 0) return true;
    }
    return max_loaded_ > 0 && h.count >= max_loaded_ && o.counted;
  }

  const std::vector<Occupant>& others_;
  const std::string& name_;
  const int64_t needed_;
  const Places& needed_at_;
  const MemoryBudget& budget_;
  const int max_loaded_;
  Held used_, pinned_;
  std::string pins_;
};

}  // namespace

RoomPlan plan_room(const std::vector<Occupant>& others, const std::string& name, int64_t needed, const Places& needed_at,
                   const MemoryBudget& budget, int max_loaded) {
  const Planner p(others, name, needed, needed_at, budget, max_loaded);
  RoomPlan plan;
  plan.why = p.never();
  if (!plan.why.empty()) {
    plan.step = RoomPlan::Step::never;
    return plan;
  }
  if (p.fits_now()) {
    plan.step = RoomPlan::Step::fits;
    return plan;
  }
  const std::vector<size_t> order = p.by_age();
  if (const std::optional<size_t> i = p.idle_to_evict(order)) {
    plan.step = RoomPlan::Step::evict;
    plan.evict = *i;
    return plan;
  }
  plan.drain = p.busy_to_drain(order);
  // Nothing to drain: the room is held by models loading or unloading, which
  // end by themselves.
  plan.step = plan.drain.empty() ? RoomPlan::Step::wait : RoomPlan::Step::drain;
  return plan;
}

}  // namespace reclaim
