// The server's memory over the last minutes, for the dashboard's chart
// (GET /v1/resources/history): a sample of the process figures and the
// ledger every second, and a marker where a model loaded or unloaded.
//
// Both rings are allocated whole when the server starts, so that the
// history is in the baseline residues are measured from and never grows.
// The sampler is a thread of its own, on the ledger under the server's
// scope; it stops when that scope closes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scope.h"
#include "core/scoped_thread.h"
#include "runtime/registry.h"

namespace reclaim::server {

struct HistorySample {
  double t = 0;  // seconds since the epoch (the chart's x)
  int64_t rss = 0, anon = 0, device = 0;       // the process, as Usage reads it
  int64_t ledger_host = 0, ledger_device = 0;  // what the ledger accounts for
};

struct HistoryEvent {
  double t = 0;
  bool load = true;  // false: an unload
  std::string model;
};

class ResourceHistory {
 public:
  // `every`: 0 keeps no history (and starts no thread).
  ResourceHistory(Scope& scope, const Registry& registry, std::chrono::milliseconds every, size_t samples);
  ~ResourceHistory();
  ResourceHistory(const ResourceHistory&) = delete;
  ResourceHistory& operator=(const ResourceHistory&) = delete;

  // Samples and markers newer than `since` (seconds since the epoch), oldest
  // first, as columns: {"t": [...], "rss": [...], ...}, the shape uPlot draws.
  nlohmann::json since(double since) const;
  // Takes a sample now (the thread does so every `every`).
  void sample();

 private:
  void run();
  void wake_to_stop() noexcept;  // run() returns

  const Registry& registry_;
  const std::chrono::milliseconds every_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<HistorySample> samples_;  // a ring: next_ is the oldest once full
  size_t next_ = 0, count_ = 0;
  std::vector<HistoryEvent> events_;
  size_t next_event_ = 0, event_count_ = 0;
  // Per model, the loads and unloads seen at the last sample.
  std::map<std::string, std::pair<uint64_t, uint64_t>> seen_;
  ScopedThread thread_;  // last: it stops before the members it reads go
};

}  // namespace reclaim::server
