// The registry's scheduling: who waits, in what order, and which models give
// up their room (registry.h says the policy; runtime/room.h decides the
// victims).
#include <algorithm>

#include "core/defer.h"
#include "core/ledger.h"
#include "engine/batcher.h"
#include "runtime/registry_entry.h"
#include "runtime/room.h"

namespace reclaim {

bool Registry::admit_locked(std::unique_lock<std::mutex>& lock, Entry& e, const Wait& wait, Admission admission) {
  const bool slot = admission.slot, autoload = admission.autoload;
  const Steady::time_point t0 = Steady::now();
  const Steady::time_point deadline = t0 + options_.queue_timeout;
  bool waiting = false;     // counted in e.queued
  uint64_t slot_ticket = 0; // place in e's slot line
  uint64_t turn_id = 0;     // e's place in the line for room, joined
  auto find_turn = [&]() -> std::list<Turn>::iterator {
    for (auto it = line_.begin(); it != line_.end(); ++it) {
      if (it->id == turn_id) return it;
    }
    return line_.end();
  };
  // A turn that is gone was gone because it loaded the model.
  auto drop_turn = [&] {
    if (turn_id == 0) return;
    auto it = find_turn();
    if (it == line_.end()) {
      if (e.pending_admits > 0) --e.pending_admits;
    } else if (--it->waiters == 0 && !it->acting) {
      erase_turn_locked(it);
    }
    turn_id = 0;
  };
  // Out of e's slot line, for a request that no longer waits for a slot there.
  auto leave_slot_line = [&] {
    if (slot_ticket == 0) return;
    e.slot_line.erase(std::find(e.slot_line.begin(), e.slot_line.end(), slot_ticket));
    slot_ticket = 0;
  };
  Defer leave([&] {
    drop_turn();
    leave_slot_line();
    if (waiting) {
      --e.queued;
      --sched_.waiting;
      ++sched_.waits;
      const double waited = std::chrono::duration<double>(Steady::now() - t0).count();
      sched_.wait_seconds += waited;
      waits_.observe(waited);
    }
    cv_.notify_all();
    if (e.retired) reaper_cv_.notify_all();  // it may be dropped now
  });
  // Refused at once rather than queued past what the model takes: its
  // running slots and max_queue more (a request that waits for a load will
  // take a slot when it is done).
  auto join_queue = [&] {
    if (waiting) return;
    const int max_running = max_running_of(e);
    const int slots = max_running > 0 ? max_running : 1;
    const int running = max_running > 0 ? std::min(e.in_flight, slots) : 0;
    if (running + e.queued >= slots + options_.max_queue) {
      throw QueueFull("model '" + e.spec.name + "' has " + std::to_string(e.in_flight) + " requests running and " +
                      std::to_string(e.queued) + " waiting, the most it takes; try again shortly");
    }
    if (wait.no_wait) return;
    waiting = true;
    ++e.queued;
    ++sched_.waiting;
  };

  for (;;) {
    if (stopping_) throw NoRoom("the server is shutting down");
    if (turn_id != 0 && find_turn() == line_.end()) drop_turn();
    // A model that waits to load again with new settings (a reconfiguration)
    // takes nothing more on its old load: its running requests finish, the
    // reaper unloads it, and what came meanwhile loads it with them. Served
    // on, a model never idle would never take them.
    // Chosen to drain while it waited for new settings, it waits for them
    // still: its turn comes once the reaper has unloaded it.
    const bool reloading = e.life == Life::reloading || (e.life == Life::draining && e.next_spec);
    if (reloading) {
      leave_slot_line();
      drop_turn();
      join_queue();
      if (wait.no_wait) return false;
    } else if (admits_requests(e.life)) {
      drop_turn();
      if (!slot || max_running_of(e) == 0) return true;
      const bool first = e.slot_line.empty() || e.slot_line.front() == slot_ticket;
      if (e.in_flight < max_running_of(e) && first) {
        if (slot_ticket != 0) e.slot_line.pop_front();
        slot_ticket = 0;
        return true;
      }
      join_queue();
      if (wait.no_wait) return false;
      if (slot_ticket == 0) {
        slot_ticket = next_ticket_++;
        e.slot_line.push_back(slot_ticket);
      }
    } else if (needs_turn(e.life)) {
      // Unloaded, or loaded but chosen to make room: it needs a turn.
      if (e.life == Life::unloaded && !autoload) {
        throw NotLoaded("model '" + e.spec.name + "' is not loaded, and this server does not load models on request "
                        "(--no-autoload): load it with POST /v1/models/load");
      }
      join_queue();
      if (wait.no_wait) return false;
      leave_slot_line();
      if (turn_id == 0) {
        auto it = std::find_if(line_.begin(), line_.end(), [&](const Turn& t) { return t.entry == &e; });
        if (it == line_.end()) it = line_.insert(line_.end(), Turn{next_ticket_++, &e, 0, false});
        ++it->waiters;
        turn_id = it->id;
      }
      auto it = find_turn();
      if (!holds_room(e.life) && it == line_.begin() && !it->acting && take_turn_locked(lock, e, *it)) {
        // Loaded: the turn's other requests take their leases before
        // anyone may count the model idle.
        e.pending_admits += it->waiters - 1;
        line_.erase(it);
        turn_id = 0;
        cv_.notify_all();
        continue;
      }
    } else if (wait.no_wait) {
      join_queue();  // loading, unloading, or an unload waits for its requests
      return false;
    } else {
      join_queue();
    }
    Steady::time_point now = Steady::now();
    cv_.wait_until(lock, std::min(deadline, now + wait.poll));
    // Without the lock: the check may write to a slow client. What changed
    // meanwhile is looked at again from the top.
    bool wanted = true;
    if (wait.still_wanted) {
      lock.unlock();
      wanted = wait.still_wanted();
      lock.lock();
    }
    if (!wanted) {
      ++sched_.gone;
      throw ClientGone("the client left while its request waited for model '" + e.spec.name + "'");
    }
    now = Steady::now();
    if (now >= deadline) {
      ++sched_.timeouts;
      throw QueueTimeout("waited " + std::to_string(options_.queue_timeout.count()) + " ms (--queue-timeout) for model '" +
                         e.spec.name + "' (" + life_name(e.life) + ", " +
                         std::to_string(e.in_flight) + " running, " + std::to_string(e.queued) + " waiting)");
    }
  }
}

bool Registry::take_turn_locked(std::unique_lock<std::mutex>& lock, Entry& e, Turn& turn) {
  turn.acting = true;
  Defer done([&] { turn.acting = false; });
  const int64_t needed = estimate_for_locked(lock, e);
  if (!make_room_locked(lock, e, needed)) return false;
  load_locked(lock, e, needed);
  return true;
}

void Registry::erase_turn_locked(std::list<Turn>::iterator it) {
  const bool head = it == line_.begin();
  line_.erase(it);
  if (head) stop_draining_locked();
  cv_.notify_all();
}

void Registry::stop_draining_locked() {
  for (Entry& o : entries_) {
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
  for (Entry& o : entries_) {
    Batcher* b = o.loaded_batcher();
    if (!b || b->saved_bytes() == 0) continue;
    b->drop_saved();
    dropped = true;
  }
  if (dropped) ++sched_.cache_drops;
  return dropped;
}

bool Registry::make_room_locked(std::unique_lock<std::mutex>& lock, Entry& for_entry, int64_t needed) {
  bool dropped = false;
  for (;;) {
    std::vector<Occupant> others, bare;  // bare: without the prompt caches' saves
    std::vector<Entry*> who;
    for (Entry& o : entries_) {
      if (&o == &for_entry) continue;
      Occupant c;
      c.name = o.spec.name;
      c.reserved = o.reserved;
      c.reserved_at = o.reserved_at;
      // Its prompt cache's saves are host memory beyond its estimate.
      if (const Batcher* b = o.loaded_batcher()) {
        const auto saved = static_cast<int64_t>(b->saved_bytes());
        c.reserved += saved;
        if (saved > 0) c.reserved_at[kHostMemory] += saved;
      }
      c.counted = holds_room(o.life) && o.life != Life::unloading;
      c.pinned = o.spec.pinned;
      const bool here = may_give_room(o.life);
      c.idle = here && o.in_flight == 0 && o.pending_admits == 0;
      c.busy = here && !c.idle;
      c.draining = o.life == Life::draining;
      c.unloading = leaving(o.life);
      c.in_flight = o.in_flight;
      c.last_use = o.last_use_steady;
      Occupant b = c;
      b.reserved = o.reserved;
      b.reserved_at = o.reserved_at;
      others.push_back(std::move(c));
      bare.push_back(std::move(b));
      who.push_back(&o);
    }
    const MemoryBudget budget{options_.memory_budget, options_.memory_budget_at};
    const RoomPlan plan = plan_room(others, for_entry.spec.name, needed, for_entry.estimate_at, budget, options_.max_loaded);
    // The prompt caches' saves go before any model does: they are the
    // cheapest to lose (a later turn decodes its history again). But only
    // when losing them lets the model in: under --max-loaded, or when a model
    // must go anyway, they would go for nothing (the one evicted takes its
    // own with it, and the loop comes back here after).
    if (plan.step != RoomPlan::Step::fits && !dropped &&
        plan_room(bare, for_entry.spec.name, needed, for_entry.estimate_at, budget, options_.max_loaded).step ==
            RoomPlan::Step::fits &&
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
        unload_locked(lock, *who[plan.evict], UnloadMode::drain, Millis(0));
        continue;
      case RoomPlan::Step::wait:
        return false;
      case RoomPlan::Step::drain: {
        const Steady::time_point now = Steady::now();
        std::vector<bool> chosen(who.size(), false);
        for (size_t i : plan.drain) chosen[i] = true;
        for (size_t i = 0; i < who.size(); ++i) {
          Entry& o = *who[i];
          if (!chosen[i]) {
            if (o.life == Life::draining) o.change(o.settled(LifeEvent::resume, LifeEvent::resume_stale));
            continue;
          }
          if (o.life != Life::draining) {
            // Its turn is not over: the head waits (and looks again at its
            // next poll).
            if (now < o.loaded_at + options_.min_serve) continue;
            o.change(LifeEvent::drain);
            o.drain_since = now;
            ++sched_.drains;
            cv_.notify_all();
          }
          // A drain is bounded: past drain_timeout its requests are
          // cancelled, and stop within one decode step.
          if (now - o.drain_since >= options_.drain_timeout) {
            for (CancelToken* t : o.tokens) t->cancel(CancelReason::caller);
          }
        }
        return false;
      }
    }
  }
}

}  // namespace reclaim
