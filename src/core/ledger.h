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
  uint64_t bytes = 0;                // in host memory
  std::vector<DeviceBytes> devices;  // on accelerators, besides `bytes`
  std::chrono::steady_clock::time_point since;
  uint64_t device_bytes() const;
  uint64_t all_bytes() const { return bytes + device_bytes(); }
};

struct LedgerTotals {
  uint64_t count = 0;
  uint64_t bytes = 0;  // host and device together
};

// The key of host memory in Ledger::by_device().
inline constexpr const char* kHostMemory = "host";

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
  // Which of an entry's bytes are on accelerators: `host` stay in host
  // memory and `devices` are set anew.
  void place(uint64_t id, uint64_t host, std::vector<DeviceBytes> devices);
  // `failed` marks a release whose cleanup threw: the entry leaves the ledger
  // (nothing can retry it) but the failure is counted and logged.
  void release(uint64_t id, bool failed = false);

  std::vector<LedgerEntry> entries() const;
  std::map<Kind, LedgerTotals> by_kind() const;
  std::map<std::string, LedgerTotals> by_owner() const;
  // Bytes and entries by where the bytes are: kHostMemory, then each device.
  // An entry with bytes in two places counts in both.
  std::map<std::string, LedgerTotals> by_device() const;
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
