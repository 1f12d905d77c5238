#include "engine/device_life.h"

#include <ggml-backend.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "engine/devices.h"

namespace reclaim {

namespace {

using Steady = std::chrono::steady_clock;

struct LifeState {
  Scope* scope = nullptr;  // Runtime's; null before start-up and after it ends
  bool present = false;
  bool releasable = false;
  bool up = false;
  int holds = 0;
  Steady::time_point idle_since;
  CleanupId id = 0;
  bool release_refused = false;  // set by the entry's release
  uint64_t releases = 0, bring_ups = 0;
  double last_release_ms = 0, last_bring_up_ms = 0;
  int64_t at_start = 0;      // heap the device's start-up took
  bool has_reference = false;
  int64_t reference = 0;     // heap in use at the first idle moment after start-up
  int64_t most_beyond = 0;   // the most held beyond that at idle moments
  std::vector<DeviceMemory> totals;  // the last reading, for a released device
};
struct Life : LifeState {
  std::mutex mu;
};
Life g_life;

double ms_since(Steady::time_point t) { return std::chrono::duration<double, std::milli>(Steady::now() - t).count(); }

// The backends of the accelerators, each once.
std::vector<ggml_backend_reg_t> accelerator_backends() {
  std::vector<ggml_backend_reg_t> regs;
  for (ggml_backend_dev_t dev : accelerator_devices()) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    if (std::find(regs.begin(), regs.end(), reg) == regs.end()) regs.push_back(reg);
  }
  return regs;
}

using ReleaseFn = bool (*)();
using LimitsFn = bool (*)(int device, size_t* stack_size, size_t* heap_size, int* lazy_loading);

ReleaseFn release_fn(ggml_backend_reg_t reg) {
  return reinterpret_cast<ReleaseFn>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_release"));
}

// Each backend gives back its devices and driver state; false if one could
// not (a buffer or a backend of it is still alive).
bool release_backends() {
  bool ok = true;
  for (ggml_backend_reg_t reg : accelerator_backends()) {
    ReleaseFn fn = release_fn(reg);
    ok = fn && fn() && ok;
  }
  return ok;
}

// A device's context and driver come up with its first backend. Returns the
// heap it took, which stays with the driver until the release.
int64_t start_backends() {
  const auto before = static_cast<int64_t>(heap_stats().in_use);
  for (ggml_backend_dev_t dev : accelerator_devices()) {
    ggml_backend_t b = ggml_backend_dev_init(dev, nullptr);
    if (!b) throw Error(std::string("cannot start the device ") + ggml_backend_dev_name(dev) + " again");
    ggml_backend_free(b);
  }
  return std::max<int64_t>(0, static_cast<int64_t>(heap_stats().in_use) - before);
}

// Read only from live contexts: the backend does not create one to answer.
std::vector<DeviceContextLimits> context_limits() {
  std::vector<DeviceContextLimits> out;
  for (ggml_backend_reg_t reg : accelerator_backends()) {
    auto fn = reinterpret_cast<LimitsFn>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_cuda_context_limits"));
    if (!fn) continue;
    for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
      size_t stack = 0, heap = 0;
      int lazy = 0;
      if (!fn(static_cast<int>(i), &stack, &heap, &lazy)) continue;
      out.push_back({ggml_backend_dev_name(ggml_backend_reg_dev_get(reg, i)), stack, heap, lazy != 0});
    }
  }
  return out;
}

std::string entry_label() {
  return accelerator_names() + ": driver state and compiled pipelines, given back when the device is idle";
}

// The entry is born with the state and its release is the state's release.
void add_entry_locked(Life& l, int64_t bytes) {
  l.at_start = bytes;
  l.has_reference = false;
  l.most_beyond = 0;
  l.id = l.scope->add(Kind::device_state, entry_label(), static_cast<uint64_t>(bytes), [] {
    // Called under g_life.mu by release_locked, or when Runtime's scope
    // closes at the end (nothing is held by then).
    g_life.release_refused = !release_backends();
  });
}

void release_locked(Life& l) {
  const Steady::time_point t0 = Steady::now();
  l.release_refused = false;
  l.scope->release(l.id);
  if (l.release_refused) {
    // Something of the device outlived every hold: keep the state on the
    // ledger (as an entry again) and say so, rather than count it as gone.
    std::fprintf(stderr, "reclaim: %s kept its runtime state: a buffer or backend of it is still alive\n",
                 accelerator_names().c_str());
    add_entry_locked(l, l.at_start + l.most_beyond);
    l.releasable = false;  // not tried again: it would fail the same way
    return;
  }
  l.up = false;
  ++l.releases;
  release_free_heap();
  l.last_release_ms = ms_since(t0);
}

}  // namespace

std::string_view device_state_name(DeviceState s) {
  switch (s) {
    case DeviceState::absent: return "none";
    case DeviceState::in_use: return "in_use";
    case DeviceState::idle: return "idle";
    case DeviceState::released: return "released";
  }
  return "none";
}

DeviceHold& DeviceHold::operator=(DeviceHold&& o) noexcept {
  if (this != &o) {
    reset();
    held_ = o.held_;
    o.held_ = false;
  }
  return *this;
}

void DeviceHold::reset() noexcept {
  if (!held_) return;
  held_ = false;
  std::lock_guard lock(g_life.mu);
  if (--g_life.holds == 0) g_life.idle_since = Steady::now();
}

DeviceHold hold_devices() {
  DeviceHold h;
  std::lock_guard lock(g_life.mu);
  Life& l = g_life;
  if (!l.present || !l.scope) return h;
  if (!l.up) {
    const Steady::time_point t0 = Steady::now();
    const int64_t bytes = start_backends();
    add_entry_locked(l, bytes);
    l.up = true;
    ++l.bring_ups;
    l.last_bring_up_ms = ms_since(t0);
  }
  ++l.holds;
  h.held_ = true;
  return h;
}

DeviceLifeStatus device_life() {
  std::lock_guard lock(g_life.mu);
  const Life& l = g_life;
  DeviceLifeStatus s;
  if (!l.present || !l.scope) return s;
  s.state = !l.up ? DeviceState::released : l.holds > 0 ? DeviceState::in_use : DeviceState::idle;
  s.names = accelerator_names();
  s.releasable = l.releasable;
  s.holds = l.holds;
  if (s.state == DeviceState::idle) s.idle_s = ms_since(l.idle_since) / 1000;
  s.releases = l.releases;
  s.bring_ups = l.bring_ups;
  s.last_release_ms = l.last_release_ms;
  s.last_bring_up_ms = l.last_bring_up_ms;
  if (l.up) {
    s.state_bytes = l.at_start + l.most_beyond;
    s.limits = context_limits();
  }
  return s;
}

Steady::time_point release_idle_devices(std::chrono::milliseconds idle) {
  std::lock_guard lock(g_life.mu);
  Life& l = g_life;
  if (!l.present || !l.scope || !l.releasable || !l.up || l.holds > 0 || idle.count() < 0) return Steady::time_point::max();
  const Steady::time_point due = l.idle_since + idle;
  if (Steady::now() < due) return due;
  release_locked(l);
  return Steady::time_point::max();
}

void start_devices(Scope& scope) {
  std::lock_guard lock(g_life.mu);
  Life& l = g_life;
  static_cast<LifeState&>(l) = LifeState{};
  l.present = !accelerator_devices().empty();
  if (!l.present) return;
  l.scope = &scope;
  l.releasable = true;
  for (ggml_backend_reg_t reg : accelerator_backends()) l.releasable = l.releasable && release_fn(reg);
  add_entry_locked(l, start_backends());
  l.up = true;
  l.idle_since = Steady::now();
}

void stop_devices() noexcept {
  std::lock_guard lock(g_life.mu);
  g_life.scope = nullptr;
  g_life.present = false;
}

void note_devices_idle() {
  std::lock_guard lock(g_life.mu);
  Life& l = g_life;
  if (!l.scope || !l.up) return;
  const auto in_use = static_cast<int64_t>(heap_stats().in_use);
  if (!l.has_reference) {
    l.has_reference = true;
    l.reference = in_use;
    return;
  }
  const int64_t beyond = in_use - l.reference;
  if (beyond <= l.most_beyond) return;
  l.most_beyond = beyond;
  l.scope->resize(l.id, static_cast<uint64_t>(l.at_start + l.most_beyond));
}

std::vector<DeviceMemory> probe_device_memory() {
  std::lock_guard lock(g_life.mu);
  Life& l = g_life;
  if (l.present && !l.up) {
    std::vector<DeviceMemory> out = l.totals;
    for (DeviceMemory& d : out) d.used = 0;
    return out;
  }
  std::vector<DeviceMemory> out;
  // The CPU's share of the machine's memory is already in RSS.
  for (ggml_backend_dev_t dev : accelerator_devices()) {
    size_t free = 0, total = 0;
    ggml_backend_dev_memory(dev, &free, &total);
    out.push_back({ggml_backend_dev_name(dev), static_cast<int64_t>(total - free), static_cast<int64_t>(total)});
  }
  l.totals = out;
  return out;
}

}  // namespace reclaim
