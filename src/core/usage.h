// One snapshot of what this process holds, read from /proc/self, the heap
// allocator and the accelerator devices, and the difference of two.
//
// The probe reads /proc through stack buffers, allocating on the heap only for
// the list of accelerator devices, and opens one fd at a time, closed before it
// returns, so that measuring hardly moves what it measures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace reclaim {

struct DeviceMemory {
  std::string name;
  int64_t used = 0;   // total - free, as the device reports it
  int64_t total = 0;
};

struct Usage {
  double t = 0;  // seconds on the steady clock
  int64_t rss = 0, anon = 0, file = 0, shmem = 0;  // bytes (VmRSS, RssAnon, RssFile, RssShmem)
  int64_t locked = 0, pinned = 0;                   // bytes (VmLck, VmPin)
  // bytes (VmSwap): anon memory the kernel pushed out. A leak under memory
  // pressure moves from anon to here, so residues are judged on the sum.
  int64_t swap = 0;
  int64_t threads = 0, fds = 0, maps = 0;           // counts
  int64_t model_maps = 0, model_mapped = 0;         // mappings of .gguf files: count, bytes
  int64_t heap_arena = 0, heap_in_use = 0, heap_free = 0;  // bytes (mallinfo2)
  int64_t device_used = 0;                          // bytes, summed over accelerator devices
  std::vector<DeviceMemory> devices;

  static Usage capture();
};

// Field-wise a - b (device list: by position, when both have the same devices).
Usage operator-(const Usage& a, const Usage& b);
// Field-wise maximum, for peaks.
Usage max_of(const Usage& a, const Usage& b);

// One named figure of Usage, so that tables, JSON and thresholds list the same
// figures in the same order.
struct Figure {
  const char* name;
  const char* unit;  // "bytes" or "count"
  int64_t Usage::*field;
};
const std::vector<Figure>& usage_figures();

// Device memory in use, summed over accelerators: Usage::capture().device_used
// without reading /proc.
int64_t device_memory_used();

// The machine's MemAvailable (what can be allocated without swapping), in
// bytes; -1 if /proc/meminfo does not say.
int64_t memory_available();

// Reports accelerator memory; set by the engine (core knows no devices).
using DeviceProbe = std::function<std::vector<DeviceMemory>()>;
void set_device_probe(DeviceProbe probe);

}  // namespace reclaim
