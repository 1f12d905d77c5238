// The choice of which models give up their room, without loading any.
#include "runtime/room.h"

#include <gtest/gtest.h>

#include "core/error.h"

using namespace reclaim;

namespace {

using Clock = std::chrono::steady_clock;

Occupant model(const std::string& name, int64_t bytes, int in_flight, int age_s, bool pinned = false) {
  Occupant o;
  o.name = name;
  o.reserved = bytes;
  o.counted = true;
  o.pinned = pinned;
  o.idle = in_flight == 0;
  o.busy = in_flight > 0;
  o.in_flight = in_flight;
  o.last_use = Clock::time_point() + std::chrono::seconds(1000 - age_s);
  return o;
}

}  // namespace

TEST(Room, WhatFitsLoadsWithoutTouchingAnyone) {
  EXPECT_EQ(plan_room({model("a", 100, 1, 5)}, "x", 100, 300, 0).step, RoomPlan::Step::fits);
  EXPECT_EQ(plan_room({model("a", 100, 0, 5)}, "x", 100, 0, 2).step, RoomPlan::Step::fits);
}

TEST(Room, IdleModelsGoFirstOldestFirst) {
  const RoomPlan p = plan_room({model("busy", 100, 1, 50), model("new", 100, 0, 1), model("old", 100, 0, 9)}, "x", 100, 300, 0);
  ASSERT_EQ(p.step, RoomPlan::Step::evict);
  EXPECT_EQ(p.evict, 2u);
}

TEST(Room, BusyModelsDrainOnlyAsManyAsTheRoomNeeds) {
  const RoomPlan p = plan_room({model("a", 100, 1, 1), model("b", 100, 2, 9), model("c", 100, 1, 5)}, "x", 150, 300, 0);
  ASSERT_EQ(p.step, RoomPlan::Step::drain);
  EXPECT_EQ(p.drain, (std::vector<size_t>{1, 2}));  // the least recently used two
}

TEST(Room, ModelsAlreadyDrainingStayChosen) {
  std::vector<Occupant> o = {model("a", 100, 1, 9), model("b", 100, 1, 1)};
  o[1].draining = true;
  const RoomPlan p = plan_room(o, "x", 100, 200, 0);
  ASSERT_EQ(p.step, RoomPlan::Step::drain);
  EXPECT_EQ(p.drain, (std::vector<size_t>{1}));
}

TEST(Room, ModelsOnTheirWayOutAreWaitedFor) {
  std::vector<Occupant> o = {model("a", 100, 0, 9)};
  o[0].idle = false;
  o[0].unloading = true;
  EXPECT_EQ(plan_room(o, "x", 100, 100, 0).step, RoomPlan::Step::wait);
}

TEST(Room, PinnedModelsAndTheBudgetSayNeverWithTheReason) {
  RoomPlan p = plan_room({model("p", 100, 0, 9, true)}, "x", 150, 200, 0);
  ASSERT_EQ(p.step, RoomPlan::Step::never);
  EXPECT_NE(p.why.find("pinned models (p "), std::string::npos) << p.why;
  p = plan_room({model("p", 100, 0, 9, true)}, "x", 10, 0, 1);
  ASSERT_EQ(p.step, RoomPlan::Step::never);
  EXPECT_NE(p.why.find("--max-loaded 1"), std::string::npos) << p.why;
  p = plan_room({}, "x", 500, 200, 0);
  ASSERT_EQ(p.step, RoomPlan::Step::never);
  EXPECT_NE(p.why.find("more than the whole memory budget"), std::string::npos) << p.why;
}

namespace {

Occupant placed(const std::string& name, int64_t host, int64_t device, int in_flight, int age_s) {
  Occupant o = model(name, host + device, in_flight, age_s);
  o.reserved_at = {{"host", host}, {"vulkan0", device}};
  return o;
}

}  // namespace

// Host memory and a device's are budgeted apart: a model that fits the host
// but not the device makes room there, and only there.
TEST(Room, EachPlaceHasItsOwnBudget) {
  const MemoryBudget budget = parse_memory_budget("host=1000,vulkan0=300");
  const Places needs = {{"host", 100}, {"vulkan0", 200}};
  // Fits both.
  EXPECT_EQ(plan_room({placed("a", 100, 100, 0, 5)}, "x", 300, needs, budget, 0).step, RoomPlan::Step::fits);
  // The device is full: the idle model on the device goes, not the older
  // one that holds only host memory.
  const RoomPlan p = plan_room({placed("host-only", 500, 0, 0, 9), placed("on-device", 100, 200, 0, 1)}, "x", 300, needs,
                               budget, 0);
  ASSERT_EQ(p.step, RoomPlan::Step::evict);
  EXPECT_EQ(p.evict, 1u);
  // A busy model on the device drains; the host-only one is left alone.
  const RoomPlan d = plan_room({placed("host-only", 500, 0, 1, 9), placed("on-device", 100, 200, 1, 1)}, "x", 300, needs,
                               budget, 0);
  ASSERT_EQ(d.step, RoomPlan::Step::drain);
  EXPECT_EQ(d.drain, std::vector<size_t>{1});
  // More than the device's whole budget can never fit, and says where.
  const RoomPlan n = plan_room({}, "x", 500, {{"host", 100}, {"vulkan0", 400}}, budget, 0);
  ASSERT_EQ(n.step, RoomPlan::Step::never);
  EXPECT_NE(n.why.find("on vulkan0"), std::string::npos) << n.why;
}

TEST(Room, BudgetsParseAndNameWhatIsWrong) {
  EXPECT_EQ(parse_memory_budget("8GiB").total, int64_t{8} << 30);
  const MemoryBudget b = parse_memory_budget("host=16GiB,Vulkan0=2GiB,total=17GiB");
  EXPECT_EQ(b.total, int64_t{17} << 30);
  EXPECT_EQ(b.at.at("host"), int64_t{16} << 30);
  EXPECT_EQ(b.at.at("vulkan0"), int64_t{2} << 30);
  EXPECT_EQ(format_memory_budget(b), "total 17.0 GiB, host 16.0 GiB, vulkan0 2.0 GiB");
  for (const char* bad : {"host=", "=2GiB", "host=2GiB,host=1GiB", "host=lots"}) {
    EXPECT_THROW(parse_memory_budget(bad), Error) << bad;
  }
}
