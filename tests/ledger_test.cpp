#include "core/ledger.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

using namespace reclaim;

TEST(Ledger, ConcurrentAcquireAndRelease) {
  Ledger ledger;
  constexpr int kThreads = 8, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ledger, t] {
      std::vector<uint64_t> ids;
      for (int i = 0; i < kEach; ++i) {
        ids.push_back(ledger.acquire(Kind::buffer, "owner:" + std::to_string(t), "b", 1));
        if (i % 3 == 0) {
          ledger.release(ids.back());
          ids.pop_back();
        }
        (void)ledger.totals();
      }
      for (uint64_t id : ids) ledger.release(id);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ledger.totals().count, 0u);
  EXPECT_EQ(ledger.acquired_total(), static_cast<uint64_t>(kThreads * kEach));
}

TEST(Ledger, ConcurrentLiveCountIsExact) {
  Ledger ledger;
  constexpr int kThreads = 4, kEach = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ledger] {
      for (int i = 0; i < kEach; ++i) ledger.acquire(Kind::context, "o", "c", 3);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ledger.totals().count, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(ledger.totals().bytes, static_cast<uint64_t>(3 * kThreads * kEach));
}

TEST(Ledger, SnapshotsByKindAndOwner) {
  Ledger ledger;
  ledger.acquire(Kind::model, "model:a", "w", 100);
  ledger.acquire(Kind::context, "model:a/request:1", "ctx", 10);
  uint64_t c2 = ledger.acquire(Kind::context, "model:a/request:2", "ctx", 20);
  auto kinds = ledger.by_kind();
  EXPECT_EQ(kinds[Kind::model].bytes, 100u);
  EXPECT_EQ(kinds[Kind::context].count, 2u);
  EXPECT_EQ(kinds[Kind::context].bytes, 30u);
  ledger.release(c2);
  auto owners = ledger.by_owner();
  EXPECT_EQ(owners.size(), 2u);
  EXPECT_EQ(owners["model:a/request:1"].bytes, 10u);
  EXPECT_EQ(owners.count("model:a/request:2"), 0u);
}

TEST(Ledger, LogsOneJsonLinePerEvent) {
  Ledger ledger;
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ledger.set_log(f);
  uint64_t id = ledger.acquire(Kind::sampler, "model:x/request:7", "greedy", 0);
  ledger.release(id, /*failed=*/true);
  ledger.set_log(nullptr);
  std::rewind(f);
  char line[1024];
  std::vector<nlohmann::json> events;
  while (std::fgets(line, sizeof line, f)) events.push_back(nlohmann::json::parse(line));
  std::fclose(f);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["event"], "acquire");
  EXPECT_EQ(events[0]["kind"], "sampler");
  EXPECT_EQ(events[0]["owner"], "model:x/request:7");
  EXPECT_EQ(events[1]["event"], "release_failed");
  EXPECT_EQ(events[1]["id"], id);
  EXPECT_EQ(ledger.failed_releases(), 1u);
}

TEST(Ledger, KindNamesRoundTrip) {
  for (Kind k : kAllKinds) EXPECT_EQ(kind_from_name(kind_name(k)), k);
  EXPECT_FALSE(kind_from_name("gpu").has_value());
}

// An entry with bytes on an accelerator: `bytes` is the host's part, totals
// count both, and by_device puts each part where it is.
TEST(Ledger, PlacedBytesCountOnTheirDevices) {
  Ledger ledger;
  const uint64_t model = ledger.acquire(Kind::model, "model:m", "weights", 1000);
  const uint64_t ctx = ledger.acquire(Kind::context, "model:m/batch", "ctx", 500);
  ledger.acquire(Kind::thread, "model:m", "pool", 0);
  ledger.place(model, 100, {{"Vulkan0", 900}});
  ledger.place(ctx, 0, {{"Vulkan0", 300}, {"Vulkan1", 200}});
  EXPECT_EQ(ledger.totals().bytes, 1500u);
  EXPECT_EQ(ledger.by_owner()["model:m"].bytes, 1000u);
  const auto where = ledger.by_device();
  EXPECT_EQ(where.at(kHostMemory).bytes, 100u);
  EXPECT_EQ(where.at(kHostMemory).count, 2u);  // the weights' host part and the thread
  EXPECT_EQ(where.at("Vulkan0").bytes, 1200u);
  EXPECT_EQ(where.at("Vulkan0").count, 2u);
  EXPECT_EQ(where.at("Vulkan1").bytes, 200u);
  ledger.release(model);
  EXPECT_EQ(ledger.by_device().at("Vulkan0").bytes, 300u);
  ledger.release(ctx);
  EXPECT_EQ(ledger.by_device().count("Vulkan0"), 0u);
}
