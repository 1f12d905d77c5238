// The registry's record of one model: its spec, its life, what it holds and
// its counts. Every field is read and written under the registry's lock,
// but `progress`, which the load's thread writes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cancel.h"
#include "engine/batcher.h"
#include "engine/model.h"
#include "runtime/line.h"
#include "runtime/model_life.h"
#include "runtime/registry_options.h"
#include "runtime/room.h"

namespace reclaim {

using Steady = std::chrono::steady_clock;

struct ModelEntry {
  explicit ModelEntry(ModelSpec s) : spec(std::move(s)) {}
  ModelSpec spec;
  std::optional<ModelSpec> next_spec;  // reconfigured: taken once it is unloaded
  bool retired = false;                // reconfigured away: refused, dropped once unloaded
  Life life = Life::unloaded;          // changed only by change(), under the registry's lock
  std::unique_ptr<Model> model;
  int in_flight = 0;
  int queued = 0;                    // requests waiting for it: a slot, a load, a swap
  std::deque<uint64_t> slot_line;    // the requests waiting for a running slot, first first
  std::vector<CancelToken*> tokens;  // of the leases in flight
  Steady::time_point drain_since{};
  Steady::time_point loaded_at{};
  // Requests whose turn loaded it and that have not taken their lease yet:
  // until they have, it is not idle, so that the next turn cannot take it.
  int pending_admits = 0;
  std::atomic<float> progress{0};
  int64_t estimate = 0;  // of the last load
  int64_t model_estimate = 0;
  std::string estimated_file;  // identity of the file the estimate is of (file_identity)
  // Bumped when the spec a load would take changes (a reconfiguration): an
  // estimate made meanwhile, without the lock, is of the old one.
  uint64_t spec_generation = 0;
  // Threads waiting on it outside a request's wait (an unload, a wait for a
  // state): a retired entry is not dropped under them.
  mutable int watchers = 0;
  int64_t reserved = 0;  // what the budget counts for it now
  Places estimate_at, reserved_at;  // the same two by place
  uint64_t loads = 0, unloads = 0;
  double last_load_ms = 0, last_unload_ms = 0;
  // How its last load found room, and how long its line's first request
  // waited for it (the load itself not included).
  std::optional<RoomHow> last_room;
  double last_room_wait_s = 0;
  std::chrono::system_clock::time_point last_use{};
  Steady::time_point last_use_steady{};
  Steady::time_point expires = Steady::time_point::max();
  std::string last_error;

  void change(LifeEvent event) { life = apply_life(life, event); }
  // Where a drain or a load leaves it: serving, or waiting for the settings
  // a reconfiguration gave it.
  LifeEvent settled(LifeEvent plain, LifeEvent stale) const { return next_spec ? stale : plain; }
  ModelState state() const { return state_of(life); }
  // The batch of the model while it is loaded, else null.
  Batcher* loaded_batcher() const { return state() == ModelState::loaded && model ? model->batcher() : nullptr; }
};

// A thread among an entry's watchers for a block, under the registry's lock
// at both ends. The last watcher of a retired entry wakes `reaper`, which
// may drop it then.
class Watch {
 public:
  Watch(const ModelEntry& e, std::condition_variable& reaper) : e_(e), reaper_(reaper) { ++e_.watchers; }
  ~Watch() {
    if (--e_.watchers == 0 && e_.retired) reaper_.notify_all();
  }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

 private:
  const ModelEntry& e_;
  std::condition_variable& reaper_;
};

}  // namespace reclaim
