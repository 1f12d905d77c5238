// What the memory budget counts for a catalogue's models, and what each one
// is to the choice of who makes room (runtime/room.h decides). Used under the
// registry's lock.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "runtime/model_entry.h"
#include "runtime/registry_options.h"
#include "runtime/room.h"

namespace reclaim {

int64_t sum(const Places& p);
// The bytes on the ledger under a scope path, by place.
Places ledger_places_under(const std::string& path);

// Every model's reservation, by place and in all: what the budget counts now.
Places reserved_by_place(const std::list<ModelEntry>& entries);
int64_t reserved_total(const std::list<ModelEntry>& entries);

// The host memory each model's prompt cache may save into: --cache-ram,
// within what the budget leaves, shared by the loaded models and `more`
// about to load.
int64_t prompt_cache_cap(const std::list<ModelEntry>& entries, const RegistryOptions& options, int more);

// The models other than `for_entry` as plan_room sees them, with their
// prompt caches' saves counted as host memory beyond their estimates, and
// bare (without them); `who` is the entry of each, in the same order.
struct Occupants {
  std::vector<Occupant> with_saves, bare;
  std::vector<ModelEntry*> who;
};
Occupants occupants_besides(std::list<ModelEntry>& entries, const ModelEntry& for_entry);

}  // namespace reclaim
