#include "runtime/registry.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>

#include "core/file_identity.h"
#include "core/ledger.h"
#include "core/size.h"
#include "engine/batcher.h"
#include "engine/device_life.h"
#include "engine/embed.h"
#include "engine/model_info.h"
#include "runtime/model_entry.h"
#include "runtime/unlocked.h"

namespace reclaim {

namespace {

double ms_since(Steady::time_point t) { return std::chrono::duration<double, std::milli>(Steady::now() - t).count(); }

}  // namespace

Registry::Registry(RegistryOptions options, std::vector<ModelSpec> models)
    : options_(std::move(options)), scope_("registry"), catalogue_(options_, std::move(models)) {
  reaper_.start(scope_, "keep-alive reaper", [this] { reaper(); }, [this] { wake_reaper(); });
  note_devices_idle();  // nothing is loaded yet: the reference
}

Registry::~Registry() {
  // Before the unloads: the reaper would start its own.
  reaper_.stop();
  unload_all(UnloadMode::cancel, Millis(0));
  scope_.close();
}

void Registry::stop_admitting() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
}

void Registry::wake_reaper() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  cv_.notify_all();
}

Lease Registry::acquire(const std::string& name, std::optional<Millis> keep_alive, const Wait& wait) {
  check_name(name);
  std::unique_lock lock(mu_);
  Entry& e = catalogue_.find(name);
  if (!admit_locked(lock, e, wait, {.slot = true, .autoload = options_.autoload})) return Lease();
  // What may throw first: a lease with its registry set gives itself back
  // (under this lock) when it goes.
  auto token = std::make_unique<CancelToken>();
  e.tokens.push_back(token.get());
  Lease l;
  l.entry_ = &e;
  l.model_ = e.model.get();
  l.token_ = std::move(token);
  l.keep_alive_ = keep_alive;
  l.registry_ = this;
  ++e.in_flight;
  e.expires = Steady::time_point::max();
  return l;
}

void Registry::load(const std::string& name, bool pin, const Wait& wait) {
  check_name(name);
  std::unique_lock lock(mu_);
  Entry& e = catalogue_.find(name);
  if (pin) {
    e.spec.pinned = true;
    if (e.next_spec) e.next_spec->pinned = true;  // and after a pending reload
  }
  Wait w = wait;
  w.no_wait = false;
  admit_locked(lock, e, w, {.slot = false, .autoload = true});
  if (e.in_flight == 0) set_expiry_locked(e);
}

void Registry::set_expiry_locked(Entry& e, std::optional<Millis> keep_alive) {
  const Millis ka = keep_alive.value_or(catalogue_.keep_alive_of(e));
  e.expires = e.spec.pinned || ka.count() < 0 ? Steady::time_point::max() : Steady::now() + ka;
  reaper_cv_.notify_all();
}

void Registry::set_pinned(const std::string& name, bool pinned) {
  check_name(name);
  std::lock_guard lock(mu_);
  Entry& e = catalogue_.find(name);
  e.spec.pinned = pinned;
  if (e.next_spec) e.next_spec->pinned = pinned;
  if (e.in_flight == 0 && e.model) set_expiry_locked(e);
  reaper_cv_.notify_all();
}

int64_t Registry::estimate_for_locked(std::unique_lock<std::mutex>& lock, Entry& e) {
  // Made without the lock: a reconfiguration meanwhile makes it again, for
  // the spec the load will take.
  for (;;) {
    if (std::optional<int64_t> estimate = estimate_once_locked(lock, e)) return *estimate;
  }
}

std::optional<int64_t> Registry::estimate_once_locked(std::unique_lock<std::mutex>& lock, Entry& e) {
  const uint64_t generation = e.spec_generation;
  ModelLoad load = model_load(e);
  const VetRequest vet = catalogue_.vet_request(e);
  const std::optional<VetRequest> draft = catalogue_.draft_vet_request(e);
  const llama_context_params& cp = vet.context;
  // The estimate loads the file's metadata and vocab and plans a context,
  // about as long as the load itself (400 ms of a 1.1 s swap to a 151,936-
  // token model, bench/swap); the options never change, so a reload of the
  // same file takes the last one.
  std::string identity;
  {
    Unlocked unlocked(lock);
    identity = file_identity(load.path) + (draft ? "|draft " + file_identity(draft->path) : "") +
               (load.mmproj.empty() ? "" : "|mmproj " + file_identity(load.mmproj));
  }
  if (generation != e.spec_generation) return std::nullopt;
  if (!identity.empty() && identity == e.estimated_file && e.estimate > 0) return e.estimate;
  int64_t estimate = 0, model_estimate = 0;
  Places estimate_at;
  try {
    Unlocked unlocked(lock);
    // A file not yet vetted is read first in child processes, which may
    // die of it; their estimate is the one this process would make. This
    // returns once a child has loaded the file; load_locked waits for the
    // rest of the verdict before it makes a context.
    // A draft model is vetted and estimated as the model is: its weights and
    // its one context are the model's too.
    const auto add = [&](const MemoryEstimate& m) {
      model_estimate += m.model_host + m.model_device;
      estimate += m.model_host + m.model_device + m.model_overhead + m.per_context_host() + m.context_device +
                  m.compute_device;  // the batch's one context
      estimate_at[kHostMemory] += m.model_host + m.model_overhead + m.per_context_host();
      for (const auto& [device, bytes] : m.device_by_name) estimate_at[device] += bytes;
    };
    add(options_.vetter ? options_.vetter->vet_to_load(vet).estimate : estimate_memory(load, cp));
    if (draft) {
      ModelLoad draft_load = load;
      draft_load.path = draft->path;
      draft_load.mmproj.clear();  // the model's, counted with it
      add(options_.vetter ? options_.vetter->vet_to_load(*draft).estimate : estimate_memory(draft_load, draft->context));
    }
  } catch (const std::exception& ex) {
    if (generation != e.spec_generation) return std::nullopt;  // of a file the model no longer names
    e.last_error = ex.what();
    throw;
  }
  if (generation != e.spec_generation) return std::nullopt;
  e.estimate = estimate;
  e.estimate_at = std::move(estimate_at);
  e.model_estimate = model_estimate;
  e.estimated_file = identity;
  return estimate;
}

ModelLoad Registry::model_load(Entry& e) {
  ModelLoad load;
  load.path = e.spec.path;
  load.name = e.spec.name;
  load.mode = options_.load_mode;
  load.n_gpu_layers = e.spec.settings.n_gpu_layers.value_or(options_.n_gpu_layers);
  load.n_threads = e.spec.settings.n_threads.value_or(options_.n_threads);
  load.mmproj = e.spec.settings.mmproj.value_or("");
  // Checked where it was read (--config, --pooling): a name here is one of llama.cpp's.
  if (const std::string pooling = e.spec.settings.pooling.value_or(options_.pooling); !pooling.empty()) {
    load.pooling = pooling_from_name(pooling);
  }
  load.progress = [this, &e](float p) {
    e.progress = p;
    std::lock_guard lock(mu_);  // the flag is read under the registry's lock
    return !stopping_;
  };
  return load;
}

void Registry::load_locked(std::unique_lock<std::mutex>& lock, Entry& e, int64_t estimate) {
  // What may throw comes before the model is marked loading: a mark that
  // nothing clears would hold every unload of it for ever.
  const ModelLoad load = model_load(e);
  BatcherOptions batching = catalogue_.batching_of(e);
  batching.cache_ram = static_cast<uint64_t>(prompt_cache_cap(catalogue_.entries(), options_, 1));
  std::optional<VetRequest> vet, draft_vet;
  if (options_.vetter) {
    vet = catalogue_.vet_request(e);
    draft_vet = catalogue_.draft_vet_request(e);
  }
  Places reserved_at = e.estimate_at;
  const int64_t model_estimate = e.model_estimate;
  e.change(LifeEvent::load);
  e.progress = 0;
  e.last_error.clear();
  e.reserved = estimate;
  e.reserved_at = std::move(reserved_at);
  cv_.notify_all();
  const Steady::time_point t0 = Steady::now();
  std::unique_ptr<Model> model;
  try {
    Unlocked unlocked(lock);
    model = std::make_unique<Model>(load, &scope_);
    // The file loads (a child loaded it first); whether it decodes, a child
    // may still be finding out while this process loaded it.
    if (vet) (void)options_.vetter->vet(*vet);
    if (draft_vet) (void)options_.vetter->vet(*draft_vet);
    model->start_batcher(batching);
    if (options_.log || log_topic_enabled("models")) {
      // The estimate is checked against what the load took: the ledger has
      // the weights now; contexts are added as requests come.
      std::fprintf(stderr, "reclaim: loaded '%s' in %.0f ms: estimate %s (model %s), on the ledger %s\n",
                   load.name.c_str(), ms_since(t0), format_bytes(estimate).c_str(), format_bytes(model_estimate).c_str(),
                   format_bytes(sum(ledger_places_under(model->scope().path()))).c_str());
    }
  } catch (const std::exception& ex) {
    if (model) {
      Unlocked unlocked(lock);  // a model that loaded and then failed its vetting is freed without the lock
      model.reset();
    }
    e.change(LifeEvent::load_failed);
    e.reserved = 0;
    e.reserved_at.clear();
    e.last_error = ex.what();
    cv_.notify_all();
    throw;
  }
  const double ms = ms_since(t0);
  e.model = std::move(model);
  e.change(e.settled(LifeEvent::loaded, LifeEvent::loaded_stale));
  e.progress = 1;
  ++e.loads;
  e.last_load_ms = ms;
  loads_.observe(ms / 1000);
  e.loaded_at = Steady::now();
  e.last_use = std::chrono::system_clock::now();
  e.last_use_steady = Steady::now();
  set_cache_ram_locked();
  cv_.notify_all();
}

void Registry::set_cache_ram_locked() {
  const int64_t cap = prompt_cache_cap(catalogue_.entries(), options_, 0);
  for (Entry& o : catalogue_.entries()) {
    if (Batcher* b = o.loaded_batcher()) b->set_cache_ram(static_cast<uint64_t>(cap));
  }
}

void Registry::vet_in_background() {
  if (!options_.vetter) return;
  std::vector<VetRequest> qs;
  {
    std::lock_guard lock(mu_);
    for (const Entry& e : catalogue_.entries()) qs.push_back(catalogue_.vet_request(e));
  }
  options_.vetter->vet_in_background(std::move(qs));
}

void Registry::unload(const std::string& name, UnloadMode mode, Millis timeout) {
  check_name(name);
  std::unique_lock lock(mu_);
  unload_locked(lock, catalogue_.find(name), mode, timeout);
}

void Registry::unload_all(UnloadMode mode, Millis timeout) {
  std::unique_lock lock(mu_);
  for (Entry& e : catalogue_.entries()) unload_locked(lock, e, mode, timeout);
}

void Registry::unload_locked(std::unique_lock<std::mutex>& lock, Entry& e, UnloadMode mode, Millis timeout) {
  const Watch watch(e, reaper_cv_);  // it waits on e: a reconfiguration may retire it meanwhile
  cv_.wait(lock, [&] { return e.life != Life::loading; });
  if (!holds_room(e.life)) return;
  if (leaving(e.life)) {
    cv_.wait(lock, [&] { return !leaving(e.life); });
    return;
  }
  e.change(LifeEvent::close);
  cv_.notify_all();
  auto cancel_all = [&] {
    for (CancelToken* t : e.tokens) t->cancel(CancelReason::caller);
  };
  if (mode == UnloadMode::cancel) {
    cancel_all();
  } else if (!cv_.wait_for(lock, timeout, [&] { return e.in_flight == 0; })) {
    cancel_all();
  }
  // Cancelled requests stop within one decode step and drop their leases.
  cv_.wait(lock, [&] { return e.in_flight == 0; });
  finish_unload_locked(lock, e);
}

void Registry::finish_unload_locked(std::unique_lock<std::mutex>& lock, Entry& e) {
  e.change(LifeEvent::idle);
  std::unique_ptr<Model> model = std::move(e.model);
  if (const Batcher* b = model ? model->batcher() : nullptr) {  // its decodes stay counted
    sched_.decode_steps += b->steps();
    sched_.busy_in_steps += b->busy_in_steps();
    sched_.guesses += b->guesses();
    sched_.guessed += b->guessed();
    sched_.guesses_kept += b->guesses_kept();
  }
  cv_.notify_all();
  const std::string name = e.spec.name;  // a reconfiguration may change the spec meanwhile
  const Steady::time_point t0 = Steady::now();
  {
    Unlocked unlocked(lock);
    model.reset();
  }
  const double ms = ms_since(t0);
  if (options_.log || log_topic_enabled("models")) std::fprintf(stderr, "reclaim: unloaded '%s' in %.0f ms\n", name.c_str(), ms);
  e.change(LifeEvent::freed);
  if (e.next_spec) {
    // Reconfigured while loaded: the next load takes the new settings.
    e.spec = std::move(*e.next_spec);
    e.next_spec.reset();
    e.estimated_file.clear();
    ++e.spec_generation;
  }
  e.reserved = 0;
  e.reserved_at.clear();
  e.progress = 0;
  e.expires = Steady::time_point::max();
  ++e.unloads;
  e.last_unload_ms = ms;
  unloads_.observe(ms / 1000);
  // The last model gone: what the heap still holds beyond the start is the
  // accelerator's (its pipelines), for the ledger's device-state entry, and
  // the device's idle time starts.
  const bool none_loaded = std::all_of(catalogue_.entries().begin(), catalogue_.entries().end(), [](const Entry& o) {
    return !holds_room(o.life);
  });
  if (none_loaded) {
    note_devices_idle();
    ++devices_idle_events_;
    reaper_cv_.notify_all();
  }
  set_cache_ram_locked();
  cv_.notify_all();
}

void Registry::release_lease(Lease& l) noexcept {
  std::lock_guard lock(mu_);
  Entry& e = *l.entry_;
  e.tokens.erase(std::remove(e.tokens.begin(), e.tokens.end(), l.token_.get()), e.tokens.end());
  --e.in_flight;
  e.last_use = std::chrono::system_clock::now();
  e.last_use_steady = Steady::now();
  if (e.in_flight == 0) set_expiry_locked(e, l.keep_alive_);
  cv_.notify_all();
}

void Registry::reaper() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // A removed model's last waiter may have gone without a load.
    catalogue_.sweep(line_);
    const Steady::time_point now = Steady::now();
    Steady::time_point next = Steady::time_point::max();
    Entry* expired = nullptr;
    for (Entry& e : catalogue_.entries()) {
      if (!may_give_room(e.life) || e.in_flight > 0) continue;
      // Reconfigured: unloaded as soon as it is idle, pinned or not.
      if (e.next_spec || e.retired) {
        expired = &e;
        break;
      }
      if (e.spec.pinned) continue;
      if (e.expires <= now) {
        expired = &e;
        break;
      }
      next = std::min(next, e.expires);
    }
    if (expired) {
      const bool to_reload = expired->next_spec.has_value() && !expired->retired;
      unload_locked(lock, *expired, UnloadMode::drain, Millis(0));
      if (to_reload && expired->life == Life::unloaded) expired->change(LifeEvent::mark_reload);
      catalogue_.sweep(line_);
      continue;
    }
    // Outside the lock: a release takes a driver's time, and a load that
    // holds the device meanwhile brings it back.
    const uint64_t idle_events = devices_idle_events_;
    {
      Unlocked unlocked(lock);
      next = std::min(next, release_idle_devices(options_.device_idle));
    }
    if (stopping_) break;
    if (idle_events != devices_idle_events_) continue;  // the device went idle meanwhile: ask again
    if (next == Steady::time_point::max()) {
      reaper_cv_.wait(lock);
    } else {
      reaper_cv_.wait_until(lock, next);
    }
  }
}

Registry::Reconfigured Registry::reconfigure(std::vector<ModelSpec> models) {
  std::unique_lock lock(mu_);
  const Reconfigured r = catalogue_.reconfigure(std::move(models));
  catalogue_.sweep(line_);
  reaper_cv_.notify_all();
  cv_.notify_all();
  return r;
}

Lease::Lease(Lease&& o) noexcept
    : registry_(std::exchange(o.registry_, nullptr)),
      entry_(std::exchange(o.entry_, nullptr)),
      model_(std::exchange(o.model_, nullptr)),
      token_(std::move(o.token_)),
      keep_alive_(o.keep_alive_) {}

Lease& Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    registry_ = std::exchange(o.registry_, nullptr);
    entry_ = std::exchange(o.entry_, nullptr);
    model_ = std::exchange(o.model_, nullptr);
    token_ = std::move(o.token_);
    keep_alive_ = o.keep_alive_;
  }
  return *this;
}

Lease::~Lease() { release(); }

void Lease::release() {
  if (!registry_) return;
  registry_->release_lease(*this);
  registry_ = nullptr;
  entry_ = nullptr;
  model_ = nullptr;
  token_.reset();
}

const std::string& Lease::name() const { return entry_->spec.name; }

}  // namespace reclaim
