// GET /metrics: Prometheus' text format (version 0.0.4) of the process
// figures, the ledger by kind, each model, and the requests served.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/histogram.h"
#include "core/usage.h"
#include "runtime/registry.h"
#include "runtime/request_run.h"

namespace reclaim::server {

// What the HTTP side's threads and connections are doing.
struct HttpStats {
  size_t threads = 0, busy = 0, queued = 0, peak = 0;  // server/worker_pool.h
  size_t connections = 0;
  uint64_t cut = 0;  // connections cut for taking too long over a request
  size_t streams = 0, stream_bytes = 0;  // resumable streams kept, and their bytes (server/stream_sessions.h)
};

std::string metrics_text(const Registry& registry, const Usage& baseline, const RequestCounts& stats, const HttpStats& http);
// A label value with Prometheus' escapes (backslash, quote, newline).
std::string label_value(const std::string& v);

}  // namespace reclaim::server
