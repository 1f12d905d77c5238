#include "core/ledger.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <nlohmann/json.hpp>

namespace reclaim {

Ledger::Ledger() {
  if (log_topic_enabled("resources")) log_ = stderr;
}

Ledger& Ledger::process() {
  static Ledger* ledger = new Ledger();  // intentionally immortal, see header
  return *ledger;
}

uint64_t Ledger::acquire(Kind kind, std::string owner, std::string label, uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (fail_acquires_ > 0) {
    --fail_acquires_;
    throw std::bad_alloc();
  }
  uint64_t id = next_id_++;
  LedgerEntry& e = live_[id];
  e.id = id;
  e.kind = kind;
  e.owner = std::move(owner);
  e.label = std::move(label);
  e.bytes = bytes;
  e.since = std::chrono::steady_clock::now();
  log_event("acquire", e, false);
  return id;
}

void Ledger::resize(uint64_t id, uint64_t bytes) {
  std::lock_guard lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  it->second.bytes = bytes;
  log_event("resize", it->second, false);
}

void Ledger::release(uint64_t id, bool failed) {
  std::lock_guard lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (failed) ++failed_;
  log_event(failed ? "release_failed" : "release", it->second, failed);
  live_.erase(it);
}

void Ledger::place(uint64_t id, uint64_t host, std::vector<DeviceBytes> devices) {
  std::lock_guard lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  it->second.bytes = host;
  it->second.devices = std::move(devices);
  log_event("place", it->second, false);
}

uint64_t LedgerEntry::device_bytes() const {
  uint64_t n = 0;
  for (const DeviceBytes& d : devices) n += d.bytes;
  return n;
}

std::map<std::string, LedgerTotals> Ledger::by_device() const {
  std::lock_guard lock(mu_);
  std::map<std::string, LedgerTotals> out;
  out[kHostMemory];
  for (const auto& [id, e] : live_) {
    if (e.bytes > 0 || e.devices.empty()) {
      out[kHostMemory].count++;
      out[kHostMemory].bytes += e.bytes;
    }
    for (const DeviceBytes& d : e.devices) {
      out[d.device].count++;
      out[d.device].bytes += d.bytes;
    }
  }
  return out;
}

std::vector<LedgerEntry> Ledger::entries() const {
  std::lock_guard lock(mu_);
  std::vector<LedgerEntry> out;
  out.reserve(live_.size());
  for (const auto& [id, e] : live_) out.push_back(e);
  return out;
}

std::map<Kind, LedgerTotals> Ledger::by_kind() const {
  std::lock_guard lock(mu_);
  std::map<Kind, LedgerTotals> out;
  for (const auto& [id, e] : live_) {
    out[e.kind].count++;
    out[e.kind].bytes += e.all_bytes();
  }
  return out;
}

std::map<std::string, LedgerTotals> Ledger::by_owner() const {
  std::lock_guard lock(mu_);
  std::map<std::string, LedgerTotals> out;
  for (const auto& [id, e] : live_) {
    out[e.owner].count++;
    out[e.owner].bytes += e.all_bytes();
  }
  return out;
}

LedgerTotals Ledger::totals() const {
  std::lock_guard lock(mu_);
  LedgerTotals t;
  for (const auto& [id, e] : live_) {
    t.count++;
    t.bytes += e.all_bytes();
  }
  return t;
}

uint64_t Ledger::failed_releases() const {
  std::lock_guard lock(mu_);
  return failed_;
}

uint64_t Ledger::acquired_total() const {
  std::lock_guard lock(mu_);
  return next_id_ - 1;
}

void Ledger::fail_next_acquires(int n) {
  std::lock_guard lock(mu_);
  fail_acquires_ = n;
}

void Ledger::set_log(std::FILE* out) {
  std::lock_guard lock(mu_);
  log_ = out;
}

void Ledger::log_event(const char* event, const LedgerEntry& e, bool failed) const {
  if (!log_) return;
  auto now = std::chrono::steady_clock::now();
  nlohmann::json j = {
      {"event", event},
      {"id", e.id},
      {"kind", kind_name(e.kind)},
      {"owner", e.owner},
      {"label", e.label},
      {"bytes", e.bytes},
      {"device_bytes", e.device_bytes()},
      {"age_ms", std::chrono::duration<double, std::milli>(now - e.since).count()},
  };
  if (failed) j["failed"] = true;
  std::string line = j.dump();
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), log_);
  std::fflush(log_);
}

bool log_topic_enabled(const char* topic) {
  const char* v = std::getenv("RECLAIM_LOG");
  if (!v) return false;
  std::string_view s(v), t(topic);
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    if (item == t || item == "all") return true;
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace reclaim
