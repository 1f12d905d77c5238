// ggml's large CPU buffers (a context's KV cache and compute buffer, a model
// loaded without mmap) mapped here in 2 MiB transparent huge pages.
//
// Why: llama.cpp zeroes a new KV cache, and each 4 KiB page of it is a fault.
// On the VM this was measured on a fault costs ~14 us, so creating the batch
// context of a 300 MiB model took 325 ms, most of a model swap (bench/swap).
// With huge pages it is one fault per 2 MiB. glibc's own huge page tunable
// (glibc.malloc.hugetlb) was rejected for the whole heap (core/heap.h); this
// touches only these buffers, which are mapped for themselves and unmapped
// when ggml frees them, so they are given back at once, whole.
//
// How: the link wraps ggml_aligned_malloc / ggml_aligned_free
// (-Wl,--wrap, CMakeLists.txt), which ggml's CPU buffer type calls with the
// same size on both sides. Smaller blocks and RECLAIM_HUGE_BUFFERS=0 go to
// ggml's own functions. Where llama.cpp is a shared library the wrap does not
// reach its internal calls and nothing changes.
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/env_switch.h"
#include "core/heap.h"
#include "engine/ggml_buffers.h"

extern "C" {
void* __real_ggml_aligned_malloc(size_t size);
void __real_ggml_aligned_free(void* ptr, size_t size);
void* __wrap_ggml_aligned_malloc(size_t size);
void __wrap_ggml_aligned_free(void* ptr, size_t size);
}

namespace {

constexpr size_t kHuge = size_t{2} << 20;
// Below one huge page, rounding up would waste most of it: ggml's malloc, as
// before. From 2 MiB, at most one partly used huge page a buffer (a 7 MiB KV
// cache of a small context takes 8 MiB, in 4 faults instead of 1,800).
constexpr size_t kThreshold = kHuge;

bool enabled() {
  static const bool on = reclaim::env_switch_on("RECLAIM_HUGE_BUFFERS");
  return on;
}

bool ours(size_t size) { return size >= kThreshold && enabled(); }

size_t round_up(size_t n) { return (n + kHuge - 1) & ~(kHuge - 1); }

// Bytes of the buffers live now, as ggml asked for them, whichever way each
// was allocated.
std::atomic<uint64_t> g_live{0};

void* map_buffer(size_t size) {
  const size_t len = round_up(size);
  // One huge page more than needed, so that a 2 MiB-aligned start fits; the
  // ends are unmapped again.
  void* raw = ::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + kHuge - 1) & ~(uintptr_t{kHuge} - 1);
  if (start > base) ::munmap(raw, start - base);
  const uintptr_t end = base + len + kHuge;
  if (end > start + len) ::munmap(reinterpret_cast<void*>(start + len), end - (start + len));
  void* p = reinterpret_cast<void*>(start);
  ::madvise(p, len, MADV_HUGEPAGE);  // advice: without THP it is plain pages
  reclaim::note_direct_mapping(static_cast<int64_t>(len));
  return p;
}

}  // namespace

extern "C" void* __wrap_ggml_aligned_malloc(size_t size) {
  void* p = ours(size) ? map_buffer(size) : __real_ggml_aligned_malloc(size);
  if (p) g_live.fetch_add(size, std::memory_order_relaxed);
  return p;
}

extern "C" void __wrap_ggml_aligned_free(void* ptr, size_t size) {
  if (!ptr) return;
  g_live.fetch_sub(size, std::memory_order_relaxed);
  if (!ours(size)) return __real_ggml_aligned_free(ptr, size);
  const size_t len = round_up(size);
  ::munmap(ptr, len);
  reclaim::note_direct_mapping(-static_cast<int64_t>(len));
}

uint64_t reclaim::ggml_cpu_buffers_live() { return g_live.load(std::memory_order_relaxed); }

uint64_t reclaim::ggml_cpu_buffer_footprint(uint64_t size) { return ours(size) ? round_up(size) : size; }
