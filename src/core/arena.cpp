#include "core/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace reclaim {

namespace {

constexpr uintptr_t kRegion = uintptr_t{512} << 20;  // virtual; only what is used is touched
constexpr uintptr_t kHuge = uintptr_t{2} << 20;
constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kPages = kRegion / kPage;
// One live-block count a page, at the region's start: trim() needs to know
// which pages hold nothing, whichever thread freed what.
constexpr uintptr_t kCounters = kPages * sizeof(std::atomic<uint16_t>);
constexpr uintptr_t kHeader = 16;  // size, magic: keeps blocks 16-aligned as malloc's are
constexpr uint64_t kMagic = 0x52434c4d41524e41;  // "RCLMARNA"
constexpr uintptr_t kMaxBlock = uintptr_t{64} << 20;
constexpr int kMaxArenas = 8;

// Size classes: 16-byte steps to 1 KiB, then four a doubling to 64 KiB;
// larger blocks are kept on one list and reused first-fit.
constexpr uintptr_t kSmallMax = 1024;
constexpr uintptr_t kMediumMax = uintptr_t{64} << 10;
constexpr int kSmallClasses = kSmallMax / 16;  // 16 .. 1024
constexpr int kMediumClasses = 6 * 4;           // 1 KiB .. 64 KiB
constexpr int kClasses = kSmallClasses + kMediumClasses;

struct FreeBlock {  // over a freed block's header: its size stays where it was
  uintptr_t size;
  FreeBlock* next;
};

// Rounds `n` up to its class and returns the class, or -1 for a large block.
int size_class(uintptr_t& n) {
  if (n <= kSmallMax) {
    n = (n + 15) & ~uintptr_t{15};
    return static_cast<int>(n / 16) - 1;
  }
  if (n > kMediumMax) {
    n = (n + kPage - 1) & ~(kPage - 1);
    return -1;
  }
  const int log = 63 - __builtin_clzll(n - 1);  // 2^log < n <= 2^(log+1)
  const uintptr_t step = (uintptr_t{1} << log) / 4;
  n = (n + step - 1) & ~(step - 1);
  const int sub = static_cast<int>((n - (uintptr_t{1} << log)) / step) - 1;  // 0..3
  return kSmallClasses + (log - 10) * 4 + sub;
}

struct Slot {
  std::atomic<int> state{0};       // 0 free, 1 taken
  std::atomic<uintptr_t> base{0};  // region start; 0 while free
  // Live blocks, plus one while the window is open and one for each trim()
  // at work: whoever takes it to zero unmaps the region.
  std::atomic<int64_t> refs{0};
  std::atomic<int64_t> in_use{0};
  std::atomic<uintptr_t> high{0};  // end of what the bump has handed out
  std::atomic<bool> sealed{false};
  std::atomic<bool> trimmed{false};
  // The window's thread alone uses these, and only while the window is open.
  uintptr_t bump = 0;
  FreeBlock* lists[kClasses] = {};
  FreeBlock* large = nullptr;

  std::atomic<uint16_t>* counters() const {
    return reinterpret_cast<std::atomic<uint16_t>*>(base.load(std::memory_order_relaxed));
  }
};

Slot g_slots[kMaxArenas];
std::atomic<int> g_mapped_arenas{0};

// Initial-exec: operator new reads it on every call.
__attribute__((tls_model("initial-exec"))) thread_local int t_open = -1;

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("RECLAIM_LOAD_ARENA");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

void count_pages(Slot& s, uintptr_t block, uintptr_t size, int delta) {
  std::atomic<uint16_t>* c = s.counters();
  const uintptr_t base = s.base.load(std::memory_order_relaxed);
  const uintptr_t first = (block - base) / kPage, last = (block + size - 1 - base) / kPage;
  for (uintptr_t i = first; i <= last; ++i) {
    if (delta > 0) c[i].fetch_add(1, std::memory_order_relaxed);
    else c[i].fetch_sub(1, std::memory_order_relaxed);
  }
}

void unmap(Slot& s) {
  const uintptr_t base = s.base.load(std::memory_order_relaxed);
  ::munmap(reinterpret_cast<void*>(base), kRegion);
  s.base.store(0, std::memory_order_release);
  s.in_use.store(0, std::memory_order_relaxed);
  s.high.store(0, std::memory_order_relaxed);
  g_mapped_arenas.fetch_sub(1, std::memory_order_relaxed);
  s.state.store(0, std::memory_order_release);
}

void unref(Slot& s) {
  if (s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) unmap(s);
}

// A reference for trim(), only while the region is still mapped.
bool try_ref(Slot& s) {
  int64_t r = s.refs.load(std::memory_order_acquire);
  while (r > 0) {
    if (s.refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

Slot* slot_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (Slot& s : g_slots) {
    const uintptr_t base = s.base.load(std::memory_order_acquire);
    if (base && a - base < kRegion) return &s;
  }
  return nullptr;
}

void* take(Slot& s, uintptr_t size, int cls) {
  uintptr_t block = 0;
  if (cls >= 0) {
    if (FreeBlock* f = s.lists[cls]) {
      s.lists[cls] = f->next;
      block = reinterpret_cast<uintptr_t>(f);
    }
  } else {
    // First fit that wastes at most half; a large free list stays short.
    FreeBlock** at = &s.large;
    for (int n = 0; *at && n < 64; at = &(*at)->next, ++n) {
      if ((*at)->size >= size && (*at)->size / 2 <= size) {
        FreeBlock* f = *at;
        *at = f->next;
        size = f->size;
        block = reinterpret_cast<uintptr_t>(f);
        break;
      }
    }
  }
  if (!block) {
    const uintptr_t base = s.base.load(std::memory_order_relaxed);
    if (s.bump + size > base + kRegion) return nullptr;
    block = s.bump;
    s.bump += size;
    s.high.store(s.bump, std::memory_order_relaxed);
  }
  auto* h = reinterpret_cast<uint64_t*>(block);
  h[0] = size;
  h[1] = kMagic;
  count_pages(s, block, size, +1);
  s.refs.fetch_add(1, std::memory_order_relaxed);
  s.in_use.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return reinterpret_cast<void*>(block + kHeader);
}

// Gives back the pages of a sealed arena that hold no live block; the caller
// holds a reference.
void trim_pages(Slot& s) {
  const uintptr_t base = s.base.load(std::memory_order_relaxed);
  // khugepaged would otherwise fold the pages left into whole huge pages again.
  if (!s.trimmed.exchange(true)) ::madvise(reinterpret_cast<void*>(base), kRegion, MADV_NOHUGEPAGE);
  std::atomic<uint16_t>* c = s.counters();
  // To the end of the huge page the bump is in: the fault of that page made
  // all of it resident, also what lies past the last block.
  const uintptr_t high = (s.high.load(std::memory_order_relaxed) - base + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t first = kCounters / kPage, end = std::min(high, kRegion) / kPage;
  uintptr_t run = 0;
  for (uintptr_t i = first; i <= end; ++i) {
    const bool empty = i < end && c[i].load(std::memory_order_relaxed) == 0;
    if (empty && !run) run = i;
    if (!empty && run) {
      ::madvise(reinterpret_cast<void*>(base + run * kPage), (i - run) * kPage, MADV_DONTNEED);
      run = 0;
    }
  }
}

}  // namespace

ArenaWindow::ArenaWindow() noexcept : outer_(t_open) {
  if (!enabled()) return;
  int i = 0;
  for (; i < kMaxArenas; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) break;
  }
  if (i == kMaxArenas) return;
  Slot& s = g_slots[i];
  // NORESERVE: the region is an address range; only touched pages count.
  void* raw = ::mmap(nullptr, kRegion + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    s.state.store(0, std::memory_order_release);
    return;
  }
  const auto at = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = (at + kHuge - 1) & ~(kHuge - 1);
  if (base > at) ::munmap(raw, base - at);
  if (at + kHuge > base) ::munmap(reinterpret_cast<void*>(base + kRegion), at + kHuge - base);
  ::madvise(reinterpret_cast<void*>(base), kRegion, MADV_HUGEPAGE);  // advice: plain pages without THP
  s.bump = base + kCounters;
  s.high.store(s.bump, std::memory_order_relaxed);
  s.in_use.store(0, std::memory_order_relaxed);
  s.sealed.store(false, std::memory_order_relaxed);
  s.trimmed.store(false, std::memory_order_relaxed);
  std::memset(s.lists, 0, sizeof s.lists);
  s.large = nullptr;
  s.refs.store(1, std::memory_order_relaxed);
  g_mapped_arenas.fetch_add(1, std::memory_order_relaxed);
  s.base.store(base, std::memory_order_release);
  slot_ = i;
  t_open = i;
}

ArenaWindow::~ArenaWindow() {
  if (slot_ < 0) return;
  t_open = outer_;
  Slot& s = g_slots[slot_];
  // From here its blocks are only counted down; the lists are not used again.
  s.sealed.store(true, std::memory_order_release);
  // What the burst freed on its way (a load's parsed metadata, a vector's
  // earlier sizes) is not kept resident for the life of what it made.
  if (s.refs.load(std::memory_order_acquire) > 1) trim_pages(s);
  unref(s);
}

namespace arena {

void* allocate(size_t bytes) noexcept {
  const int open = t_open;
  if (open < 0) return nullptr;
  uintptr_t size = bytes + kHeader;
  if (bytes > kMaxBlock) return nullptr;
  const int cls = size_class(size);
  return take(g_slots[open], size, cls);
}

bool deallocate(void* p) noexcept {
  if (g_mapped_arenas.load(std::memory_order_relaxed) == 0) return false;
  Slot* s = slot_of(p);
  if (!s) return false;
  const uintptr_t block = reinterpret_cast<uintptr_t>(p) - kHeader;
  auto* h = reinterpret_cast<uint64_t*>(block);
  // As glibc does for free(): a pointer it did not hand out, or one freed
  // twice, means the heap is already corrupt.
  if (h[1] != kMagic) std::abort();
  const uintptr_t size = h[0];
  h[1] = 0;
  count_pages(*s, block, size, -1);
  s->in_use.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  if (t_open == static_cast<int>(s - g_slots) && !s->sealed.load(std::memory_order_relaxed)) {
    auto* f = reinterpret_cast<FreeBlock*>(block);
    f->size = size;
    uintptr_t rounded = size;
    const int cls = size_class(rounded);
    FreeBlock*& head = cls >= 0 ? s->lists[cls] : s->large;
    f->next = head;
    head = f;
  }
  unref(*s);
  return true;
}

Stats stats() noexcept {
  Stats out;
  for (Slot& s : g_slots) {
    const uintptr_t base = s.base.load(std::memory_order_acquire);
    if (!base) continue;
    ++out.arenas;
    out.mapped += s.high.load(std::memory_order_relaxed) - base;
    out.in_use += static_cast<uint64_t>(s.in_use.load(std::memory_order_relaxed));
  }
  return out;
}

void trim() noexcept {
  for (Slot& s : g_slots) {
    if (!s.base.load(std::memory_order_acquire) || !s.sealed.load(std::memory_order_acquire)) continue;
    if (!try_ref(s)) continue;
    trim_pages(s);
    unref(s);
  }
}

}  // namespace arena
}  // namespace reclaim

// The replaceable global operator new and delete ([new.delete]): only this
// thread's open window changes where a block comes from; otherwise they do
// what libstdc++'s do, with malloc.
namespace {
void* allocate_or_throw(std::size_t n) {
  if (void* p = reclaim::arena::allocate(n)) return p;
  for (;;) {
    if (void* p = std::malloc(n ? n : 1)) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}
void* allocate_or_null(std::size_t n) noexcept {
  try {
    return allocate_or_throw(n);
  } catch (...) {
    return nullptr;
  }
}
void release(void* p) noexcept {
  if (p && !reclaim::arena::deallocate(p)) std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return allocate_or_throw(n); }
void* operator new[](std::size_t n) { return allocate_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
