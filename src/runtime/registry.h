// The models a server hosts, loaded and unloaded at run time.
//
// A request takes a Lease on a model: while any lease is alive the model stays
// loaded, and an unload waits for the last one (drain) or cancels them through
// their tokens (cancel). A model nobody holds is unloaded when its keep-alive
// expires, or evicted, least recently used first, when another model needs
// its room in the memory budget. Concurrent requests for a model that is
// loading wait for that one load.
//
// Scheduling (docs/architecture.md, "Scheduling"): a request for a model that
// has no room yet waits in one first-in, first-out line of models. Requests
// for the same model share its place. Only the model at the head of the line
// makes room: idle models are unloaded, busy ones are chosen to drain (they
// admit no new request, and their requests run to their end or, after
// drain_timeout, are cancelled) and then unloaded. A model whose requests
// wait behind one being drained takes its own place at the end of the line,
// so two busy models take turns and neither starves. A request waits at most
// queue_timeout; a model that can never fit (the budget, the pinned models)
// is refused at once.
//
// Memory is accounted with the engine's estimate before a load (the budget
// is never exceeded by that accounting) and checked against the ledger after.
//
// The registry composes its parts, all used under its one lock: the
// catalogue of models and their settings (catalogue.h), each model's life
// (model_life.h), the line for room (line.h) and the budget's counts
// (budget.h, with room.h's choice). This file pair loads, unloads, leases and
// reaps; scheduling.cpp admits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/cancel.h"
#include "core/error.h"
#include "core/histogram.h"
#include "core/scope.h"
#include "core/scoped_thread.h"
#include "engine/batcher.h"
#include "engine/model.h"
#include "engine/session.h"
#include "runtime/budget.h"
#include "runtime/catalogue.h"
#include "runtime/line.h"
#include "runtime/model_status.h"
#include "runtime/registry_errors.h"
#include "runtime/registry_options.h"
#include "runtime/room.h"
#include "runtime/vetter.h"

namespace reclaim {

// What one request's waits share: its ticket in its model's line for a
// running slot, which keeps its place (0: none yet), and when it began
// waiting, from which its waits count as one and --queue-timeout runs.
// (Its model's place in the line for room is kept as long as another
// request waits with it; a request alone there joins the line again.)
struct WaitKept {
  uint64_t slot_ticket = 0;
  std::chrono::steady_clock::time_point began{};  // epoch: not waited yet
};

// How a request waits in acquire() or load().
struct Wait {
  // Polled at least every `poll` while waiting, without the registry's lock
  // (it may write a keep-alive to its client); false: the client is gone and
  // the request leaves the line (ClientGone).
  std::function<bool()> still_wanted;
  Millis poll = std::chrono::milliseconds(100);
  // Not waiting at all: acquire() returns an empty lease where it would wait
  // (it still throws QueueFull where the line is full).
  bool no_wait = false;
  // Past it, acquire() gives up as no_wait does (an empty lease), out of the
  // line, unless this thread is loading the model (a load is not cut short).
  std::chrono::steady_clock::time_point give_up = std::chrono::steady_clock::time_point::max();
  // What a request that gives up keeps for its next wait (a stream that
  // starts past --stream-hold waits on), so that its waits are one.
  WaitKept* kept = nullptr;
};

// Counts of the scheduler since the start, for /metrics.
struct SchedulerStats {
  uint64_t waits = 0;           // requests that waited for a slot, a load or a swap
  double wait_seconds = 0;      // their waits, summed
  uint64_t evictions = 0;       // models unloaded to make room
  uint64_t cache_drops = 0;     // times the prompt caches' saves were dropped to make room
  uint64_t drains = 0;          // busy models chosen to drain for room
  uint64_t timeouts = 0;        // QueueTimeout
  uint64_t gone = 0;            // clients that left while waiting
  int waiting = 0;              // requests waiting now
  // Decodes of every model since the start, and the sequences in them.
  uint64_t decode_steps = 0, busy_in_steps = 0;
  // Speculative decoding's, of every model since the start: the steps of a
  // sequence with a guess, the tokens guessed, and those the models picked.
  uint64_t guesses = 0, guessed = 0, guesses_kept = 0;
  std::vector<std::string> line;  // the models waiting for room, first first
  // Seconds, by bucket: each wait for a slot, a load or a swap; each load
  // and unload.
  HistogramCounts wait_histogram, load_histogram, unload_histogram;
  // Loads of models that waited in the line for room, by how the room was
  // found (RoomHow), and their waits from joining the line to the load.
  uint64_t room_loads[kRoomHows] = {};
  double room_wait_seconds[kRoomHows] = {};
};

class Lease;

enum class UnloadMode { drain, cancel };

class Registry {
 public:
  Registry(RegistryOptions options, std::vector<ModelSpec> models);
  ~Registry();  // unloads everything, cancelling what runs
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Throws BadModelName, UnknownModel, NotLoaded, NoRoom, QueueFull,
  // QueueTimeout, ClientGone, or the load's Error.
  // `keep_alive`: this request's own (Ollama's keep_alive field; negative:
  // kept until unloaded); none: the model's, else the registry's.
  Lease acquire(const std::string& name, std::optional<Millis> keep_alive = std::nullopt, const Wait& wait = {});
  // Loads without a request; `pin` keeps it from eviction and keep-alive.
  void load(const std::string& name, bool pin = false, const Wait& wait = {});
  // Pins or unpins without loading: a pinned model is never evicted nor
  // unloaded by keep-alive; one unpinned now gets its keep-alive from now.
  void set_pinned(const std::string& name, bool pinned);
  // Returns once the model is unloaded. drain: waits up to `timeout` for the
  // requests in flight, then cancels them; cancel: cancels them at once.
  void unload(const std::string& name, UnloadMode mode, Millis timeout);
  void unload_all(UnloadMode mode, Millis timeout);

  std::vector<ModelStatus> list() const;
  // The models' names (not their aliases), in the catalogue's order; those
  // reconfigured away are not among them.
  std::vector<std::string> names() const;

  // The models as a reloaded configuration has them (SIGHUP, a folder
  // scanned again). A new name is added. A model whose path, context,
  // parallelism, threads or GPU layers changed takes them at once if it is
  // not loaded; if it is, it takes no new request from then: its running
  // ones finish, it is unloaded, and the requests that came meanwhile load
  // it with them (under --no-autoload too). Its other settings (aliases,
  // template, keep-alive, pin, defaults) it takes at once. A name no longer
  // there is refused from now on and dropped once unloaded (a busy model
  // when idle). Throws Error, changing nothing, where the set is not valid.
  using Reconfigured = reclaim::Reconfigured;
  Reconfigured reconfigure(std::vector<ModelSpec> models);
  SchedulerStats scheduler() const;
  ModelStatus status(const std::string& name) const;
  // Waits (on the registry's condition, not a sleep) until `name` is in `state`.
  bool wait_for_state(const std::string& name, ModelState state, Millis timeout) const;
  // Queues every model's file for vetting, so that first requests find their
  // verdicts ready. Does nothing without a vetter.
  void vet_in_background();
  // Bytes the budget counts now: estimates of the models loaded or loading.
  int64_t accounted() const;
  Places accounted_by_place() const;
  // A shutdown begins: no request or load is admitted from now (NoRoom),
  // and those waiting leave their lines; what holds a lease runs on. Were a
  // request admitted after the shutdown's unloads, it would load its model
  // again and run past the shutdown's timeout.
  void stop_admitting();
  // Counts a request's wait that gave up (Wait::give_up) and did not wait
  // again (its client left, its stream never started): since `began`.
  void count_wait(std::chrono::steady_clock::time_point began);
  // Drops every model's prompt-cache saves in host memory, as room pressure
  // does; false if there were none.
  bool drop_prompt_cache_saves();
  const RegistryOptions& options() const { return options_; }
  Scope& scope() { return scope_; }

  // Checks a model name: printable, no backslash, and no empty, '.' or '..'
  // part between slashes (BadModelName).
  static void check_name(const std::string& name) { Catalogue::check_name(name); }
  // A model's own settings, by its name or an alias (BadModelName,
  // UnknownModel).
  ModelSettings settings(const std::string& name) const;
  // Its batch as it loads: its sequences and each one's context, its own
  // settings over the registry's (UnknownModel).
  BatcherOptions batching(const std::string& name) const;

 private:
  friend class Lease;
  using Entry = ModelEntry;

  ModelStatus status_locked(const Entry& e) const;
  // With the lock held on entry and exit; drops it while loading.
  void load_locked(std::unique_lock<std::mutex>& lock, Entry& e, int64_t estimate);
  ModelLoad model_load(Entry& e);
  // Bytes the budget counts for `e`: the last estimate of the same file, or
  // a new one (in the vetting child). Drops the lock while it estimates.
  int64_t estimate_for_locked(std::unique_lock<std::mutex>& lock, Entry& e);
  // One try of it: none where the spec changed (spec_generation) meanwhile.
  std::optional<int64_t> estimate_once_locked(std::unique_lock<std::mutex>& lock, Entry& e);
  // Sets the keep-alive deadline of a model nobody holds.
  void set_expiry_locked(Entry& e, std::optional<Millis> keep_alive = std::nullopt);

  // Scheduling (runtime/scheduling.cpp). Waits until `e` is loaded and admits
  // requests (and, with `slot`, has a running slot for this one), loading it
  // when its turn comes; false: it would wait and wait.no_wait was set.
  struct Admission {
    bool slot = true;      // a request, which takes a running slot; false: a load without one
    bool autoload = true;  // an unloaded model may be loaded for it (--no-autoload: not for requests)
  };
  class Waiter;
  bool admit_locked(std::unique_lock<std::mutex>& lock, Entry& e, const Wait& wait, Admission admission);
  // Makes room for the model at the head of the line and loads it; false:
  // not yet (busy models are draining, or models are on their way out).
  bool take_turn_locked(std::unique_lock<std::mutex>& lock, Entry& e, Turn& turn);
  // One step towards room for `for_entry`; true: it fits.
  bool make_room_locked(std::unique_lock<std::mutex>& lock, Entry& for_entry, int64_t needed, Turn& turn);
  // Chooses the busy models that drain for room, and cancels the requests
  // of those that drained past drain_timeout.
  void drain_locked(const Occupants& occupants, const std::vector<size_t>& chosen);
  // The prompt caches' saves of every loaded model go; false if there were none.
  bool drop_saved_locked();
  // Sets each loaded model's prompt-cache cap again (budget.h); on every load and unload.
  void set_cache_ram_locked();
  void erase_turn_locked(Line::Place place);
  void stop_draining_locked();
  void unload_locked(std::unique_lock<std::mutex>& lock, Entry& e, UnloadMode mode, Millis timeout);
  void finish_unload_locked(std::unique_lock<std::mutex>& lock, Entry& e);
  void release_lease(Lease& lease) noexcept;
  void count_wait_locked(Steady::time_point began);  // a request's wait, ended
  // A wait on `e` ended: where it is retired, the reaper may drop it now.
  void retired_let_go(const Entry& e) const {
    if (e.retired) reaper_cv_.notify_all();
  }
  void reaper();
  void wake_reaper() noexcept;  // to stop: the reaper's body returns

  RegistryOptions options_;
  Scope scope_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // any state or lease change
  mutable std::condition_variable reaper_cv_;  // const: a status wait's Watch may wake it
  uint64_t devices_idle_events_ = 0;  // each time the last loaded model goes
  Catalogue catalogue_;  // after options_, which it reads
  Line line_;
  SchedulerStats sched_;
  // The buckets Prometheus' clients use by default, from 5 ms to 10 s, and
  // beyond for waits and loads of large models.
  Histogram waits_{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}};
  Histogram loads_{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}};
  Histogram unloads_{{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  bool stopping_ = false;
  bool closing_ = false;  // stop_admitting(): nothing more is admitted, what holds a lease runs on
  ScopedThread reaper_;
};

// A request's hold on a loaded model. Movable; the model stays loaded while
// it lives. Its cancel token is cancelled by an unload in cancel mode (or at
// the end of a drain).
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  ~Lease();

  Model& model() const { return *model_; }
  // The token the request's session should take (parent of the request's own).
  const CancelToken& cancel_token() const { return *token_; }
  const std::string& name() const;
  explicit operator bool() const { return model_ != nullptr; }
  void release();

 private:
  friend class Registry;
  Registry* registry_ = nullptr;
  ModelEntry* entry_ = nullptr;
  Model* model_ = nullptr;
  std::unique_ptr<CancelToken> token_;
  std::optional<Millis> keep_alive_;  // the request's own; none: the model's
};

}  // namespace reclaim
