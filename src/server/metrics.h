// GET /metrics: Prometheus' text format (version 0.0.4) of the process
// figures, the ledger by kind, each model, and the requests served.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/histogram.h"
#include "core/usage.h"
#include "runtime/registry.h"

namespace reclaim::server {

// Counters the HTTP side keeps.
struct RequestStats {
  std::atomic<uint64_t> ok{0}, error{0}, cancelled{0}, client_gone{0};
  std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0};
  std::atomic<uint64_t> cached_prompt_tokens{0};  // of prompt_tokens, taken from the prompt cache
  std::atomic<int64_t> in_flight{0};
  // Each completion's time to its first token, from its start on its model
  // (the wait for the model is reclaim_queue_wait_seconds), and its rate.
  Histogram first_token_seconds{{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram tokens_per_second{{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}};
};

// What the HTTP side's threads and connections are doing.
struct HttpStats {
  size_t threads = 0, busy = 0, queued = 0, peak = 0;  // server/worker_pool.h
  size_t connections = 0;
  uint64_t cut = 0;  // connections cut for taking too long over a request
};

std::string metrics_text(const Registry& registry, const Usage& baseline, const RequestStats& stats, const HttpStats& http);
// A label value with Prometheus' escapes (backslash, quote, newline).
std::string label_value(const std::string& v);

}  // namespace reclaim::server
