// The process-wide registry of live resources. Scopes write to it; probes,
// the audit and the server's endpoints read it. A resource that is on the
// ledger after its owner has gone is a leak, and the audit says so.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/resource.h"

namespace reclaim {

struct LedgerEntry {
  uint64_t id = 0;
  Kind kind = Kind::other;
  std::string owner;  // scope path, e.g. "model:qwen/request:42"
  std::string label;
  uint64_t bytes = 0;
  std::chrono::steady_clock::time_point since;
};

struct LedgerTotals {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

class Ledger {
 public:
  Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // The ledger of this process. Never destroyed, so that scopes closed by
  // static destructors can still report to it.
  static Ledger& process();

  uint64_t acquire(Kind kind, std::string owner, std::string label, uint64_t bytes);
  void resize(uint64_t id, uint64_t bytes);
  // `failed` marks a release whose cleanup threw: the entry leaves the ledger
  // (nothing can retry it) but the failure is counted and logged.
  void release(uint64_t id, bool failed = false);

  std::vector<LedgerEntry> entries() const;
  std::map<Kind, LedgerTotals> by_kind() const;
  std::map<std::string, LedgerTotals> by_owner() const;
  LedgerTotals totals() const;
  uint64_t failed_releases() const;
  uint64_t acquired_total() const;

  // One JSON line per acquire and release on `out` (nullptr: off). Turned on
  // at start-up by RECLAIM_LOG=resources.
  void set_log(std::FILE* out);

  // Test-only: the next `n` acquires throw std::bad_alloc, as an exhausted
  // allocator would, so that the paths that must survive it can be tested.
  void fail_next_acquires(int n);

 private:
  void log_event(const char* event, const LedgerEntry& e, bool failed) const;

  mutable std::mutex mu_;
  std::map<uint64_t, LedgerEntry> live_;
  uint64_t next_id_ = 1;
  uint64_t failed_ = 0;
  int fail_acquires_ = 0;
  std::FILE* log_ = nullptr;
};

// True when the comma-separated RECLAIM_LOG contains `topic`.
bool log_topic_enabled(const char* topic);

}  // namespace reclaim
