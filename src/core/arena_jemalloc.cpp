// core/arena.h on jemalloc (RECLAIM_ALLOCATOR=jemalloc), the variant kept to
// measure against the hand-written arena (scripts/bench-allocator): the build links
// jemalloc, which takes malloc itself (so C malloc and aligned new inside
// llama.cpp are routed too), and an ArenaWindow binds its thread to a
// jemalloc arena of its own for the burst. No global operator new here:
// libstdc++'s calls malloc.
//
// Arenas are not destroyed: a block made in a window may outlive the owner
// that opened it (a cache llama.cpp keeps), and freeing it into a destroyed
// arena would corrupt the heap. They are kept in a pool and reused; with
// decay 0 and retain off (malloc_conf below), what a freed block held goes
// back to the OS at once, so an emptied arena keeps no pages.
#include "core/arena.h"

#include <jemalloc/jemalloc.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/env_switch.h"

// Compiled in, in place of glibc's tunables and the re-exec that sets them:
// decay 0 and retain off (freed pages are unmapped at once), no thread cache
// (as glibc's tcache is off), one arena for the threads outside windows.
extern "C" {
const char* malloc_conf = "dirty_decay_ms:0,muzzy_decay_ms:0,retain:false,tcache:false,narenas:1";
}

namespace reclaim {

namespace {

std::mutex g_pool_mu;
std::vector<unsigned> g_pool;  // arenas made for windows, not in use now
int g_in_use = 0;

bool enabled() {
  static const bool on = env_switch_on("RECLAIM_LOAD_ARENA");
  return on;
}

bool take_arena(unsigned& index) {
  {
    std::lock_guard lock(g_pool_mu);
    if (!g_pool.empty()) {
      index = g_pool.back();
      g_pool.pop_back();
      ++g_in_use;
      return true;
    }
  }
  size_t sz = sizeof index;
  if (mallctl("arenas.create", &index, &sz, nullptr, 0) != 0) return false;
  std::lock_guard lock(g_pool_mu);
  ++g_in_use;
  return true;
}

void give_back(unsigned index) {
  const std::string purge = "arena." + std::to_string(index) + ".purge";
  mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
  std::lock_guard lock(g_pool_mu);
  g_pool.push_back(index);
  --g_in_use;
}

unsigned bound_arena() {
  unsigned a = 0;
  size_t sz = sizeof a;
  mallctl("thread.arena", &a, &sz, nullptr, 0);
  return a;
}

void bind(unsigned a) { mallctl("thread.arena", nullptr, nullptr, &a, sizeof a); }

}  // namespace

ArenaWindow::ArenaWindow() noexcept {
  if (!enabled()) return;
  unsigned index = 0;
  if (!take_arena(index)) return;
  outer_ = static_cast<int>(bound_arena());
  bind(index);
  slot_ = static_cast<int>(index);
}

ArenaWindow::~ArenaWindow() {
  if (slot_ < 0) return;
  bind(static_cast<unsigned>(outer_));
  give_back(static_cast<unsigned>(slot_));
}

namespace arena {

void* allocate(size_t) noexcept { return nullptr; }
bool deallocate(void*) noexcept { return false; }

Stats stats() noexcept {
  Stats out;
  std::lock_guard lock(g_pool_mu);
  out.arenas = g_in_use;
  return out;
}

void trim() noexcept {
  const std::string purge = "arena." + std::to_string(MALLCTL_ARENAS_ALL) + ".purge";
  mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
}

}  // namespace arena
}  // namespace reclaim
