// The registry's scheduling: who waits, in what order, and which models give
// up their room (registry.h says the policy; runtime/line.h keeps the line,
// runtime/room.h chooses who goes, runtime/budget.h counts).
#include <algorithm>

#include "core/defer.h"
#include "core/ledger.h"
#include "engine/batcher.h"
#include "runtime/model_entry.h"
#include "runtime/registry.h"
#include "runtime/room.h"
#include "runtime/unlocked.h"

namespace reclaim {

// One request's wait in admit_locked: its count among those queued for the
// model, its ticket in the model's line for a running slot and its model's
// place in the line for room, each given back however the wait ends. A wait
// that gives up (Wait::give_up) leaves its ticket and its start to the
// request's next one, which is counted for both.
class Registry::Waiter {
 public:
  Waiter(Registry& r, Entry& e, const Wait& wait)
      : r_(r), e_(e), wait_(wait), t0_(began(wait)), deadline_(t0_ + r.options_.queue_timeout),
        resumed_(wait.kept && wait.kept->began != Steady::time_point{}) {}
  ~Waiter() {
    drop_turn();
    leave_slot_line();
    if (waiting_) {
      --e_.queued;
      --r_.sched_.waiting;
    }
    if (gave_up_) {
      if (waiting_) wait_.kept->began = t0_;
    } else {
      if (waiting_ || resumed_) r_.count_wait_locked(t0_);
      if (wait_.kept) *wait_.kept = WaitKept{};  // its waits are over
    }
    r_.cv_.notify_all();
    r_.retired_let_go(e_);
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // Counted among the model's queued requests, or refused (QueueFull): a
  // model takes its running slots and max_queue more (a request that waits
  // for a load takes a slot when it is done). Nothing is counted for a
  // request that does not wait.
  void join_queue() {
    if (waiting_) return;
    const int max_running = r_.catalogue_.max_running_of(e_);
    const int slots = max_running > 0 ? max_running : 1;
    const int running = max_running > 0 ? std::min(e_.in_flight, slots) : 0;
    if (running + e_.queued >= slots + r_.options_.max_queue) {
      throw QueueFull("model '" + e_.spec.name + "' has " + std::to_string(e_.in_flight) + " requests running and " +
                      std::to_string(e_.queued) + " waiting, the most it takes; try again shortly");
    }
    if (wait_.no_wait) return;
    waiting_ = true;
    ++e_.queued;
    ++r_.sched_.waiting;
  }

  // A running slot on the admitting model, first come first served; true:
  // taken (or none is needed).
  bool take_slot(bool slot) {
    const int max_running = r_.catalogue_.max_running_of(e_);
    if (!slot || max_running == 0) return true;
    const bool first = e_.slot_line.empty() || e_.slot_line.front() == slot_ticket_;
    if (e_.in_flight >= max_running || !first) return false;
    if (slot_ticket_ != 0) e_.slot_line.pop_front();
    slot_ticket_ = 0;
    return true;
  }
  void line_up_for_slot() {
    if (slot_ticket_ != 0) return;
    const bool kept = wait_.kept && wait_.kept->slot_ticket != 0;
    slot_ticket_ = kept ? wait_.kept->slot_ticket : r_.line_.next_ticket();
    // Tickets rise, so a new one goes last and a kept one back where it was.
    e_.slot_line.insert(std::upper_bound(e_.slot_line.begin(), e_.slot_line.end(), slot_ticket_), slot_ticket_);
  }
  // Giving up (Wait::give_up): the ticket and the wait's start go with the
  // request, where it keeps them.
  void give_up() {
    if (!wait_.kept) return;
    gave_up_ = true;
    if (slot_ticket_ != 0) wait_.kept->slot_ticket = slot_ticket_;
  }
  // Out of the slot line, for a request that no longer waits for a slot.
  void leave_slot_line() {
    if (slot_ticket_ == 0) return;
    e_.slot_line.erase(std::find(e_.slot_line.begin(), e_.slot_line.end(), slot_ticket_));
    slot_ticket_ = 0;
  }

  // The model's place in the line for room, joined if need be.
  Line::Place turn() {
    if (turn_id_ == 0) turn_id_ = r_.line_.join(e_);
    return r_.line_.find(turn_id_);
  }
  // A place that is gone was gone because it loaded the model: this request
  // was one of those admitted with it.
  void drop_turn() {
    if (turn_id_ == 0) return;
    Line::Place place = r_.line_.find(turn_id_);
    if (place == r_.line_.end()) {
      if (e_.pending_admits > 0) --e_.pending_admits;
    } else if (--place->waiters == 0 && !place->acting) {
      r_.erase_turn_locked(place);
    }
    turn_id_ = 0;
  }
  void forget_gone_turn() {
    if (turn_id_ != 0 && r_.line_.find(turn_id_) == r_.line_.end()) drop_turn();
  }
  // This request's turn loaded the model and is out of the line.
  void turn_done() { turn_id_ = 0; }

  // Waits for a change, at most a poll. Without the lock it asks whether the
  // client is still there (the check may write to a slow client): what
  // changed meanwhile is looked at again from the top. False: the wait's
  // time to give up has come.
  bool pause(std::unique_lock<std::mutex>& lock) {
    if (Steady::now() >= wait_.give_up) {
      give_up();
      return false;
    }
    r_.cv_.wait_until(lock, std::min({deadline_, wait_.give_up, Steady::now() + wait_.poll}));
    bool wanted = true;
    if (wait_.still_wanted) {
      Unlocked unlocked(lock);
      wanted = wait_.still_wanted();
    }
    if (!wanted) {
      ++r_.sched_.gone;
      throw ClientGone("the client left while its request waited for model '" + e_.spec.name + "'");
    }
    if (Steady::now() >= deadline_) {
      ++r_.sched_.timeouts;
      throw QueueTimeout("waited " + std::to_string(r_.options_.queue_timeout.count()) +
                         " ms (--queue-timeout) for model '" + e_.spec.name + "' (" + life_name(e_.life) + ", " +
                         std::to_string(e_.in_flight) + " running, " + std::to_string(e_.queued) + " waiting)");
    }
    return true;
  }

 private:
  Registry& r_;
  Entry& e_;
  const Wait& wait_;
  static Steady::time_point began(const Wait& wait) {
    return wait.kept && wait.kept->began != Steady::time_point{} ? wait.kept->began : Steady::now();
  }
  const Steady::time_point t0_, deadline_;
  const bool resumed_;       // an earlier wait of the request gave up
  bool waiting_ = false;     // counted in e.queued
  bool gave_up_ = false;     // its start kept for the request's next wait
  uint64_t slot_ticket_ = 0; // place in e's slot line
  uint64_t turn_id_ = 0;     // e's place in the line for room, joined
};

bool Registry::admit_locked(std::unique_lock<std::mutex>& lock, Entry& e, const Wait& wait, Admission admission) {
  Waiter w(*this, e, wait);
  for (;;) {
    if (stopping_ || closing_) throw NoRoom("the server is shutting down");
    w.forget_gone_turn();
    // A model that waits to load again with new settings (a reconfiguration)
    // takes nothing more on its old load: its running requests finish, the
    // reaper unloads it, and what came meanwhile loads it with them. Chosen
    // to drain meanwhile, it still waits for them.
    const bool reloading = e.life == Life::reloading || (e.life == Life::draining && e.next_spec);
    if (reloading) {
      w.leave_slot_line();
      w.drop_turn();
      w.join_queue();
      if (wait.no_wait) return false;
    } else if (admits_requests(e.life)) {
      w.drop_turn();
      // A kept ticket is in the line before the slot is asked for: it may be
      // the first.
      if (wait.kept && wait.kept->slot_ticket != 0) w.line_up_for_slot();
      if (w.take_slot(admission.slot)) return true;
      w.join_queue();
      if (wait.no_wait) return false;
      w.line_up_for_slot();
    } else if (needs_turn(e.life)) {
      // Unloaded, or chosen to make room: it needs a turn.
      if (e.life == Life::unloaded && !admission.autoload) {
        throw NotLoaded("model '" + e.spec.name + "' is not loaded, and this server does not load models on request "
                        "(--no-autoload): load it with POST /v1/models/load");
      }
      w.join_queue();
      if (wait.no_wait) return false;
      w.leave_slot_line();
      Line::Place place = w.turn();
      if (!holds_room(e.life) && line_.at_head(place) && !place->acting && take_turn_locked(lock, e, *place)) {
        // Loaded: the turn's other requests take their leases before
        // anyone may count the model idle.
        e.pending_admits += place->waiters - 1;
        line_.erase(place);
        w.turn_done();
        cv_.notify_all();
        continue;
      }
    } else {
      // Loading, unloading, or an unload waits for its requests.
      w.join_queue();
      if (wait.no_wait) return false;
    }
    if (!w.pause(lock)) return false;
  }
}

void Registry::count_wait_locked(Steady::time_point began) {
  ++sched_.waits;
  const double waited = std::chrono::duration<double>(Steady::now() - began).count();
  sched_.wait_seconds += waited;
  waits_.observe(waited);
}

void Registry::count_wait(Steady::time_point began) {
  std::lock_guard lock(mu_);
  count_wait_locked(began);
}

bool Registry::take_turn_locked(std::unique_lock<std::mutex>& lock, Entry& e, Turn& turn) {
  turn.acting = true;
  Defer done([&] { turn.acting = false; });
  const int64_t needed = estimate_for_locked(lock, e);  // of the spec of this generation
  const uint64_t generation = e.spec_generation;
  if (!make_room_locked(lock, e, needed, turn)) return false;
  // Reconfigured while room was made: the estimate is of the old spec.
  if (e.spec_generation != generation) return false;
  const RoomHow how = turn.how();
  const double waited = std::chrono::duration<double>(Steady::now() - turn.since).count();
  load_locked(lock, e, needed);
  ++sched_.room_loads[static_cast<int>(how)];
  sched_.room_wait_seconds[static_cast<int>(how)] += waited;
  e.last_room = how;
  e.last_room_wait_s = waited;
  return true;
}

void Registry::erase_turn_locked(Line::Place place) {
  if (line_.erase(place)) stop_draining_locked();
  cv_.notify_all();
}

void Registry::stop_draining_locked() {
  for (Entry& o : catalogue_.entries()) {
    if (o.life == Life::draining) o.change(o.settled(LifeEvent::resume, LifeEvent::resume_stale));
  }
  cv_.notify_all();
}

bool Registry::drop_prompt_cache_saves() {
  std::lock_guard lock(mu_);
  return drop_saved_locked();
}

bool Registry::drop_saved_locked() {
  bool dropped = false;
  for (Entry& o : catalogue_.entries()) {
    Batcher* b = o.loaded_batcher();
    if (!b || b->saved_bytes() == 0) continue;
    b->drop_saved();
    dropped = true;
  }
  if (dropped) ++sched_.cache_drops;
  return dropped;
}

bool Registry::make_room_locked(std::unique_lock<std::mutex>& lock, Entry& for_entry, int64_t needed, Turn& turn) {
  const MemoryBudget budget{options_.memory_budget, options_.memory_budget_at};
  auto plan_for = [&](const std::vector<Occupant>& others) {
    return plan_room(others, for_entry.spec.name, needed, for_entry.estimate_at, budget, options_.max_loaded);
  };
  bool dropped = false;
  for (;;) {
    const Occupants occupants = occupants_besides(catalogue_.entries(), for_entry);
    const RoomPlan plan = plan_for(occupants.with_saves);
    // The prompt caches' saves go before any model does: they are the
    // cheapest to lose (a later turn decodes its history again). But only
    // when losing them lets the model in: under --max-loaded, or when a model
    // must go anyway, they would go for nothing (the one evicted takes its
    // own with it, and the loop comes back here after).
    if (plan.step != RoomPlan::Step::fits && !dropped && plan_for(occupants.bare).step == RoomPlan::Step::fits &&
        drop_saved_locked()) {
      dropped = true;
      continue;
    }
    switch (plan.step) {
      case RoomPlan::Step::never:
        stop_draining_locked();
        throw NoRoom(plan.why);
      case RoomPlan::Step::fits:
        stop_draining_locked();
        return true;
      case RoomPlan::Step::evict:
        ++sched_.evictions;
        turn.evicted = true;
        unload_locked(lock, *occupants.who[plan.evict], UnloadMode::drain, Millis(0));
        continue;
      case RoomPlan::Step::wait:
        turn.behind = true;
        return false;
      case RoomPlan::Step::drain:
        turn.drained = true;
        drain_locked(occupants, plan.drain);
        return false;
    }
  }
}

void Registry::drain_locked(const Occupants& occupants, const std::vector<size_t>& drain) {
  const Steady::time_point now = Steady::now();
  std::vector<bool> chosen(occupants.who.size(), false);
  for (size_t i : drain) chosen[i] = true;
  for (size_t i = 0; i < occupants.who.size(); ++i) {
    Entry& o = *occupants.who[i];
    if (!chosen[i]) {
      if (o.life == Life::draining) o.change(o.settled(LifeEvent::resume, LifeEvent::resume_stale));
      continue;
    }
    if (o.life != Life::draining) {
      // Its turn is not over: the head waits (and looks again at its next
      // poll).
      if (now < o.loaded_at + options_.min_serve) continue;
      o.change(LifeEvent::drain);
      o.drain_since = now;
      ++sched_.drains;
      cv_.notify_all();
    }
    // A drain is bounded: past drain_timeout its requests are cancelled,
    // and stop within one decode step.
    if (now - o.drain_since >= options_.drain_timeout) {
      for (CancelToken* t : o.tokens) t->cancel(CancelReason::caller);
    }
  }
}

}  // namespace reclaim
