#include "core/stack_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "core/usage.h"
#include "sanitized.h"

namespace {

using reclaim::StackThread;
using reclaim::Usage;

// Touches `bytes` of stack below the caller, then returns.
__attribute__((noinline)) void touch_stack(size_t bytes) {
  char* p = static_cast<char*>(__builtin_alloca(bytes));
  std::memset(p, 1, bytes);
  asm volatile("" : : "r"(p) : "memory");
}

TEST(StackThread, ItsStackGoesWhenItIsJoined) {
  {
    // TSan starts a thread of its own with the first thread of a process.
    StackThread first;
    first.start([] {});
  }
  const Usage before = Usage::capture();
  {
    StackThread t;
    t.start([] { touch_stack(2 << 20); });
    t.join();
  }
  const Usage after = Usage::capture();
  EXPECT_EQ(after.threads, before.threads);
  // A sanitizer maps its own per-thread state, and keeps it.
  if (!reclaim::testing::sanitized()) {
    EXPECT_EQ(after.maps, before.maps);
    EXPECT_LT(after.anon - before.anon, 256 << 10);
  }
}

TEST(StackThread, ATrimGivesBackThePagesBelowTheCaller) {
  if (reclaim::testing::sanitized()) GTEST_SKIP() << "a sanitizer's stacks and shadow are in the figures (under TSan the thread runs on glibc's stack)";
  int64_t touched = 0, trimmed = 0;
  StackThread t;
  t.start([&] {
    const int64_t start = Usage::capture().anon;
    touch_stack(4 << 20);
    touched = Usage::capture().anon - start;
    StackThread::trim_own_stack();
    trimmed = Usage::capture().anon - start;
  });
  t.join();
  EXPECT_GT(touched, 3 << 20);
  EXPECT_LT(trimmed, 256 << 10);
}

TEST(StackThread, MovedItStillJoinsOnce) {
  std::atomic<int> runs{0};
  StackThread a;
  a.start([&] { ++runs; });
  StackThread b = std::move(a);
  EXPECT_FALSE(a.joinable());
  EXPECT_TRUE(b.joinable());
  b.join();
  b.join();
  EXPECT_EQ(runs.load(), 1);
}

}  // namespace
