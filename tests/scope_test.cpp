#include "core/scope.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/heap.h"
#include "core/ledger.h"
#include "core/usage.h"

using namespace reclaim;

TEST(Scope, RunsCleanupsNewestFirst) {
  Ledger ledger;
  std::vector<int> order;
  {
    Scope s("s", {}, &ledger);
    for (int i = 0; i < 4; ++i) s.add(Kind::other, "c" + std::to_string(i), 0, [&order, i] { order.push_back(i); });
    EXPECT_EQ(ledger.totals().count, 4u);
  }
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(Scope, ClosesChildrenBeforeItsOwnCleanups) {
  Ledger ledger;
  std::vector<std::string> order;
  Scope parent("model:m", {}, &ledger);
  parent.add(Kind::model, "weights", 100, [&] { order.push_back("model"); });
  Scope a(parent, "request:1");
  a.add(Kind::context, "ctx1", 10, [&] { order.push_back("ctx1"); });
  Scope b(parent, "request:2");
  b.add(Kind::context, "ctx2", 10, [&] { order.push_back("ctx2"); });
  Scope grandchild(b, "step");
  grandchild.add(Kind::batch, "batch", 1, [&] { order.push_back("batch"); });
  EXPECT_EQ(parent.live_children(), 2u);
  parent.close();
  EXPECT_EQ(order, (std::vector<std::string>{"batch", "ctx2", "ctx1", "model"}));
  EXPECT_TRUE(a.closed());
  EXPECT_TRUE(b.closed());
  EXPECT_TRUE(grandchild.closed());
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(Scope, ChildClosedFirstLeavesItsParent) {
  Ledger ledger;
  Scope parent("p", {}, &ledger);
  {
    Scope child(parent, "c");
    EXPECT_EQ(parent.live_children(), 1u);
  }
  EXPECT_EQ(parent.live_children(), 0u);
}

TEST(Scope, OwnerPathJoinsNames) {
  Ledger ledger;
  Scope model("model:mid", {}, &ledger);
  Scope request(model, "request:42");
  request.add(Kind::context, "ctx", 5, [] {});
  auto entries = ledger.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].owner, "model:mid/request:42");
  EXPECT_EQ(entries[0].kind, Kind::context);
  EXPECT_EQ(entries[0].bytes, 5u);
}

TEST(Scope, ClosesOnExceptionUnwinding) {
  Ledger ledger;
  bool released = false;
  try {
    Scope s("s", {}, &ledger);
    s.add(Kind::other, "x", 0, [&] { released = true; });
    throw std::runtime_error("request failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(released);
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(Scope, ThrowingCleanupDoesNotStopTheOthers) {
  Ledger ledger;
  std::vector<int> ran;
  Scope s("s", {}, &ledger);
  s.add(Kind::other, "first", 0, [&] { ran.push_back(1); });
  s.add(Kind::buffer, "bad", 0, [&] {
    ran.push_back(2);
    throw std::runtime_error("device lost");
  });
  s.add(Kind::other, "third", 0, [&] { ran.push_back(3); });
  s.close();
  EXPECT_EQ(ran, (std::vector<int>{3, 2, 1}));
  ASSERT_EQ(s.errors().size(), 1u);
  EXPECT_NE(s.errors()[0].find("device lost"), std::string::npos);
  EXPECT_NE(s.errors()[0].find("bad"), std::string::npos);
  EXPECT_EQ(ledger.failed_releases(), 1u);
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(Scope, CloseIsIdempotent) {
  Ledger ledger;
  int runs = 0;
  Scope s("s", {}, &ledger);
  s.add(Kind::other, "x", 0, [&] { ++runs; });
  s.close();
  s.close();
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(s.closed());
}

TEST(Scope, ClosedScopeRefusesNewResources) {
  Ledger ledger;
  Scope s("model:gone", {}, &ledger);
  s.close();
  EXPECT_THROW(s.add(Kind::other, "late", 0, [] {}), std::logic_error);
  EXPECT_THROW((void)s.reserve(Kind::other, "late"), std::logic_error);
  EXPECT_THROW(Scope(s, "request:late"), std::logic_error);
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(Scope, UnarmedSlotLeavesNothing) {
  Ledger ledger;
  Scope s("s", {}, &ledger);
  try {
    Scope::Slot slot = s.reserve(Kind::model, "m");
    throw std::runtime_error("load failed before the resource existed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(s.live_cleanups(), 0u);
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(Scope, SlotArmPutsResourceOnLedger) {
  Ledger ledger;
  bool freed = false;
  Scope s("s", {}, &ledger);
  Scope::Slot slot = s.reserve(Kind::model, "m");
  EXPECT_EQ(ledger.totals().count, 0u);  // reserved, not yet acquired
  CleanupId id = slot.arm(1234, [&] { freed = true; });
  EXPECT_NE(id, 0u);
  EXPECT_EQ(ledger.totals().bytes, 1234u);
  s.close();
  EXPECT_TRUE(freed);
}

TEST(Scope, ReleaseRunsOneCleanupEarlyAndOnlyOnce) {
  Ledger ledger;
  int a = 0, b = 0;
  Scope s("s", {}, &ledger);
  CleanupId ida = s.add(Kind::other, "a", 0, [&] { ++a; });
  s.add(Kind::other, "b", 0, [&] { ++b; });
  EXPECT_TRUE(s.release(ida));
  EXPECT_EQ(a, 1);
  EXPECT_FALSE(s.release(ida));
  EXPECT_EQ(ledger.totals().count, 1u);
  s.close();
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
}

TEST(Scope, ForgetDropsWithoutRunning) {
  Ledger ledger;
  int runs = 0;
  Scope s("s", {}, &ledger);
  CleanupId id = s.add(Kind::fd, "moved", 0, [&] { ++runs; });
  EXPECT_TRUE(s.forget(id));
  s.close();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(Scope, ResizeUpdatesLedger) {
  Ledger ledger;
  Scope s("s", {}, &ledger);
  CleanupId id = s.add(Kind::buffer, "grows", 10, [] {});
  s.resize(id, 4096);
  EXPECT_EQ(ledger.totals().bytes, 4096u);
}

TEST(Scope, ArmThatCannotRecordReleasesAtOnce) {
  Ledger ledger;
  bool freed = false;
  Scope s("s", {}, &ledger);
  Scope::Slot slot = s.reserve(Kind::model, "m");
  ledger.fail_next_acquires(1);
  EXPECT_THROW(slot.arm(100, [&] { freed = true; }), std::bad_alloc);
  EXPECT_TRUE(freed);
  EXPECT_EQ(s.live_cleanups(), 0u);
  EXPECT_EQ(ledger.totals().count, 0u);
  // The scope still works afterwards.
  s.add(Kind::other, "next", 0, [] {});
  EXPECT_EQ(ledger.totals().count, 1u);
}

TEST(Scope, AddThatCannotRecordReleasesAtOnce) {
  Ledger ledger;
  int freed = 0;
  Scope s("s", {}, &ledger);
  ledger.fail_next_acquires(1);
  EXPECT_THROW(s.add(Kind::fd, "f", 0, [&] { ++freed; }), std::bad_alloc);
  EXPECT_EQ(freed, 1);
  s.close();
  EXPECT_EQ(freed, 1);
}

namespace {

// Many small blocks, touched, as a vocab's strings are; a cleanup frees all
// but every 64th. The survivors split the freed heap into 63 KB holes, too
// small for glibc to give back by itself, as a fragmented heap is after a
// model is freed; only an explicit release returns their pages.
struct Blocks {
  std::vector<char*> blocks;
  void fill() {
    for (int i = 0; i < 16384; ++i) {
      blocks.push_back(new char[1000]);
      std::memset(blocks.back(), 1, 1000);
    }
  }
  void free_most() {
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (i % 64 != 0) {
        delete[] blocks[i];
        blocks[i] = nullptr;
      }
    }
  }
  ~Blocks() {
    for (char* b : blocks) delete[] b;
  }
};

int64_t anon_now() { return Usage::capture().anon; }

}  // namespace

TEST(Scope, HeapReleaseOnCloseReturnsFreedPages) {
  Ledger ledger;
  Blocks kept, released;
  {
    Scope s("no-release", {}, &ledger);
    kept.fill();
    s.add(Kind::buffer, "blocks", 0, [&] { kept.free_most(); });
    const int64_t full = anon_now();
    s.close();
    EXPECT_GT(anon_now(), full - (4 << 20)) << "glibc returned the pages by itself; the test proves nothing";
  }
  release_free_heap();
  const int64_t base = anon_now();
  Scope parent("model:m", ScopeOptions{.release_heap_on_close = true}, &ledger);
  {
    // Only the child held anything: the parent's release must still cover it.
    Scope child(parent, "request:1");
    released.fill();
    child.add(Kind::buffer, "blocks", 0, [&] { released.free_most(); });
    EXPECT_GT(anon_now(), base + (12 << 20));
    parent.close();
  }
  // What stays is the survivors' 256 pages (1 MiB), not the 15 MiB freed around them.
  EXPECT_LT(anon_now(), base + (3 << 20));
}
