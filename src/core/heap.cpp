#include "core/heap.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <unistd.h>

#include "core/arena.h"
#include "core/env_switch.h"
#include "core/thresholds.h"

extern char** environ;

#if defined(RECLAIM_JEMALLOC)
#include <jemalloc/jemalloc.h>
#elif defined(__GLIBC__)
#include <malloc.h>
#endif

namespace reclaim {

namespace {
// RECLAIM_HEAP_RELEASE=none turns the release off, to measure what it does.
bool release_enabled() {
  static const bool on = env_switch_on("RECLAIM_HEAP_RELEASE", "none");
  return on;
}

constexpr const char* kSavedVar = "RECLAIM_ORIGINAL_GLIBC_TUNABLES";

#if !defined(RECLAIM_JEMALLOC)
// See heap.h for why each one.
constexpr const char* kTunables[] = {"glibc.malloc.tcache_count=0", "glibc.malloc.arena_max=1"};

bool heap_tunables_active() {
  const char* t = std::getenv("GLIBC_TUNABLES");
  if (!t) return false;
  for (const char* k : kTunables) {
    if (!std::strstr(t, k)) return false;
  }
  return true;
}
#endif
}  // namespace

namespace {
std::atomic<int64_t> g_direct_mapped{0};
}  // namespace

void note_direct_mapping(int64_t delta) noexcept { g_direct_mapped.fetch_add(delta, std::memory_order_relaxed); }

#if defined(RECLAIM_JEMALLOC)
// jemalloc's own figures (core/arena_jemalloc.cpp): what it has mapped and
// what is allocated, refreshed by advancing its epoch.
HeapStats heap_stats() {
  HeapStats s;
  uint64_t epoch = 1;
  size_t sz = sizeof epoch;
  mallctl("epoch", &epoch, &sz, &epoch, sz);
  size_t mapped = 0, allocated = 0;
  sz = sizeof mapped;
  mallctl("stats.mapped", &mapped, &sz, nullptr, 0);
  mallctl("stats.allocated", &allocated, &sz, nullptr, 0);
  const auto direct = static_cast<uint64_t>(std::max<int64_t>(0, g_direct_mapped.load(std::memory_order_relaxed)));
  s.arena = direct + mapped;
  s.in_use = direct + allocated;
  s.free = mapped > allocated ? mapped - allocated : 0;
  return s;
}

void release_free_heap() {
  if (release_enabled()) arena::trim();
}

void reexec_with_heap_tunables(char**) {}  // malloc_conf is compiled in
#else
HeapStats heap_stats() {
  HeapStats s;
  const auto direct = static_cast<uint64_t>(std::max<int64_t>(0, g_direct_mapped.load(std::memory_order_relaxed)));
  const arena::Stats a = arena::stats();
  s.arena = direct + a.mapped;
  s.in_use = direct + a.in_use;
  s.free = a.mapped - a.in_use;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  s.arena += mi.arena + mi.hblkhd;
  s.in_use += mi.uordblks + mi.hblkhd;
  s.free += mi.fordblks;
#endif
  return s;
}

void release_free_heap() {
#if defined(__GLIBC__)
  if (release_enabled()) {
    malloc_trim(0);
    arena::trim();
  }
#endif
}

void reexec_with_heap_tunables(char** argv) {
#if defined(__GLIBC__)
  if (heap_tunables_active()) return;
  if (!env_switch_on("RECLAIM_NO_REEXEC", "1")) return;  // RECLAIM_NO_REEXEC=1
  const char* old = std::getenv("GLIBC_TUNABLES");
  std::string value = old && *old ? old : "";
  for (const char* k : kTunables) {
    if (!value.empty()) value += ":";
    value += k;
  }
  // "-" marks "was unset", so that the raw side can be given exactly that.
  ::setenv(kSavedVar, old ? old : "-", 1);
  ::setenv("GLIBC_TUNABLES", value.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // exec failed: run on with glibc's defaults, undoing the change.
  if (old) ::setenv("GLIBC_TUNABLES", old, 1);
  else ::unsetenv("GLIBC_TUNABLES");
  ::unsetenv(kSavedVar);
#else
  (void)argv;
#endif
}

#endif

std::vector<std::string> original_environment() {
  std::vector<std::string> env;
  const char* saved = std::getenv(kSavedVar);
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    if (saved && kv.substr(0, 15) == "GLIBC_TUNABLES=") continue;
    if (kv.substr(0, std::strlen(kSavedVar) + 1) == std::string(kSavedVar) + "=") continue;
    env.emplace_back(kv);
  }
  if (saved && std::strcmp(saved, "-") != 0) env.push_back(std::string("GLIBC_TUNABLES=") + saved);
  // The raw side must not re-exec either.
  env.push_back("RECLAIM_NO_REEXEC=1");
  return env;
}

bool give_back_free_heap(int64_t heap_free) {
  if (heap_free <= Thresholds{}.anon_residue) return false;
  release_free_heap();
  return true;
}

}  // namespace reclaim
