// A model's life alone: every change the table allows, and every one it
// refuses, without a registry or a model.
#include "runtime/model_life.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <utility>

using namespace reclaim;

namespace {

using L = Life;
using E = LifeEvent;

// Written out here apart from the table in model_life.cpp, so that a change
// to one without the other fails.
const std::map<std::pair<Life, LifeEvent>, Life>& allowed() {
  static const std::map<std::pair<Life, LifeEvent>, Life> m = {
      {{L::unloaded, E::load}, L::loading},
      {{L::reload_due, E::load}, L::loading},
      {{L::loading, E::loaded}, L::serving},
      {{L::loading, E::loaded_stale}, L::reloading},
      {{L::loading, E::load_failed}, L::unloaded},
      {{L::serving, E::reconfigure}, L::reloading},
      {{L::reloading, E::reload_dropped}, L::serving},
      {{L::serving, E::drain}, L::draining},
      {{L::reloading, E::drain}, L::draining},
      {{L::draining, E::resume}, L::serving},
      {{L::draining, E::resume_stale}, L::reloading},
      {{L::serving, E::close}, L::closing},
      {{L::draining, E::close}, L::closing},
      {{L::reloading, E::close}, L::closing},
      {{L::closing, E::idle}, L::unloading},
      {{L::unloading, E::freed}, L::unloaded},
      {{L::unloaded, E::mark_reload}, L::reload_due},
  };
  return m;
}

}  // namespace

TEST(ModelLife, EveryAllowedChangeGoesWhereTheTableSays) {
  for (const auto& [from_event, to] : allowed()) {
    const auto [from, event] = from_event;
    const std::optional<Life> got = next_life(from, event);
    ASSERT_TRUE(got.has_value()) << life_name(from) << " by " << life_event_name(event);
    EXPECT_EQ(*got, to) << life_name(from) << " by " << life_event_name(event);
    EXPECT_EQ(apply_life(from, event), to);
  }
}

TEST(ModelLife, EveryOtherChangeIsRefused) {
  int refused = 0;
  for (Life from : kAllLives) {
    for (LifeEvent event : kAllLifeEvents) {
      if (allowed().count({from, event})) continue;
      EXPECT_FALSE(next_life(from, event).has_value()) << life_name(from) << " by " << life_event_name(event);
      EXPECT_THROW(apply_life(from, event), std::logic_error) << life_name(from) << " by " << life_event_name(event);
      ++refused;
    }
  }
  // 8 states by 13 events, less the 17 allowed.
  EXPECT_EQ(refused, 8 * 13 - 17);
}

TEST(ModelLife, EveryStateIsReachedFromUnloadedAndReturnsToIt) {
  // A walk over the allowed changes from unloaded reaches every state, and
  // from each one a way back to unloaded exists: no state is a trap.
  auto reachable = [](Life start) {
    std::map<Life, bool> seen{{start, true}};
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [from_event, to] : allowed()) {
        if (seen.count(from_event.first) && !seen.count(to)) grew = seen[to] = true;
      }
    }
    return seen;
  };
  EXPECT_EQ(reachable(Life::unloaded).size(), std::size(kAllLives));
  for (Life l : kAllLives) EXPECT_TRUE(reachable(l).count(Life::unloaded)) << life_name(l);
}

TEST(ModelLife, WhatEachStateAllows) {
  for (Life l : kAllLives) {
    SCOPED_TRACE(life_name(l));
    EXPECT_EQ(admits_requests(l), l == Life::serving);
    EXPECT_EQ(holds_room(l), l != Life::unloaded && l != Life::reload_due);
    EXPECT_EQ(leaving(l), l == Life::closing || l == Life::unloading);
    // Only a loaded model gives up its room, and only one not already leaving.
    EXPECT_EQ(may_give_room(l), state_of(l) == ModelState::loaded && !leaving(l));
    // A model that needs a turn admits nothing now, and is not leaving.
    if (needs_turn(l)) EXPECT_TRUE(!admits_requests(l) && !leaving(l));
  }
  // The APIs' coarse state.
  EXPECT_EQ(state_of(Life::reload_due), ModelState::unloaded);
  EXPECT_EQ(state_of(Life::closing), ModelState::loaded);
  EXPECT_EQ(state_of(Life::unloading), ModelState::unloading);
  EXPECT_EQ(state_of(Life::loading), ModelState::loading);
}
