#include "core/arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/usage.h"

using namespace reclaim;

namespace {

constexpr int64_t kHugePage = 2 << 20;

// This process's anon memory mapped as transparent huge pages.
int64_t anon_huge_pages() {
  std::ifstream f("/proc/self/smaps_rollup");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14)) * 1024;
  }
  return 0;
}

}  // namespace

TEST(Arena, NewOutsideAWindowIsPlainHeap) {
  const arena::Stats before = arena::stats();
  auto p = std::make_unique<std::string>(1000, 'x');
  const arena::Stats during = arena::stats();
  EXPECT_EQ(during.arenas, before.arenas);
  EXPECT_EQ(during.in_use, before.in_use);
}

TEST(Arena, BlocksOfAWindowAreGivenBackWholeWithTheLastFree) {
  std::vector<std::string*> strings;
  strings.reserve(20000);  // before the baseline: glibc maps a block this large for itself
  const Usage base = Usage::capture();
  const arena::Stats before = arena::stats();
  bool open = false;
  {
    ArenaWindow window;
    open = window.open();
    for (int i = 0; i < 20000; ++i) strings.push_back(new std::string(200, static_cast<char>('a' + i % 26)));
  }
  ASSERT_TRUE(open);
  const arena::Stats during = arena::stats();
  EXPECT_EQ(during.arenas, before.arenas + 1);
  // 20,000 strings of 200 bytes and their objects, headers included.
  EXPECT_GE(during.in_use - before.in_use, 20000u * (200 + 32));
  for (int i = 0; i < 20000; ++i) {
    ASSERT_EQ(strings[static_cast<size_t>(i)]->size(), 200u);
    ASSERT_EQ((*strings[static_cast<size_t>(i)])[199], static_cast<char>('a' + i % 26));
  }
  for (std::string* s : strings) delete s;
  const arena::Stats after = arena::stats();
  EXPECT_EQ(after.arenas, before.arenas);
  EXPECT_EQ(after.in_use, before.in_use);
  // The region is unmapped, not merely emptied.
  EXPECT_EQ(Usage::capture().maps, base.maps);
}

TEST(Arena, AWindowReusesWhatItFreedAndKeepsBlocksAligned) {
  void* first = nullptr;
  void* again = nullptr;
  std::vector<void*> sizes;
  sizes.reserve(16);
  {
    ArenaWindow window;
    first = ::operator new(48);
    ::operator delete(first);
    again = ::operator new(48);
    for (size_t n : {1u, 15u, 17u, 1000u, 1025u, 5000u, 65536u, 70000u, 3u << 20}) sizes.push_back(::operator new(n));
  }
  EXPECT_EQ(first, again);
  for (void* p : sizes) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
  // From 64 KiB on, a block starts on a cache line (arena.h says why).
  for (size_t i = 6; i < sizes.size(); ++i) EXPECT_EQ(reinterpret_cast<uintptr_t>(sizes[i]) % 64, 0u) << i;
  ::operator delete(again);
  for (void* p : sizes) ::operator delete(p);
  EXPECT_EQ(arena::stats().arenas, 0);
}

TEST(Arena, LargeBlocksOutsideAWindowStartOnACacheLine) {
  // ggml's CPU work buffer is a new[] of this kind, made at a context's
  // first decode, outside any window.
  std::vector<void*> blocks;
  for (size_t n : {size_t{64} << 10, size_t{200} << 10, size_t{3} << 20, size_t{300} << 20}) {
    void* p = ::operator new[](n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    blocks.push_back(p);
  }
  for (void* p : blocks) ::operator delete[](p);
}

TEST(Arena, LargeBlocksFreedInTheWindowAreReusedFirstFit) {
  void* a = nullptr;
  void* b = nullptr;
  {
    ArenaWindow window;
    a = ::operator new(1 << 20);
    ::operator delete(a);
    b = ::operator new((1 << 20) - 4096);  // fits, wastes under half
  }
  EXPECT_EQ(a, b);
  ::operator delete(b);
}

TEST(Arena, SmallBlocksAreCutFromAFreedLargeOne) {
  std::vector<void*> small;
  small.reserve(1000);
  uintptr_t large = 0;
  {
    ArenaWindow window;
    void* p = ::operator new(1 << 20);
    large = reinterpret_cast<uintptr_t>(p);
    ::operator delete(p);
    for (int i = 0; i < 1000; ++i) small.push_back(::operator new(100));
  }
  // 1,000 blocks of 100 bytes fit in the freed MiB: none from fresh pages.
  for (void* p : small) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    EXPECT_TRUE(a >= large && a + 100 <= large + (1 << 20)) << std::hex << a << " outside " << large;
    EXPECT_EQ(a % 16, 0u);
  }
  for (void* p : small) ::operator delete(p);
  EXPECT_EQ(arena::stats().arenas, 0);
}

TEST(Arena, TheLastFreeOnAnotherThreadUnmapsIt) {
  const int arenas = arena::stats().arenas;
  std::vector<int>* v = nullptr;
  {
    ArenaWindow window;
    v = new std::vector<int>(100000, 7);
  }
  EXPECT_EQ(arena::stats().arenas, arenas + 1);
  std::thread([v] { delete v; }).join();
  EXPECT_EQ(arena::stats().arenas, arenas);
}

// The window's thread counts its own news and deletes without atomics;
// frees from other threads while it is open count apart. Both must add up:
// a page that another thread emptied is trimmed, one it did not is kept, and
// the region stays mapped until the last block of either kind is gone.
TEST(Arena, FreesFromOtherThreadsWhileTheWindowIsOpenAddUp) {
  std::vector<char*> blocks;
  blocks.reserve(4096);
  // glibc keeps a joined thread's stack, and its malloc arena, mapped for
  // the next thread: made before the baseline.
  std::thread([] { delete new int(1); }).join();
  const Usage base = Usage::capture();
  const arena::Stats before = arena::stats();
  char* kept_by_owner = nullptr;
  {
    ArenaWindow window;
    ASSERT_TRUE(window.open());
    for (int i = 0; i < 4096; ++i) {
      char* p = new char[4000];
      std::memset(p, 2, 4000);
      blocks.push_back(p);
    }
    // Another thread frees all but the last, in the window's life.
    std::thread([&] {
      for (size_t i = 0; i + 1 < blocks.size(); ++i) delete[] blocks[i];
    }).join();
    EXPECT_EQ(arena::stats().arenas, before.arenas + 1);
    kept_by_owner = new char[100];
    kept_by_owner[99] = 3;
  }
  const Usage kept = Usage::capture();
  // Of 16 MiB, what is left are the (huge) pages of the counts and of the
  // two live blocks.
  EXPECT_LT(kept.anon - base.anon, 2 * kHugePage + (512 << 10)) << "anon " << kept.anon - base.anon;
  EXPECT_EQ(blocks.back()[3999], 2);
  EXPECT_EQ(kept_by_owner[99], 3);
  std::thread([&] { delete[] blocks.back(); }).join();
  EXPECT_EQ(arena::stats().arenas, before.arenas + 1);
  delete[] kept_by_owner;
  EXPECT_EQ(arena::stats().arenas, before.arenas);
  EXPECT_EQ(arena::stats().in_use, before.in_use);
  EXPECT_EQ(Usage::capture().maps, base.maps);
}

TEST(Arena, PagesWithoutALiveBlockAreGivenBackWhenTheWindowCloses) {
  std::vector<char*> blocks;
  blocks.reserve(8192);
  const Usage base = Usage::capture();
  const int64_t huge_base = anon_huge_pages();
  int64_t huge_open = 0;
  {
    ArenaWindow window;
    // 32 MiB, touched, then all freed but one at the start: a load's
    // parsed metadata that goes before the load ends.
    for (int i = 0; i < 8192; ++i) {
      char* p = new char[4000];
      std::memset(p, 1, 4000);
      blocks.push_back(p);
    }
    huge_open = anon_huge_pages();
    for (size_t i = 1; i < blocks.size(); ++i) delete[] blocks[i];
  }
  const Usage kept = Usage::capture();
  // The huge page of the one live block (and of the counts) stays; the
  // 32 MiB are not resident.
  EXPECT_LT(kept.anon - base.anon, kHugePage + (512 << 10)) << "anon " << kept.anon - base.anon;
  if (huge_open - huge_base >= kHugePage) {
    // It stays whole: a huge page cut into is split into 4 KiB pages, and
    // what lives on them is walked much slower.
    EXPECT_GE(anon_huge_pages() - huge_base, kHugePage);
  }
  EXPECT_EQ(arena::stats().arenas, 1);
  EXPECT_EQ(blocks[0][3999], 1);
  delete[] blocks[0];
  EXPECT_EQ(arena::stats().arenas, 0);
  EXPECT_EQ(Usage::capture().maps, base.maps);
}

TEST(Arena, NestedWindowsHaveArenasOfTheirOwn) {
  void* outer_before = nullptr;
  void* inner = nullptr;
  void* outer_after = nullptr;
  {
    ArenaWindow outer;
    outer_before = ::operator new(64);
    {
      ArenaWindow nested;
      inner = ::operator new(64);
      EXPECT_EQ(arena::stats().arenas, 2);
    }
    outer_after = ::operator new(64);
  }
  // The outer window took its blocks from one arena before and after the
  // inner one, which got another.
  const auto dist = [](void* a, void* b) {
    const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return x > y ? x - y : y - x;
  };
  EXPECT_LT(dist(outer_before, outer_after), uintptr_t{1} << 20);
  EXPECT_GT(dist(outer_before, inner), uintptr_t{1} << 20);
  ::operator delete(inner);
  EXPECT_EQ(arena::stats().arenas, 1);
  ::operator delete(outer_before);
  ::operator delete(outer_after);
  EXPECT_EQ(arena::stats().arenas, 0);
}

// The kernel hands a region's addresses to the next mmap as soon as they are
// unmapped: two threads that each map, fill and empty regions again and again
// get each other's addresses back. A free must find the region mapped there
// now, never a slot that still names the old one, or that region's count is
// never brought to zero and it stays mapped.
TEST(Arena, RegionsMappedAgainAtTheSameAddressAreEachGivenBack) {
  ASSERT_EQ(arena::stats().arenas, 0);
  auto churn = [] {
    for (int i = 0; i < 20000; ++i) {
      void* blocks[4];
      {
        ArenaWindow window;
        if (!window.open()) continue;
        for (void*& b : blocks) b = ::operator new(256);
      }
      for (void* b : blocks) ::operator delete(b);
    }
  };
  std::thread a(churn), b(churn), c(churn);
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(arena::stats().arenas, 0);
}
