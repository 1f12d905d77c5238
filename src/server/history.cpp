#include "server/history.h"

#include "core/error.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "core/usage.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

constexpr size_t kEvents = 256;
// Usage::capture reads /proc through buffers of up to 68 KiB on its stack.
constexpr size_t kStack = size_t{512} << 10;

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ResourceHistory::ResourceHistory(Scope& scope, const Registry& registry, std::chrono::milliseconds every, size_t samples)
    : registry_(registry), every_(every) {
  if (every_.count() <= 0 || samples == 0) return;
  samples_.resize(samples);
  events_.resize(kEvents);
  thread_.start(scope, "resource history", [this] { run(); }, [this] { wake_to_stop(); }, kStack);
}

// The scope stops the thread when it closes first; this is for a history
// whose scope outlives it.
ResourceHistory::~ResourceHistory() { thread_.stop(); }

void ResourceHistory::wake_to_stop() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void ResourceHistory::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    sample();
    lock.lock();
    cv_.wait_for(lock, every_, [this] { return stopping_; });
  }
}

void ResourceHistory::sample() {
  if (samples_.empty()) return;
  const Usage u = Usage::capture();
  // At most a second after it was freed.
  (void)give_back_free_heap(u.heap_free);
  HistorySample s;
  s.t = epoch_seconds();
  s.rss = u.rss;
  s.anon = u.anon + u.swap;  // what was anon and was pushed out is still held
  s.device = u.device_used;
  for (const auto& [place, totals] : Ledger::process().by_device()) {
    (place == kHostMemory ? s.ledger_host : s.ledger_device) += static_cast<int64_t>(totals.bytes);
  }
  const std::vector<ModelStatus> models = registry_.list();
  std::lock_guard lock(mu_);
  samples_[next_] = s;
  next_ = (next_ + 1) % samples_.size();
  count_ = std::min(count_ + 1, samples_.size());
  for (const ModelStatus& m : models) {
    const auto it = seen_.try_emplace(m.name, 0, 0).first;
    // A model first seen loaded (the sampler starts after a preload) gets
    // its marker too.
    for (uint64_t i = it->second.first; i < m.loads; ++i) {
      events_[next_event_] = {s.t, true, m.name};
      next_event_ = (next_event_ + 1) % events_.size();
      event_count_ = std::min(event_count_ + 1, events_.size());
    }
    for (uint64_t i = it->second.second; i < m.unloads; ++i) {
      events_[next_event_] = {s.t, false, m.name};
      next_event_ = (next_event_ + 1) % events_.size();
      event_count_ = std::min(event_count_ + 1, events_.size());
    }
    it->second = {m.loads, m.unloads};
  }
}

json ResourceHistory::since(double since) const {
  json t = json::array(), rss = json::array(), anon = json::array(), device = json::array(), ledger_host = json::array(),
       ledger_device = json::array(), events = json::array();
  std::lock_guard lock(mu_);
  const size_t first = (next_ + samples_.size() - count_) % std::max<size_t>(samples_.size(), 1);
  for (size_t i = 0; i < count_; ++i) {
    const HistorySample& s = samples_[(first + i) % samples_.size()];
    if (s.t <= since) continue;
    t.push_back(s.t);
    rss.push_back(s.rss);
    anon.push_back(s.anon);
    device.push_back(s.device);
    ledger_host.push_back(s.ledger_host);
    ledger_device.push_back(s.ledger_device);
  }
  const size_t first_event = (next_event_ + events_.size() - event_count_) % std::max<size_t>(events_.size(), 1);
  for (size_t i = 0; i < event_count_; ++i) {
    const HistoryEvent& e = events_[(first_event + i) % events_.size()];
    if (e.t <= since) continue;
    events.push_back({{"t", e.t}, {"event", e.load ? "load" : "unload"}, {"model", e.model}});
  }
  return {{"every_ms", every_.count()},
          {"capacity", samples_.size()},
          {"t", t},
          {"rss", rss},
          {"anon", anon},
          {"device", device},
          {"ledger_host", ledger_host},
          {"ledger_device", ledger_device},
          {"events", events}};
}

}  // namespace reclaim::server
