#include "core/scoped_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "core/ledger.h"

using namespace reclaim;

namespace {

// A body that waits until woken, as the owners' threads do.
struct Sleeper {
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::atomic<bool> returned{false};
  void body() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return stopping; });
    returned = true;
  }
  void wake() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
  }
  void start_on(ScopedThread& t, Scope& scope) {
    t.start(scope, "sleeper", [this] { body(); }, [this] { wake(); });
  }
};

}  // namespace

TEST(ScopedThread, IsOnTheLedgerWhileItRunsAndStopWakesAndJoinsIt) {
  Ledger ledger;
  Scope scope("owner", {}, &ledger);
  Sleeper s;
  ScopedThread t;
  s.start_on(t, scope);
  ASSERT_EQ(ledger.totals().count, 1u);
  EXPECT_EQ(ledger.entries().at(0).kind, Kind::thread);
  EXPECT_EQ(ledger.entries().at(0).label, "sleeper");
  EXPECT_FALSE(s.returned);
  t.stop();
  EXPECT_TRUE(s.returned);  // joined: the body has returned
  EXPECT_EQ(ledger.totals().count, 0u);
  t.stop();  // once is enough
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(ScopedThread, TheScopesCloseStopsItAndItsDestructorThenDoesNothing) {
  Ledger ledger;
  Sleeper s;
  ScopedThread t;  // outlives the scope
  {
    Scope scope("owner", {}, &ledger);
    s.start_on(t, scope);
    EXPECT_EQ(ledger.totals().count, 1u);
  }
  EXPECT_TRUE(s.returned);
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(ScopedThread, ItsDestructorStopsItFirst) {
  Ledger ledger;
  Scope scope("owner", {}, &ledger);
  Sleeper s;
  {
    ScopedThread t;
    s.start_on(t, scope);
  }
  EXPECT_TRUE(s.returned);
  EXPECT_EQ(ledger.totals().count, 0u);
  EXPECT_EQ(scope.live_cleanups(), 0u);
}
