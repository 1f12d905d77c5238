#include "core/arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/env_switch.h"

namespace reclaim {

namespace {

constexpr uintptr_t kRegion = uintptr_t{512} << 20;  // virtual; only what is used is touched
constexpr uintptr_t kHuge = uintptr_t{2} << 20;
constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kPages = kRegion / kPage;
// Live-block counts a page, at the region's start: trim() needs to know
// which pages hold nothing, whichever thread freed what. Two arrays, summed
// modulo 2^16: one that only the window's thread writes while the window is
// open (plain stores, no locked instruction on the load's millions of news
// and deletes), and one that every other free counts down atomically.
constexpr uintptr_t kCounterArray = kPages * sizeof(std::atomic<uint16_t>);
constexpr uintptr_t kCounters = 2 * kCounterArray;
// The open window's share of the references: other threads' frees count
// down from it, so they cannot reach zero before the window folds in its own
// count when it closes.
constexpr int64_t kOpenBias = int64_t{1} << 40;
// One word before each block, as glibc's: the magic in its high half, the
// size in its low one. Blocks start 8 bytes past a 16-byte boundary, so
// what new returns is 16-aligned. With a 16-byte header the vocab's 88-byte
// hash nodes took 112 bytes, not glibc's 96, and its destructor's walk over
// them took 26 ms a load instead of 21 (perf, bench load-abort).
constexpr uintptr_t kHeader = 8;
constexpr uint64_t kMagic = 0x52434c4d;  // "RCLM"
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
  // Live blocks, plus kOpenBias while the window is open and one for each
  // trim() at work: whoever takes it to zero unmaps the region. While the
  // window is open, its own thread's news and deletes count in own_refs.
  std::atomic<int64_t> refs{0};
  // Bytes in use, in two halves as the page counts: what the window's thread
  // took and freed while it was open (load, then store: it alone writes it),
  // and what others and later frees gave back (at or below zero).
  std::atomic<int64_t> own_in_use{0};
  std::atomic<int64_t> shared_in_use{0};
  std::atomic<uintptr_t> high{0};  // end of what the bump has handed out
  std::atomic<bool> sealed{false};
  std::atomic<bool> trimmed{false};
  // The window's thread alone uses these, and only while the window is open.
  uintptr_t bump = 0;
  int64_t own_refs = 0;
  FreeBlock* lists[kClasses] = {};
  FreeBlock* large = nullptr;
  // A freed large block that small ones are cut from, before the bump.
  uintptr_t carve = 0, carve_end = 0;

  std::atomic<uint16_t>* shared_counters() const {
    return reinterpret_cast<std::atomic<uint16_t>*>(base.load(std::memory_order_relaxed));
  }
  std::atomic<uint16_t>* own_counters() const {
    return reinterpret_cast<std::atomic<uint16_t>*>(base.load(std::memory_order_relaxed) + kCounterArray);
  }
};

Slot g_slots[kMaxArenas];
std::atomic<int> g_mapped_arenas{0};

// Initial-exec: operator new reads it on every call.
__attribute__((tls_model("initial-exec"))) thread_local int t_open = -1;

}  // namespace
}  // namespace reclaim

// Defined by core/new_delete.cpp, the operator new that routes to the
// windows: a program that does not link it (a library user with its own
// allocator) gets no window mapped, since nothing would fill it.
extern "C" __attribute__((weak)) const int reclaim_new_routes_to_arenas;

namespace reclaim {
namespace {

bool enabled() {
  static const bool on = &reclaim_new_routes_to_arenas != nullptr && env_switch_on("RECLAIM_LOAD_ARENA");
  return on;
}

struct PageSpan {
  uintptr_t first, last;
};
PageSpan pages_of(const Slot& s, uintptr_t block, uintptr_t size) {
  const uintptr_t base = s.base.load(std::memory_order_relaxed);
  return {(block - base) / kPage, (block + size - 1 - base) / kPage};
}

// The window's thread, while its window is open: nobody else writes these.
void count_own(Slot& s, uintptr_t block, uintptr_t size, int delta) {
  std::atomic<uint16_t>* c = s.own_counters();
  const PageSpan span = pages_of(s, block, size);
  for (uintptr_t i = span.first; i <= span.last; ++i) {
    c[i].store(static_cast<uint16_t>(c[i].load(std::memory_order_relaxed) + delta), std::memory_order_relaxed);
  }
  s.own_refs += delta;
  s.own_in_use.store(s.own_in_use.load(std::memory_order_relaxed) + delta * static_cast<int64_t>(size),
                     std::memory_order_relaxed);
}

void count_shared_free(Slot& s, uintptr_t block, uintptr_t size) {
  std::atomic<uint16_t>* c = s.shared_counters();
  const PageSpan span = pages_of(s, block, size);
  for (uintptr_t i = span.first; i <= span.last; ++i) c[i].fetch_sub(1, std::memory_order_relaxed);
  s.shared_in_use.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
}

bool page_empty(const Slot& s, uintptr_t i) {
  return static_cast<uint16_t>(s.own_counters()[i].load(std::memory_order_relaxed) +
                               s.shared_counters()[i].load(std::memory_order_relaxed)) == 0;
}

void unmap(Slot& s) {
  const uintptr_t base = s.base.load(std::memory_order_relaxed);
  // Out of slot_of() before the addresses are free: the next mmap, on any
  // thread, may return them for a region in another slot, and a free of its
  // blocks that found this slot first would count down the wrong region and
  // leave the new one mapped for good.
  s.base.store(0, std::memory_order_seq_cst);
  ::munmap(reinterpret_cast<void*>(base), kRegion);
  s.shared_in_use.store(0, std::memory_order_relaxed);
  s.own_in_use.store(0, std::memory_order_relaxed);
  s.high.store(0, std::memory_order_relaxed);
  g_mapped_arenas.fetch_sub(1, std::memory_order_relaxed);
  s.state.store(0, std::memory_order_release);
}

void unref(Slot& s, int64_t n = 1) {
  if (s.refs.fetch_sub(n, std::memory_order_acq_rel) == n) unmap(s);
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

// A load's vectors and hash tables grow by doubling: the buffers they leave
// behind fit no later request of theirs. Small blocks cut from them instead
// of from fresh pages, a 151,936-token vocab's load bumped through 52 MiB of
// the region instead of 57 (glibc's heap: 50).
bool carve_from_large(Slot& s) {
  FreeBlock* f = s.large;
  if (!f) return false;
  s.large = f->next;
  // What the last one has left is smaller than the block that did not fit,
  // at most 64 KiB: dropped, and trimmed with the window if nothing shares
  // its pages.
  s.carve = reinterpret_cast<uintptr_t>(f);
  s.carve_end = s.carve + f->size;
  return true;
}

void* take(Slot& s, uintptr_t size, int cls) {
  uintptr_t block = 0;
  if (cls >= 0) {
    if (FreeBlock* f = s.lists[cls]) {
      s.lists[cls] = f->next;
      block = reinterpret_cast<uintptr_t>(f);
    } else if (s.carve + size <= s.carve_end || carve_from_large(s)) {
      block = s.carve;
      s.carve += size;
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
    // A large block's first byte on a cache line (arena.h says why); the
    // bump stays 8 past a 16-byte boundary, as the padding is a multiple of 16.
    const uintptr_t pad = cls < 0 ? (arena::kLine - (s.bump + kHeader) % arena::kLine) % arena::kLine : 0;
    if (s.bump + pad + size > base + kRegion) return nullptr;
    block = s.bump + pad;
    s.bump = block + size;
    s.high.store(s.bump, std::memory_order_relaxed);
  }
  *reinterpret_cast<uint64_t*>(block) = kMagic << 32 | size;
  count_own(s, block, size, +1);
  return reinterpret_cast<void*>(block + kHeader);
}

// Pages a trim gives back at a time. Where the region can have huge pages,
// only whole ones: cutting the free part out of a huge page that still holds
// live blocks splits its mapping into 4 KiB pages, and walking those blocks
// gets slow. An spm vocab's destructor took 2.5x as long after the close's
// trim had split its pages (perf, 40 load-free cycles: 765 samples against
// 308), and the cycle 1.10x raw llama.cpp's; what that trim gave back was
// 2.7 MiB, kept now until the model goes.
uintptr_t trim_granule() {
  static const uintptr_t pages = [] {
    char buf[128] = {};
    const int fd = ::open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return uintptr_t{1};
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    const bool never = n > 0 && std::strstr(buf, "[never]");
    // RECLAIM_ARENA_TRIM=pages cuts into huge pages anyway, to measure.
    const char* e = std::getenv("RECLAIM_ARENA_TRIM");
    return never || (e && std::strcmp(e, "pages") == 0) ? uintptr_t{1} : kHuge / kPage;
  }();
  return pages;
}

// Gives back the pages of a sealed arena that hold no live block; the caller
// holds a reference.
void trim_pages(Slot& s) {
  const uintptr_t base = s.base.load(std::memory_order_relaxed);
  // khugepaged would otherwise fold the pages left into whole huge pages again.
  if (!s.trimmed.exchange(true)) ::madvise(reinterpret_cast<void*>(base), kRegion, MADV_NOHUGEPAGE);
  // To the end of the huge page the bump is in: the fault of that page made
  // all of it resident, also what lies past the last block.
  const uintptr_t high = (s.high.load(std::memory_order_relaxed) - base + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t first = kCounters / kPage, end = std::min(high, kRegion) / kPage;
  const uintptr_t granule = trim_granule();
  uintptr_t run = 0;
  for (uintptr_t i = first; i <= end; ++i) {
    const bool empty = i < end && page_empty(s, i);
    if (empty && !run) run = i;
    if (!empty && run) {
      const uintptr_t from = (run + granule - 1) / granule * granule, to = i / granule * granule;
      if (to > from) ::madvise(reinterpret_cast<void*>(base + from * kPage), (to - from) * kPage, MADV_DONTNEED);
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
  s.bump = base + kCounters + kHeader;
  s.high.store(s.bump, std::memory_order_relaxed);
  s.shared_in_use.store(0, std::memory_order_relaxed);
  s.own_in_use.store(0, std::memory_order_relaxed);
  s.own_refs = 0;
  s.sealed.store(false, std::memory_order_relaxed);
  s.trimmed.store(false, std::memory_order_relaxed);
  std::memset(s.lists, 0, sizeof s.lists);
  s.large = nullptr;
  s.carve = s.carve_end = 0;
  s.refs.store(kOpenBias, std::memory_order_relaxed);
  g_mapped_arenas.fetch_add(1, std::memory_order_relaxed);
  s.base.store(base, std::memory_order_release);
  slot_ = i;
  t_open = i;
}

ArenaWindow::~ArenaWindow() {
  if (slot_ < 0) return;
  t_open = outer_;
  Slot& s = g_slots[slot_];
  // From here its blocks are only counted down, atomically; the lists and
  // the own counts are not written again.
  s.sealed.store(true, std::memory_order_release);
  const int64_t live = s.own_refs + s.refs.fetch_add(s.own_refs, std::memory_order_acq_rel) - kOpenBias;
  // What the burst freed on its way (a load's parsed metadata, a vector's
  // earlier sizes) is not kept resident for the life of what it made.
  if (live > 0) trim_pages(s);
  unref(s, kOpenBias);
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
  const uint64_t h = *reinterpret_cast<uint64_t*>(block);
  // As glibc does for free(): a pointer it did not hand out, or one freed
  // twice, means the heap is already corrupt.
  if (h >> 32 != kMagic) std::abort();
  const uintptr_t size = h & 0xffffffff;
  *reinterpret_cast<uint64_t*>(block) = size;
  if (t_open == static_cast<int>(s - g_slots) && !s->sealed.load(std::memory_order_relaxed)) {
    // The window's own thread: the region stays mapped while it is open.
    count_own(*s, block, size, -1);
    auto* f = reinterpret_cast<FreeBlock*>(block);  // its size is already the header
    uintptr_t rounded = size;
    const int cls = size_class(rounded);
    FreeBlock*& head = cls >= 0 ? s->lists[cls] : s->large;
    f->next = head;
    head = f;
    return true;
  }
  count_shared_free(*s, block, size);
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
    out.in_use += static_cast<uint64_t>(s.shared_in_use.load(std::memory_order_relaxed) +
                                        s.own_in_use.load(std::memory_order_relaxed));
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
