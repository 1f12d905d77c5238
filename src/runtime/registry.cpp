#include "runtime/registry.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string_view>
#include <deque>
#include <utility>

#include "core/file_identity.h"
#include "core/ledger.h"
#include "core/size.h"
#include "engine/batcher.h"
#include "engine/llama_runtime.h"
#include "engine/model_info.h"
#include "runtime/registry_entry.h"

namespace reclaim {

namespace {

double ms_since(Steady::time_point t) { return std::chrono::duration<double, std::milli>(Steady::now() - t).count(); }

// The bytes on the ledger under a scope path, by place.
Places ledger_places_under(const std::string& path) {
  Places out{{kHostMemory, 0}};
  for (const LedgerEntry& e : Ledger::process().entries()) {
    if (e.owner != path && e.owner.rfind(path + "/", 0) != 0) continue;
    out[kHostMemory] += static_cast<int64_t>(e.bytes);
    for (const DeviceBytes& d : e.devices) out[d.device] += static_cast<int64_t>(d.bytes);
  }
  return out;
}

int64_t sum(const Places& p) {
  int64_t n = 0;
  for (const auto& [place, bytes] : p) n += bytes;
  return n;
}

}  // namespace

void Registry::check_name(const std::string& name) {
  // Names as users write them: Ollama's tags (qwen2.5:7b) and hub ids
  // (org/model:Q4_K_M). A name is only ever looked up among the configured
  // models, never opened; still, nothing that reads as a path is a name, so
  // that no mistake elsewhere could make one of it.
  if (name.empty()) throw BadModelName("the model name is empty");
  if (name.size() > 256) throw BadModelName("the model name is longer than 256 characters");
  // File names from --models-dir are names too ("llama-3 (q4).gguf"), so
  // any printable character is; what is refused reads as a path.
  const bool printable = std::none_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f || c == '\\';
  });
  bool dot_segment = false;
  for (size_t at = 0; at <= name.size();) {
    const size_t end = std::min(name.find('/', at), name.size());
    const std::string_view seg(name.data() + at, end - at);
    dot_segment = dot_segment || seg.empty() || seg == "." || seg == "..";
    at = end + 1;
  }
  if (!printable || dot_segment) {
    throw BadModelName("model name '" + name +
                       "' is not a name: no control characters or backslashes, and no empty, '.' or '..' part "
                       "between slashes; use a name from /v1/models");
  }
}

Registry::Registry(RegistryOptions options, std::vector<ModelSpec> models)
    : options_(std::move(options)), scope_("registry") {
  // The batch's context parameters refuse a bad --parallel or --batch: now,
  // rather than at the first load.
  (void)context_params(Entry(ModelSpec{}));
  validate(models);
  for (ModelSpec& m : models) entries_.emplace_back(std::move(m));
  reaper_.start(scope_, "keep-alive reaper", [this] { reaper(); }, [this] { wake_reaper(); });
  note_runtime_idle();  // nothing is loaded yet: the reference
}

Registry::~Registry() {
  // Before the unloads: the reaper would start its own.
  reaper_.stop();
  unload_all(UnloadMode::cancel, Millis(0));
  scope_.close();
}

void Registry::wake_reaper() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  cv_.notify_all();
}

Registry::Entry& Registry::find_locked(const std::string& name) {
  for (Entry& e : entries_) {
    if (e.spec.name == name && !e.retired) return e;
  }
  for (Entry& e : entries_) {
    const std::vector<std::string>& a = e.spec.settings.aliases;
    if (!e.retired && std::find(a.begin(), a.end(), name) != a.end()) return e;
  }
  throw UnknownModel("model '" + name + "' is not one this server has (see /v1/models)");
}

const Registry::Entry& Registry::find_locked(const std::string& name) const {
  return const_cast<Registry*>(this)->find_locked(name);
}

Lease Registry::acquire(const std::string& name, std::optional<Millis> keep_alive, const Wait& wait) {
  check_name(name);
  std::unique_lock lock(mu_);
  Entry& e = find_locked(name);
  if (!admit_locked(lock, e, wait, {.slot = true, .autoload = options_.autoload})) return Lease();
  Lease l;
  l.registry_ = this;
  l.entry_ = &e;
  l.model_ = e.model.get();
  l.token_ = std::make_unique<CancelToken>();
  l.keep_alive_ = keep_alive;
  e.tokens.push_back(l.token_.get());
  ++e.in_flight;
  e.expires = Steady::time_point::max();
  return l;
}

void Registry::load(const std::string& name, bool pin, const Wait& wait) {
  check_name(name);
  std::unique_lock lock(mu_);
  Entry& e = find_locked(name);
  if (pin) {
    e.spec.pinned = true;
    if (e.next_spec) e.next_spec->pinned = true;  // and after a pending reload
  }
  Wait w = wait;
  w.no_wait = false;
  admit_locked(lock, e, w, {.slot = false, .autoload = true});
  if (e.in_flight == 0) {
    const Millis ka = keep_alive_of(e);
    e.expires = e.spec.pinned || ka.count() < 0 ? Steady::time_point::max() : Steady::now() + ka;
    reaper_cv_.notify_all();
  }
}

void Registry::set_pinned(const std::string& name, bool pinned) {
  check_name(name);
  std::lock_guard lock(mu_);
  Entry& e = find_locked(name);
  e.spec.pinned = pinned;
  if (e.next_spec) e.next_spec->pinned = pinned;
  if (e.in_flight == 0 && e.model) {
    const Millis ka = keep_alive_of(e);
    e.expires = pinned || ka.count() < 0 ? Steady::time_point::max() : Steady::now() + ka;
  }
  reaper_cv_.notify_all();
}

int64_t Registry::estimate_for_locked(std::unique_lock<std::mutex>& lock, Entry& e) {
  ModelLoad load = model_load(e);
  const VetRequest vet = vet_request(e);
  const llama_context_params& cp = vet.context;
  lock.unlock();
  // The estimate loads the file's metadata and vocab and plans a context,
  // about as long as the load itself (400 ms of a 1.1 s swap to a 151,936-
  // token model, bench/swap); the options never change, so a reload of the
  // same file takes the last one.
  const std::string identity = file_identity(load.path);
  lock.lock();
  if (!identity.empty() && identity == e.estimated_file && e.estimate > 0) return e.estimate;
  lock.unlock();
  int64_t estimate = 0, model_estimate = 0;
  Places estimate_at;
  try {
    // A file not yet vetted is read first in child processes, which may
    // die of it; their estimate is the one this process would make. This
    // returns once a child has loaded the file; load_locked waits for the
    // rest of the verdict before it makes a context.
    MemoryEstimate m = options_.vetter ? options_.vetter->vet_to_load(vet).estimate : estimate_memory(load, cp);
    model_estimate = m.model_host + m.model_device;
    estimate = m.model_host + m.model_device + m.model_overhead +
               m.per_context_host() + m.context_device + m.compute_device;  // the batch's one context
    estimate_at[kHostMemory] = m.model_host + m.model_overhead + m.per_context_host();
    for (const auto& [device, bytes] : m.device_by_name) estimate_at[device] = bytes;
  } catch (const std::exception& ex) {
    lock.lock();
    e.last_error = ex.what();
    throw;
  }
  lock.lock();
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
  load.progress = [this, &e](float p) {
    e.progress = p;
    std::lock_guard lock(mu_);  // the flag is read under the registry's lock
    return !stopping_;
  };
  return load;
}

void Registry::load_locked(std::unique_lock<std::mutex>& lock, Entry& e, int64_t estimate) {
  e.change(LifeEvent::load);
  e.progress = 0;
  e.last_error.clear();
  e.reserved = estimate;
  e.reserved_at = e.estimate_at;
  cv_.notify_all();
  const ModelLoad load = model_load(e);
  BatcherOptions batching = batching_of(e);
  batching.cache_ram = static_cast<uint64_t>(cache_ram_locked(1));
  std::optional<VetRequest> vet;
  if (options_.vetter) vet = vet_request(e);
  lock.unlock();
  const Steady::time_point t0 = Steady::now();
  std::unique_ptr<Model> model;
  try {
    model = std::make_unique<Model>(load, &scope_);
    // The file loads (a child loaded it first); whether it decodes, a child
    // may still be finding out while this process loaded it.
    if (vet) (void)options_.vetter->vet(*vet);
    model->start_batcher(batching);
  } catch (const std::exception& ex) {
    lock.lock();
    e.change(LifeEvent::load_failed);
    e.reserved = 0;
    e.reserved_at.clear();
    e.last_error = ex.what();
    cv_.notify_all();
    throw;
  }
  const double ms = ms_since(t0);
  const int64_t actual = sum(ledger_places_under(model->scope().path()));
  if (options_.log || log_topic_enabled("models")) {
    // The estimate is checked against what the load took: the ledger has the
    // weights now; contexts are added as requests come.
    std::fprintf(stderr, "reclaim: loaded '%s' in %.0f ms: estimate %s (model %s), on the ledger %s\n",
                 e.spec.name.c_str(), ms, format_bytes(estimate).c_str(), format_bytes(e.model_estimate).c_str(),
                 format_bytes(actual).c_str());
  }
  lock.lock();
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

int64_t Registry::cache_ram_locked(int more) const {
  if (options_.cache_ram <= 0) return 0;
  // Every reservation: a model's holds until it is unloaded.
  Places reserved = reserved_locked();
  const int loaded = more + static_cast<int>(std::count_if(entries_.begin(), entries_.end(), [](const Entry& o) {
    return o.state() == ModelState::loaded;
  }));
  // What the budget has left for host memory, shared by the loaded models.
  int64_t left = INT64_MAX;
  if (options_.memory_budget > 0) left = options_.memory_budget - sum(reserved);
  if (auto it = options_.memory_budget_at.find(kHostMemory); it != options_.memory_budget_at.end()) {
    left = std::min(left, it->second - reserved[kHostMemory]);
  }
  if (left == INT64_MAX) return options_.cache_ram;
  return std::clamp<int64_t>(left / std::max(1, loaded), 0, options_.cache_ram);
}

void Registry::set_cache_ram_locked() {
  const int64_t cap = cache_ram_locked(0);
  for (Entry& o : entries_) {
    if (Batcher* b = o.loaded_batcher()) b->set_cache_ram(static_cast<uint64_t>(cap));
  }
}

BatcherOptions Registry::batching_of(const Entry& e) const {
  const ModelSettings& s = e.spec.settings;
  BatcherOptions b{s.parallel.value_or(options_.parallel), options_.session};
  if (s.n_ctx) b.session.n_ctx = *s.n_ctx;
  if (s.n_threads) b.session.n_threads = *s.n_threads;
  return b;
}

Millis Registry::keep_alive_of(const Entry& e) const { return e.spec.settings.keep_alive.value_or(options_.keep_alive); }

int Registry::max_running_of(const Entry& e) const {
  // A model of its own parallelism runs as many requests as it has
  // sequences, as serve's --parallel does for all.
  return e.spec.settings.parallel ? *e.spec.settings.parallel : options_.max_running;
}

llama_context_params Registry::context_params(const Entry& e) const {
  const int32_t n = e.spec.settings.n_threads.value_or(options_.n_threads);
  return batch_context_params(batching_of(e), 0, n > 0 ? n : default_threads());
}

VetRequest Registry::vet_request(const Entry& e) const {
  VetRequest q;
  q.path = e.spec.path;
  q.n_gpu_layers = e.spec.settings.n_gpu_layers.value_or(options_.n_gpu_layers);
  q.context = context_params(e);
  return q;
}

void Registry::vet_in_background() {
  if (!options_.vetter) return;
  std::vector<VetRequest> qs;
  {
    std::lock_guard lock(mu_);
    for (const Entry& e : entries_) qs.push_back(vet_request(e));
  }
  options_.vetter->vet_in_background(std::move(qs));
}

void Registry::unload(const std::string& name, UnloadMode mode, Millis timeout) {
  check_name(name);
  std::unique_lock lock(mu_);
  unload_locked(lock, find_locked(name), mode, timeout);
}

void Registry::unload_all(UnloadMode mode, Millis timeout) {
  std::unique_lock lock(mu_);
  for (Entry& e : entries_) unload_locked(lock, e, mode, timeout);
}

void Registry::unload_locked(std::unique_lock<std::mutex>& lock, Entry& e, UnloadMode mode, Millis timeout) {
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
  cv_.notify_all();
  lock.unlock();
  const Steady::time_point t0 = Steady::now();
  model.reset();
  const double ms = ms_since(t0);
  if (options_.log || log_topic_enabled("models")) {
    std::fprintf(stderr, "reclaim: unloaded '%s' in %.0f ms\n", e.spec.name.c_str(), ms);
  }
  lock.lock();
  e.change(LifeEvent::freed);
  if (e.next_spec) {
    // Reconfigured while loaded: the next load takes the new settings.
    e.spec = std::move(*e.next_spec);
    e.next_spec.reset();
    e.estimated_file.clear();
  }
  e.reserved = 0;
  e.reserved_at.clear();
  e.progress = 0;
  e.expires = Steady::time_point::max();
  ++e.unloads;
  e.last_unload_ms = ms;
  unloads_.observe(ms / 1000);
  // The last model gone: what the heap still holds beyond the start is the
  // accelerator's (its pipelines), for the ledger's device-state entry.
  const bool none_loaded = std::all_of(entries_.begin(), entries_.end(), [](const Entry& o) {
    return !holds_room(o.life);
  });
  if (none_loaded) note_runtime_idle();
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
  if (e.in_flight == 0) {
    const Millis ka = l.keep_alive_.value_or(keep_alive_of(e));
    e.expires = e.spec.pinned || ka.count() < 0 ? Steady::time_point::max() : Steady::now() + ka;
    reaper_cv_.notify_all();
  }
  cv_.notify_all();
}

void Registry::reaper() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // A removed model's last waiter may have gone without a load.
    sweep_locked();
    const Steady::time_point now = Steady::now();
    Steady::time_point next = Steady::time_point::max();
    Entry* expired = nullptr;
    for (Entry& e : entries_) {
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
      sweep_locked();
      continue;
    }
    if (next == Steady::time_point::max()) {
      reaper_cv_.wait(lock);
    } else {
      reaper_cv_.wait_until(lock, next);
    }
  }
}

ModelStatus Registry::status_locked(const Entry& e) const {
  ModelStatus s;
  s.name = e.spec.name;
  s.path = e.spec.path;
  s.aliases = e.spec.settings.aliases;
  s.reload_pending = e.next_spec.has_value();
  s.removing = e.retired;
  s.state = e.state();
  s.life = e.life;
  s.pinned = e.spec.pinned;
  s.in_flight = e.in_flight;
  s.queued = e.queued;
  s.draining = e.life == Life::draining;
  int place = 0;
  for (const Turn& t : line_) {
    ++place;
    if (t.entry == &e) s.line_position = place;
  }
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
  s.last_unload_ms = e.last_unload_ms;
  s.last_use = e.last_use;
  if (e.state() == ModelState::loaded && !e.spec.pinned) {
    const auto now = std::chrono::system_clock::now();
    if (e.in_flight == 0 && e.expires != Steady::time_point::max()) {
      s.expires_at = now + std::chrono::duration_cast<std::chrono::system_clock::duration>(e.expires - Steady::now());
    } else if (e.in_flight > 0 && keep_alive_of(e).count() >= 0) {
      s.expires_at = now + keep_alive_of(e);
    }
  }
  s.last_error = e.last_error;
  if (Batcher* b = e.loaded_batcher()) {
    s.sequences = b->n_seq();
    s.sequences_active = static_cast<int>(b->active());
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
  for (const Entry& e : entries_) out.push_back(status_locked(e));
  return out;
}

SchedulerStats Registry::scheduler() const {
  std::lock_guard lock(mu_);
  SchedulerStats s = sched_;
  for (const Turn& t : line_) s.line.push_back(t.entry->spec.name);
  s.wait_histogram = waits_.counts();
  s.load_histogram = loads_.counts();
  s.unload_histogram = unloads_.counts();
  return s;
}

ModelSettings Registry::settings(const std::string& name) const {
  check_name(name);
  std::lock_guard lock(mu_);
  return find_locked(name).spec.settings;
}

ModelStatus Registry::status(const std::string& name) const {
  check_name(name);
  std::lock_guard lock(mu_);
  return status_locked(find_locked(name));
}

bool Registry::wait_for_state(const std::string& name, ModelState state, Millis timeout) const {
  std::unique_lock lock(mu_);
  const Entry& e = find_locked(name);
  return cv_.wait_for(lock, timeout, [&] { return e.state() == state; });
}

Places Registry::accounted_by_place() const {
  std::lock_guard lock(mu_);
  return reserved_locked();
}

Places Registry::reserved_locked() const {
  Places sum;
  for (const Entry& e : entries_) {
    for (const auto& [place, bytes] : e.reserved_at) sum[place] += bytes;
  }
  return sum;
}

int64_t Registry::accounted() const {
  std::lock_guard lock(mu_);
  int64_t sum = 0;
  for (const Entry& e : entries_) sum += e.reserved;
  return sum;
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
