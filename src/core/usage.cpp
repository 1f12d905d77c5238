#include "core/usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/heap.h"
#include "core/proc_lines.h"

namespace reclaim {

namespace {

std::mutex& probe_mu() {
  static std::mutex mu;
  return mu;
}
DeviceProbe& device_probe() {
  static DeviceProbe p;
  return p;
}

// Reads a small /proc file into buf; returns its length (0 on failure).
size_t read_small(const char* path, char* buf, size_t cap) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = ::read(fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(fd);
  buf[n] = '\0';
  return n;
}

// "VmRSS:	  1234 kB" -> bytes
int64_t status_kb(const char* status, const char* key) {
  const char* p = std::strstr(status, key);
  if (!p) return 0;
  p += std::strlen(key);
  return std::strtoll(p, nullptr, 10) * 1024;
}

int64_t status_count(const char* status, const char* key) {
  const char* p = std::strstr(status, key);
  if (!p) return 0;
  return std::strtoll(p + std::strlen(key), nullptr, 10);
}

int64_t count_fds() {
  int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  alignas(8) char buf[8192];
  int64_t n = 0;
  for (;;) {
    long got = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (got <= 0) break;
    for (long off = 0; off < got;) {
      auto* d = reinterpret_cast<struct dirent64*>(buf + off);
      if (d->d_name[0] != '.') ++n;
      off += d->d_reclen;
    }
  }
  ::close(dir);
  return n - 1;  // the directory fd itself
}

bool ends_with(const char* s, size_t len, const char* suffix) {
  size_t k = std::strlen(suffix);
  return len >= k && std::memcmp(s + len - k, suffix, k) == 0;
}

// Counts mappings, and those of model files, in /proc/self/maps.
void scan_maps(Usage& u) {
  for_each_proc_line("/proc/self/maps", [&u](char* line, size_t len) {
    ++u.maps;
    while (len > 0 && line[len - 1] == ' ') --len;
    if (!ends_with(line, len, ".gguf")) return;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
      ++u.model_maps;
      u.model_mapped += static_cast<int64_t>(hi - lo);
    }
  });
}

}  // namespace

Usage Usage::capture() {
  // One capture at a time: each opens /proc files for a moment, and one
  // would count the other's descriptors. The server's history sampler once
  // captured beside its baseline, and every residue after read fds -1
  // (Usage.CapturesBesideEachOtherCountTheSameDescriptors).
  static std::mutex capture_mu;
  std::lock_guard capturing(capture_mu);
  Usage u;
  u.t = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  char status[8192];
  if (read_small("/proc/self/status", status, sizeof status) > 0) {
    u.rss = status_kb(status, "VmRSS:");
    u.anon = status_kb(status, "RssAnon:");
    u.file = status_kb(status, "RssFile:");
    u.shmem = status_kb(status, "RssShmem:");
    u.locked = status_kb(status, "VmLck:");
    u.pinned = status_kb(status, "VmPin:");
    u.swap = status_kb(status, "VmSwap:");
    u.threads = status_count(status, "Threads:");
  }
  u.fds = count_fds();
  scan_maps(u);
  HeapStats h = heap_stats();
  u.heap_arena = static_cast<int64_t>(h.arena);
  u.heap_in_use = static_cast<int64_t>(h.in_use);
  u.heap_free = static_cast<int64_t>(h.free);
  std::lock_guard lock(probe_mu());
  if (device_probe()) {
    u.devices = device_probe()();
    for (const DeviceMemory& d : u.devices) u.device_used += d.used;
  }
  return u;
}

Usage operator-(const Usage& a, const Usage& b) {
  Usage d;
  for (const Figure& f : usage_figures()) d.*f.field = a.*f.field - b.*f.field;
  d.t = a.t - b.t;
  if (a.devices.size() == b.devices.size()) {
    for (size_t i = 0; i < a.devices.size(); ++i) {
      d.devices.push_back({a.devices[i].name, a.devices[i].used - b.devices[i].used, a.devices[i].total});
    }
  }
  return d;
}

Usage max_of(const Usage& a, const Usage& b) {
  Usage m = a;
  for (const Figure& f : usage_figures()) m.*f.field = std::max(a.*f.field, b.*f.field);
  m.t = std::max(a.t, b.t);
  if (a.devices.size() == b.devices.size()) {
    for (size_t i = 0; i < a.devices.size(); ++i) m.devices[i].used = std::max(a.devices[i].used, b.devices[i].used);
  }
  return m;
}

const std::vector<Figure>& usage_figures() {
  static const std::vector<Figure> figures = {
      {"rss", "bytes", &Usage::rss},
      {"anon", "bytes", &Usage::anon},
      {"file", "bytes", &Usage::file},
      {"shmem", "bytes", &Usage::shmem},
      {"locked", "bytes", &Usage::locked},
      {"pinned", "bytes", &Usage::pinned},
      {"swap", "bytes", &Usage::swap},
      {"threads", "count", &Usage::threads},
      {"fds", "count", &Usage::fds},
      {"maps", "count", &Usage::maps},
      {"model_maps", "count", &Usage::model_maps},
      {"model_mapped", "bytes", &Usage::model_mapped},
      {"heap_arena", "bytes", &Usage::heap_arena},
      {"heap_in_use", "bytes", &Usage::heap_in_use},
      {"heap_free", "bytes", &Usage::heap_free},
      {"device_used", "bytes", &Usage::device_used},
  };
  return figures;
}

int64_t device_memory_used() {
  std::lock_guard lock(probe_mu());
  int64_t used = 0;
  if (device_probe()) {
    for (const DeviceMemory& d : device_probe()()) used += d.used;
  }
  return used;
}

void set_device_probe(DeviceProbe probe) {
  std::lock_guard lock(probe_mu());
  device_probe() = std::move(probe);
}

}  // namespace reclaim

namespace reclaim {

int64_t memory_available() {
  int64_t kib = -1;
  for_each_proc_line("/proc/meminfo", [&](const char* line, size_t) {
    if (std::strncmp(line, "MemAvailable:", 13) == 0) kib = std::strtoll(line + 13, nullptr, 10);
  });
  return kib < 0 ? -1 : kib * 1024;
}

}  // namespace reclaim
