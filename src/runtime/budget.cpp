#include "runtime/budget.h"

#include <algorithm>
#include <climits>

#include "core/ledger.h"
#include "engine/batcher.h"

namespace reclaim {

int64_t sum(const Places& p) {
  int64_t n = 0;
  for (const auto& [place, bytes] : p) n += bytes;
  return n;
}

Places ledger_places_under(const std::string& path) {
  Places out{{kHostMemory, 0}};
  for (const LedgerEntry& e : Ledger::process().entries()) {
    if (e.owner != path && e.owner.rfind(path + "/", 0) != 0) continue;
    out[kHostMemory] += static_cast<int64_t>(e.bytes);
    for (const DeviceBytes& d : e.devices) out[d.device] += static_cast<int64_t>(d.bytes);
  }
  return out;
}

Places reserved_by_place(const std::list<ModelEntry>& entries) {
  Places out;
  for (const ModelEntry& e : entries) {
    for (const auto& [place, bytes] : e.reserved_at) out[place] += bytes;
  }
  return out;
}

int64_t reserved_total(const std::list<ModelEntry>& entries) {
  int64_t n = 0;
  for (const ModelEntry& e : entries) n += e.reserved;
  return n;
}

int64_t prompt_cache_cap(const std::list<ModelEntry>& entries, const RegistryOptions& options, int more) {
  if (options.cache_ram <= 0) return 0;
  // Every reservation: a model's holds until it is unloaded.
  Places reserved = reserved_by_place(entries);
  const int loaded = more + static_cast<int>(std::count_if(entries.begin(), entries.end(), [](const ModelEntry& o) {
                       return o.state() == ModelState::loaded;
                     }));
  // What the budget has left for host memory, shared by the loaded models.
  int64_t left = INT64_MAX;
  if (options.memory_budget > 0) left = options.memory_budget - sum(reserved);
  if (auto it = options.memory_budget_at.find(kHostMemory); it != options.memory_budget_at.end()) {
    left = std::min(left, it->second - reserved[kHostMemory]);
  }
  if (left == INT64_MAX) return options.cache_ram;
  return std::clamp<int64_t>(left / std::max(1, loaded), 0, options.cache_ram);
}

Occupants occupants_besides(std::list<ModelEntry>& entries, const ModelEntry& for_entry) {
  Occupants out;
  for (ModelEntry& o : entries) {
    if (&o == &for_entry) continue;
    Occupant c;
    c.name = o.spec.name;
    c.reserved = o.reserved;
    c.reserved_at = o.reserved_at;
    c.counted = holds_room(o.life) && o.life != Life::unloading;
    c.pinned = o.spec.pinned;
    const bool here = may_give_room(o.life);
    c.idle = here && o.in_flight == 0 && o.pending_admits == 0;
    c.busy = here && !c.idle;
    c.draining = o.life == Life::draining;
    c.unloading = leaving(o.life);
    c.in_flight = o.in_flight;
    c.last_use = o.last_use_steady;
    out.bare.push_back(c);
    // Its prompt cache's saves are host memory beyond its estimate.
    if (const Batcher* b = o.loaded_batcher()) {
      const auto saved = static_cast<int64_t>(b->saved_bytes());
      c.reserved += saved;
      if (saved > 0) c.reserved_at[kHostMemory] += saved;
    }
    out.with_saves.push_back(std::move(c));
    out.who.push_back(&o);
  }
  return out;
}

}  // namespace reclaim
