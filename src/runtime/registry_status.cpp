// What the registry tells of its models and its scheduling, each a copy
// taken under its lock.
#include "engine/batcher.h"
#include "runtime/model_entry.h"
#include "runtime/registry.h"

#include <algorithm>

namespace reclaim {

ModelStatus Registry::status_locked(const Entry& e) const {
  ModelStatus s;
  s.name = e.spec.name;
  s.path = e.spec.path;
  s.mmproj = e.spec.settings.mmproj.value_or("");
  s.aliases = e.spec.settings.aliases;
  s.reload_pending = e.next_spec.has_value();
  s.removing = e.retired;
  s.state = e.state();
  s.life = e.life;
  s.pinned = e.spec.pinned;
  s.in_flight = e.in_flight;
  s.queued = e.queued;
  s.draining = e.life == Life::draining;
  s.line_position = line_.position_of(e);
  s.load_progress = e.progress;
  s.estimate = e.estimate;
  s.estimate_by_device = e.estimate_at;
  if (e.model && e.state() == ModelState::loaded) {
    s.bytes_by_device = ledger_places_under(e.model->scope().path());
    s.loaded_bytes = sum(s.bytes_by_device);
  }
  s.loads = e.loads;
  s.unloads = e.unloads;
  s.last_load_ms = e.last_load_ms;
  if (e.last_room) s.last_room = room_how_name(*e.last_room);
  s.last_room_wait_s = e.last_room_wait_s;
  s.last_unload_ms = e.last_unload_ms;
  s.last_use = e.last_use;
  if (e.state() == ModelState::loaded && !e.spec.pinned) {
    const auto now = std::chrono::system_clock::now();
    if (e.in_flight == 0 && e.expires != Steady::time_point::max()) {
      s.expires_at = now + std::chrono::duration_cast<std::chrono::system_clock::duration>(e.expires - Steady::now());
    } else if (e.in_flight > 0 && catalogue_.keep_alive_of(e).count() >= 0) {
      s.expires_at = now + catalogue_.keep_alive_of(e);
    }
  }
  s.last_error = e.last_error;
  if (Batcher* b = e.loaded_batcher()) {
    s.sequences = b->n_seq();
    s.sequences_in_use = b->in_use();
    s.sequences_active = static_cast<int>(std::count(s.sequences_in_use.begin(), s.sequences_in_use.end(), true));
    s.decode_steps = b->steps();
    s.decoded_tokens = b->tokens();
    s.cached_tokens = b->cached_tokens();
    s.saved_bytes = b->saved_bytes();
    s.saved = b->saved_count();
  }
  return s;
}

std::vector<ModelStatus> Registry::list() const {
  std::lock_guard lock(mu_);
  std::vector<ModelStatus> out;
  for (const Entry& e : catalogue_.entries()) out.push_back(status_locked(e));
  return out;
}

std::vector<std::string> Registry::names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const Entry& e : catalogue_.entries()) {
    if (!e.retired) out.push_back(e.spec.name);
  }
  return out;
}

SchedulerStats Registry::scheduler() const {
  std::lock_guard lock(mu_);
  SchedulerStats s = sched_;
  for (const Entry& e : catalogue_.entries()) {
    if (const Batcher* b = e.loaded_batcher()) {
      s.decode_steps += b->steps();
      s.busy_in_steps += b->busy_in_steps();
      s.guesses += b->guesses();
      s.guessed += b->guessed();
      s.guesses_kept += b->guesses_kept();
    }
  }
  s.line = line_.names();
  s.wait_histogram = waits_.counts();
  s.load_histogram = loads_.counts();
  s.unload_histogram = unloads_.counts();
  return s;
}

ModelSettings Registry::settings(const std::string& name) const {
  check_name(name);
  std::lock_guard lock(mu_);
  return catalogue_.find(name).spec.settings;
}

BatcherOptions Registry::batching(const std::string& name) const {
  check_name(name);
  std::lock_guard lock(mu_);
  return catalogue_.batching_of(catalogue_.find(name));
}

ModelStatus Registry::status(const std::string& name) const {
  check_name(name);
  std::lock_guard lock(mu_);
  return status_locked(catalogue_.find(name));
}

bool Registry::wait_for_state(const std::string& name, ModelState state, Millis timeout) const {
  std::unique_lock lock(mu_);
  const Entry& e = catalogue_.find(name);
  const Watch watch(e, reaper_cv_);  // a reconfiguration may retire it meanwhile
  return cv_.wait_for(lock, timeout, [&] { return e.state() == state; });
}

Places Registry::accounted_by_place() const {
  std::lock_guard lock(mu_);
  return reserved_by_place(catalogue_.entries());
}

int64_t Registry::accounted() const {
  std::lock_guard lock(mu_);
  return reserved_total(catalogue_.entries());
}

}  // namespace reclaim
