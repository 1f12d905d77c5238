// Giving freed heap back to the OS.
//
// glibc keeps freed memory in its arenas: after a model with a 151,936-token
// vocab is freed, tens of MiB of anon RSS stay resident (measured by
// `reclaim audit --compare-raw`) because the vocab's many small blocks leave
// the heap fragmented and its top never falls under M_TRIM_THRESHOLD.
// malloc_trim(0) walks every arena and madvises away each free page, wherever
// it lies, which is what brings anon RSS back to its baseline.
//
// glibc's per-thread cache (tcache) keeps up to 7 freed blocks of each small
// size outside the heap's free lists, where malloc_trim cannot see them; each
// pins its page. Measured with `reclaim audit` on a 32k-vocab model over 20
// load-prompt-free cycles: anon residue grows 180 -> 300 KiB with it, stays at
// 68 KiB without it, and cycle time does not change.
//
// arena_max=1 keeps every thread on the main heap: glibc gives a thread that
// allocates its own arena, a 64 MiB reserved mapping that is never unmapped,
// and that malloc_trim can shrink but not remove. With the cache off, one
// lock is all that threads contend on, and ggml's workers hardly allocate.
//
// Giving the heap back has a price, paid at the next load, which faults every
// page in again: ~10 us a 4 KiB page on the VM where this was measured, so a
// load-free cycle of the 300 MiB bpe model took 1.6x raw llama.cpp's, which
// keeps its heap. Transparent huge pages for the whole heap
// (glibc.malloc.hugetlb=1) were rejected: with 2 MiB pages shared between a
// load's blocks and long-lived ones, the residue after a release swung
// between -1.2 and +1.4 MiB from run to run. What a load and a context make
// goes instead to an arena of huge pages of its own (core/arena.h), which
// holds nothing else and is unmapped with them.
//
// Tunables are read only when a process starts, so the CLI re-executes itself
// once with them in GLIBC_TUNABLES; a program that links libreclaim sets them
// in its own environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace reclaim {

struct HeapStats {
  uint64_t arena = 0;    // bytes obtained from the OS (brk + mmap'd arenas + large mmaps)
  uint64_t in_use = 0;   // bytes in allocated blocks
  uint64_t free = 0;     // bytes in free blocks the allocator keeps
};

HeapStats heap_stats();

// Blocks mapped outside the allocator for themselves (engine/ggml_buffers.cpp)
// count in heap_stats() as allocated, as glibc's own large mmaps do.
void note_direct_mapping(int64_t delta_bytes) noexcept;

// Returns freed heap to the OS; a no-op where the allocator is not glibc's.
// Off when RECLAIM_HEAP_RELEASE=none, so its effect can be measured.
void release_free_heap();

// release_free_heap() when `heap_free` (Usage::heap_free) is more than the
// audit's anon threshold (core/thresholds.h); true if it did, and the
// figures it was given are then out of date. A load raises glibc's trim
// threshold, so what requests free after it stays otherwise: after a load
// and unload with the dashboard open, 3.1 MiB of free heap kept anon 1.4 MiB
// over the start with 27 KiB in use (GET /v1/resources: residue.heap_free
// and heap_in_use).
bool give_back_free_heap(int64_t heap_free);

// Re-executes this program with the allocator tunables above unless they are
// already set (or RECLAIM_NO_REEXEC=1). Returns only when no re-exec happened.
void reexec_with_heap_tunables(char** argv);
// The environment as it was before reexec_with_heap_tunables, for a child
// that must run as a plain program would (the audit's raw side).
std::vector<std::string> original_environment();

}  // namespace reclaim
