// A region of huge pages for one burst of C++ allocations (a model load),
// given back whole when its last block is freed.
//
// Why: loading a 151,936-token vocab makes ~50 MiB of small heap blocks
// (strings, map nodes). Once a release has returned them to the OS (heap.h),
// the next load faults every 4 KiB page in again: ~12,800 faults, ~10 us each
// on the VM this was measured on, which made a load-free cycle 1.6x raw
// llama.cpp's (bench/cycles). Pre-faulting them (MADV_POPULATE_WRITE) saved
// only half, since the hypervisor still pays on first touch of each page. In
// 2 MiB pages the same blocks take 25 faults. The glibc heap as a whole was
// not given huge pages (heap.h): there the load's blocks share pages with
// long-lived ones, so a release could not be checked to the byte. Here the
// region holds only the burst's blocks, and it is unmapped when they are all
// gone, so the release is exact.
//
// While an ArenaWindow is open on a thread, that thread's operator new takes
// blocks from the window's arena; blocks of any thread are freed there by
// operator delete, which looks the address up. Blocks freed while the window
// is open are reused by it; after it closes (sealed), frees only count down,
// and the last one unmaps the region. If blocks outlive what they were made
// for, trim() gives back every page without a live block, as malloc_trim does
// for the glibc heap, so what stays is only what is still in use.
//
// Off with RECLAIM_LOAD_ARENA=0; aligned and very large requests, and any
// request once the region is full, go to malloc as before.
#pragma once

#include <cstddef>
#include <cstdint>

namespace reclaim {

class ArenaWindow {
 public:
  ArenaWindow() noexcept;
  ~ArenaWindow();
  ArenaWindow(const ArenaWindow&) = delete;
  ArenaWindow& operator=(const ArenaWindow&) = delete;

  // Whether an arena was mapped (not when off, or when mmap failed).
  bool open() const { return slot_ >= 0; }

 private:
  int slot_ = -1;
  int outer_ = -1;  // a window already open on this thread, resumed after this one
};

namespace arena {

// Blocks this large or larger start on a cache line, in a window and out of
// one (core/new_delete.cpp). glibc's are 16 bytes past one, and ggml's CPU
// backend takes its work buffer, where flash attention keeps each thread's
// tiles, from new[]: its 64-byte vector loads then each span two lines. With
// the buffer 16 bytes past a line, 1,528 uncached prompt tokens took 1,117 ms
// to decode against llama-server's 1,025, and with it on a line 1,025 (spm
// test model, 2 threads; `build/bin/bench-chat --whole 3` prints both sides;
// llama-server's own buffer lands on a line or off one by its heap's chance).
inline constexpr size_t kLineAlignedFrom = size_t{64} << 10;
inline constexpr size_t kLine = 64;

// From this thread's open window, or null.
void* allocate(size_t bytes) noexcept;
// False when `p` is not an arena block.
bool deallocate(void* p) noexcept;

struct Stats {
  uint64_t mapped = 0;  // bytes of regions handed out so far (resident or not)
  uint64_t in_use = 0;  // bytes of live blocks, headers included
  int arenas = 0;       // regions still mapped
};
Stats stats() noexcept;

// Gives back the pages of sealed arenas that hold no live block.
void trim() noexcept;

}  // namespace arena
}  // namespace reclaim
