// The replaceable global operator new and delete ([new.delete]) that route a
// thread's allocations into its open ArenaWindow (core/arena.h). Linked into
// the executables that want it (the CLI, the benchmarks, the engine tests),
// not into libreclaim: a program that links the library keeps its own
// operator new, and its windows stay closed. Otherwise they do what
// libstdc++'s do, with malloc.
#include <cstdlib>
#include <new>

#include "core/arena.h"

extern "C" {
// Tells core/arena.cpp that windows are filled (a weak reference there).
extern const int reclaim_new_routes_to_arenas;
const int reclaim_new_routes_to_arenas = 1;
}

namespace {
void* allocate_or_throw(std::size_t n) {
  if (void* p = reclaim::arena::allocate(n)) return p;
  for (;;) {
    // Large blocks on a cache line, as the arena's are (core/arena.h).
    void* p = n >= reclaim::arena::kLineAlignedFrom
                  ? std::aligned_alloc(reclaim::arena::kLine, (n + reclaim::arena::kLine - 1) & ~(reclaim::arena::kLine - 1))
                  : std::malloc(n ? n : 1);
    if (p) return p;
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
