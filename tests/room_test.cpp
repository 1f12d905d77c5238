// The choice of which models give up their room, without loading any.
#include "runtime/room.h"

#include <gtest/gtest.h>

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
