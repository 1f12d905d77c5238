// The registry's scheduling across models, with real loads: the four
// behaviours llama-server's router tests name (tools/server/tests/unit/
// test_router.py at the pinned commit), and the bounds on a wait.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "core/ledger.h"
#include "runtime/registry.h"
#include "small_models.h"
#include "temp_path.h"

using namespace reclaim;
using reclaim::testing::small_model;
using namespace std::chrono_literals;

namespace {

const std::string& copy_of_spm(const std::string& name) {
  static std::map<std::string, std::string> made;
  auto it = made.find(name);
  if (it != made.end()) return it->second;
  std::string to = reclaim::testing::temp_path("sched-" + name + ".gguf");
  std::filesystem::copy_file(small_model("spm"), to, std::filesystem::copy_options::overwrite_existing);
  return made.emplace(name, to).first->second;
}

std::vector<ModelSpec> models() {
  return {{"a", copy_of_spm("a")}, {"b", copy_of_spm("b")}, {"c", copy_of_spm("c")}};
}

RegistryOptions options(int max_loaded) {
  RegistryOptions o;
  o.keep_alive = -1ms;  // only the scheduler unloads
  o.max_loaded = max_loaded;
  o.session.n_ctx = 64;
  o.session.n_batch = 32;
  return o;
}

// Waits on a condition, with a bound no healthy run comes near.
template <class F>
bool eventually(F&& f) {
  const auto end = std::chrono::steady_clock::now() + 60s;
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

uint64_t live() { return Ledger::process().totals().count; }

}  // namespace

TEST(Scheduling, AQueuedRequestNeverEvictsAModelServingOne) {
  const uint64_t before = live();
  {
    Registry reg(options(1), models());
    Lease busy = reg.acquire("a");
    auto queued = std::async(std::launch::async, [&] { return reg.acquire("b"); });
    ASSERT_TRUE(eventually([&] { return reg.status("b").queued == 1 && reg.status("a").draining; }));
    // a stops admitting: a new request for it waits behind b.
    EXPECT_FALSE(reg.acquire("a", std::nullopt, Wait{.no_wait = true}));
    EXPECT_EQ(reg.status("a").state, ModelState::loaded);
    EXPECT_FALSE(busy.cancel_token().cancelled()) << "the serving request was cancelled";
    EXPECT_EQ(queued.wait_for(200ms), std::future_status::timeout) << "b loaded while a was serving";
    busy.release();
    Lease b = queued.get();
    EXPECT_EQ(reg.status("a").state, ModelState::unloaded);
    EXPECT_EQ(reg.status("b").state, ModelState::loaded);
    const SchedulerStats s = reg.scheduler();
    EXPECT_EQ(s.drains, 1u);
    EXPECT_EQ(s.evictions, 1u);
    EXPECT_EQ(s.waiting, 0);
    EXPECT_GE(s.waits, 1u);
    EXPECT_GT(s.wait_seconds, 0.1);
    // b's wait says it was a drain, and how long it took (a served for at
    // least the 200 ms above).
    EXPECT_EQ(reg.status("b").last_room, "drained");
    EXPECT_GT(reg.status("b").last_room_wait_s, 0.2);
    EXPECT_EQ(s.room_loads[static_cast<int>(RoomHow::drained)], 1u);
    EXPECT_GT(s.room_wait_seconds[static_cast<int>(RoomHow::drained)], 0.2);
  }
  EXPECT_EQ(live(), before);
}

TEST(Scheduling, AWaitSaysWhetherItsModelLoadedBesideTheOthersOrAfterAnEviction) {
  const uint64_t before = live();
  {
    // Room for both: b loads at once beside a busy a, whose request goes on.
    Registry reg(options(2), models());
    Lease a = reg.acquire("a");
    Lease b = reg.acquire("b");
    EXPECT_EQ(reg.status("a").last_room, "beside");
    EXPECT_EQ(reg.status("b").last_room, "beside");
    EXPECT_FALSE(reg.status("a").draining);
    EXPECT_FALSE(a.cancel_token().cancelled());
    // No room for c: the idle one of the two goes, at once.
    b.release();
    Lease c = reg.acquire("c");
    EXPECT_EQ(reg.status("c").last_room, "evicted");
    EXPECT_EQ(reg.status("b").state, ModelState::unloaded);
    EXPECT_EQ(reg.status("a").state, ModelState::loaded);
    const SchedulerStats s = reg.scheduler();
    EXPECT_EQ(s.room_loads[static_cast<int>(RoomHow::beside)], 2u);
    EXPECT_EQ(s.room_loads[static_cast<int>(RoomHow::evicted)], 1u);
    EXPECT_EQ(s.room_loads[static_cast<int>(RoomHow::drained)], 0u);
  }
  EXPECT_EQ(live(), before);
}

TEST(Scheduling, RequestsForTheSameMissingModelShareOnePlace) {
  Registry reg(options(2), models());
  Lease a = reg.acquire("a");
  Lease b = reg.acquire("b");
  std::vector<std::future<Lease>> waiters;
  for (int i = 0; i < 3; ++i) waiters.push_back(std::async(std::launch::async, [&] { return reg.acquire("c"); }));
  ASSERT_TRUE(eventually([&] { return reg.status("c").queued == 3 && (reg.status("a").draining || reg.status("b").draining); }));
  // One place for three requests: one model is drained for them, not three.
  EXPECT_EQ(reg.scheduler().line, std::vector<std::string>{"c"});
  EXPECT_EQ(reg.status("c").line_position, 1);
  EXPECT_EQ(int(reg.status("a").draining) + int(reg.status("b").draining), 1);
  a.release();
  b.release();
  for (auto& w : waiters) EXPECT_TRUE(w.get());
  EXPECT_EQ(reg.status("c").loads, 1u);
  const int loaded = int(reg.status("a").state == ModelState::loaded) + int(reg.status("b").state == ModelState::loaded);
  EXPECT_EQ(loaded, 1) << "a second model was given up for the same place";
  EXPECT_EQ(reg.scheduler().evictions, 1u);
  EXPECT_TRUE(reg.scheduler().line.empty());
}

TEST(Scheduling, AClientThatLeavesWhileQueuedCostsNoModelItsPlace) {
  Registry reg(options(1), models());
  Lease busy = reg.acquire("a");
  std::atomic<bool> there{true};
  Wait w;
  w.still_wanted = [&] { return there.load(); };
  w.poll = 10ms;
  auto queued = std::async(std::launch::async, [&] { return reg.acquire("b", std::nullopt, w); });
  ASSERT_TRUE(eventually([&] { return reg.status("a").draining; }));
  there = false;
  EXPECT_THROW(queued.get(), ClientGone);
  EXPECT_FALSE(reg.status("a").draining) << "a still refuses requests for a client that left";
  EXPECT_TRUE(reg.scheduler().line.empty());
  EXPECT_EQ(reg.scheduler().gone, 1u);
  EXPECT_EQ(reg.status("b").queued, 0);
  // a admits again at once, and stays when its request ends.
  Lease again = reg.acquire("a", std::nullopt, Wait{.no_wait = true});
  EXPECT_TRUE(again);
  again.release();
  busy.release();
  EXPECT_EQ(reg.status("a").state, ModelState::loaded);
  EXPECT_EQ(reg.status("b").state, ModelState::unloaded);
  EXPECT_EQ(reg.status("b").loads, 0u);
}

TEST(Scheduling, TheLineIsServedFirstInFirstOut) {
  Registry reg(options(1), models());
  Lease busy = reg.acquire("a");
  std::mutex mu;
  std::vector<std::string> order;
  auto request = [&](const std::string& name) {
    Lease l = reg.acquire(name);
    {
      std::lock_guard lock(mu);
      order.push_back(name);
    }
    return l;
  };
  auto first = std::async(std::launch::async, request, "b");
  ASSERT_TRUE(eventually([&] { return reg.status("b").line_position == 1; }));
  auto second = std::async(std::launch::async, request, "c");
  ASSERT_TRUE(eventually([&] { return reg.status("c").line_position == 2; }));
  busy.release();
  Lease b = first.get();
  // c waits for b's request, which it does not cut short.
  ASSERT_TRUE(eventually([&] { return reg.status("b").draining; }));
  EXPECT_EQ(second.wait_for(100ms), std::future_status::timeout);
  b.release();
  Lease c = second.get();
  EXPECT_EQ(order, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(reg.status("b").state, ModelState::unloaded);
}

TEST(Scheduling, TwoBusyModelsTakeTurnsAndNeitherStarves) {
  Registry reg(options(1), models());
  Lease a1 = reg.acquire("a");
  auto b1 = std::async(std::launch::async, [&] { return reg.acquire("b"); });
  ASSERT_TRUE(eventually([&] { return reg.status("a").draining; }));
  // A new request for a, which is draining, takes a's place behind b.
  auto a2 = std::async(std::launch::async, [&] { return reg.acquire("a"); });
  ASSERT_TRUE(eventually([&] { return reg.status("a").line_position == 2; }));
  a1.release();
  Lease b = b1.get();
  ASSERT_TRUE(eventually([&] { return reg.status("b").draining; }));
  b.release();
  EXPECT_TRUE(a2.get());
  EXPECT_EQ(reg.status("a").loads, 2u);
  EXPECT_EQ(reg.status("b").loads, 1u);
}

TEST(Scheduling, AWaitEndsAtTheQueueTimeoutAndADrainAtTheDrainTimeout) {
  RegistryOptions o = options(1);
  o.queue_timeout = 300ms;
  Registry reg(o, models());
  {
    Lease busy = reg.acquire("a");
    try {
      reg.acquire("b");
      FAIL() << "no timeout";
    } catch (const QueueTimeout& e) {
      EXPECT_NE(std::string(e.what()).find("model 'b'"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(reg.status("a").draining);
    EXPECT_EQ(reg.scheduler().timeouts, 1u);
  }
  RegistryOptions d = options(1);
  d.drain_timeout = 200ms;
  Registry drained(d, models());
  Lease busy = drained.acquire("a");
  auto queued = std::async(std::launch::async, [&] { return drained.acquire("b"); });
  // Past the drain timeout the serving request is told to stop; b loads
  // once it has.
  ASSERT_TRUE(eventually([&] { return busy.cancel_token().cancelled(); }));
  busy.release();
  EXPECT_TRUE(queued.get());
}

TEST(Scheduling, BeyondParallelAndMaxQueueRequestsAreRefusedAtOnce) {
  RegistryOptions o = options(1);
  o.max_running = 1;
  o.max_queue = 2;
  Registry reg(o, models());
  Lease busy = reg.acquire("a");
  // b has no request running: one for its slot and two more may wait.
  std::vector<std::future<bool>> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] { return bool(reg.acquire("b")); }));
  }
  ASSERT_TRUE(eventually([&] { return reg.status("b").queued == 3; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(reg.acquire("b"), QueueFull);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  busy.release();
  // They run one at a time: each takes the slot when the last lets it go.
  for (auto& w : waiters) EXPECT_TRUE(w.get());
  EXPECT_EQ(reg.status("b").queued, 0);
}

TEST(Scheduling, ABusyModelKeepsItsTurnForMinServeAfterItsLoad) {
  RegistryOptions o = options(1);
  o.min_serve = 400ms;
  Registry reg(o, models());
  const auto loaded = std::chrono::steady_clock::now();
  Lease busy = reg.acquire("a");
  auto queued = std::async(std::launch::async, [&] { return reg.acquire("b"); });
  ASSERT_TRUE(eventually([&] { return reg.status("b").line_position == 1; }));
  // Within its turn a still takes new requests, though b waits.
  Lease more = reg.acquire("a", std::nullopt, Wait{.no_wait = true});
  const bool in_turn = std::chrono::steady_clock::now() < loaded + 400ms;
  if (in_turn) EXPECT_TRUE(more) << "a stopped admitting inside its turn";
  more.release();
  // After it, a drains as it would have at once.
  ASSERT_TRUE(eventually([&] { return reg.status("a").draining; }));
  EXPECT_GE(std::chrono::steady_clock::now() - loaded, 400ms);
  busy.release();
  EXPECT_TRUE(queued.get());
}
