#include "core/locked.h"

#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "core/usage.h"

using namespace reclaim;

TEST(Locked, RangesAddedSubtracts) {
  std::vector<AddressRange> before = {{100, 200}, {300, 400}};
  std::vector<AddressRange> after = {{100, 200}, {250, 450}, {500, 600}};
  std::vector<AddressRange> added = ranges_added(before, after);
  std::vector<AddressRange> want = {{250, 300}, {400, 450}, {500, 600}};
  EXPECT_EQ(added, want);
}

// The shape of llama.cpp's bug: a buffer is locked, part of it is unmapped
// before the munlock of the whole range, which then fails and leaves the rest
// locked. unlock_remains must find and unlock what is left.
TEST(Locked, UnlocksWhatAFailedMunlockLeft) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t n = 16 * page;
  auto* p = static_cast<char*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, n);
  std::vector<AddressRange> before = locked_ranges();
  if (::mlock(p, n) != 0) {
    ::munmap(p, n);
    GTEST_SKIP() << "mlock not permitted here";
  }
  std::vector<AddressRange> mine = ranges_added(before, locked_ranges());
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].begin, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(mine[0].end, reinterpret_cast<uintptr_t>(p + n));

  ASSERT_EQ(::munmap(p, 4 * page), 0);
  EXPECT_NE(::munlock(p, n), 0);  // fails on the hole, as llama.cpp's does
  Usage stuck = Usage::capture();
  ASSERT_GE(stuck.locked, static_cast<int64_t>(12 * page));

  EXPECT_EQ(unlock_remains(mine), 12 * page);
  EXPECT_EQ(Usage::capture().locked, stuck.locked - static_cast<int64_t>(12 * page));
  EXPECT_TRUE(ranges_added(before, locked_ranges()).empty());
  ::munmap(p + 4 * page, n - 4 * page);
}
