// Two models decoding at once on the CPU take the cores in turns: never two
// steps computing at once, each pool asleep while the other computes, and
// each model's greedy output what it is alone.
#include "engine/core_turns.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>

#include "engine/generate.h"
#include "engine/session.h"
#include "batch_checks.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::small_load;
using reclaim::testing::small_session;
using reclaim::testing::eventually;

namespace {

GenerateRequest greedy(int max_tokens) {
  GenerateRequest r;
  r.prompt = "Once upon a time, in a land far away, there lived";
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

std::vector<llama_token> alone(Model& m, int max_tokens) {
  Session s(m, small_session(256));
  return generate(s, greedy(max_tokens)).tokens;
}

// Both sessions made, then both generating from one moment.
std::vector<llama_token> together(Model& m, int max_tokens, std::latch& start) {
  Session s(m, small_session(256));
  start.arrive_and_wait();
  return generate(s, greedy(max_tokens)).tokens;
}

ModelLoad two_threads(const std::string& vocab) {
  ModelLoad l = small_load(vocab);
  l.n_threads = 2;  // a pool, even on one core
  return l;
}

}  // namespace

TEST(CoreTurns, TwoModelsDecodingAtOnceTakeTheCoresInTurns) {
  ASSERT_TRUE(core_turns()) << "on by default";
  Model a(two_threads("spm")), b(two_threads("bpe"));
  ASSERT_TRUE(a.computes_on_cpu());
  ASSERT_EQ(core_turn_stats().pools, 2);
  const std::vector<llama_token> a_alone = alone(a, 48), b_alone = alone(b, 48);
  const CoreTurnStats before = core_turn_stats();
  std::vector<llama_token> a_both, b_both;
  std::latch start(2);
  std::thread ta([&] { a_both = together(a, 48, start); });
  std::thread tb([&] { b_both = together(b, 48, start); });
  ta.join();
  tb.join();
  const CoreTurnStats after = core_turn_stats();
  EXPECT_EQ(a_both, a_alone);
  EXPECT_EQ(b_both, b_alone);
  EXPECT_EQ(after.max_at_once, 1);
  EXPECT_GE(after.turns - before.turns, 2u * 48);
  // Started together, 48 steps each: each step after the first waits for the other's.
  EXPECT_GT(after.waited, before.waited);
  EXPECT_GT(after.pauses, before.pauses) << "a pool sleeps when the other waits";
  // A model nobody waits on is never paused, another loaded beside it or not.
  const CoreTurnStats idle_beside = core_turn_stats();
  EXPECT_FALSE(alone(b, 8).empty());
  EXPECT_EQ(core_turn_stats().pauses, idle_beside.pauses);
  a.unload();
  EXPECT_EQ(core_turn_stats().pools, 1);
  const CoreTurnStats one = core_turn_stats();
  EXPECT_FALSE(alone(b, 8).empty());
  EXPECT_EQ(core_turn_stats().pauses, one.pauses);
  EXPECT_GT(core_turn_stats().turns, one.turns);
}

// A step's turn spans its sampling: the other model waits for all of it, and
// the step's own decodes inside it take no second turn (nor wait on it).
TEST(CoreTurns, AStepsTurnHoldsTheOtherModelUntilItsSamplingIsDone) {
  Model a(two_threads("spm")), b(two_threads("bpe"));
  ASSERT_TRUE(a.computes_on_cpu() && b.computes_on_cpu());
  const CoreTurnStats before = core_turn_stats();
  std::atomic<bool> b_decoding{false};
  std::thread other;
  {
    const StepTurn step(a);
    {
      const DecodeTurn inside(a);  // would wait on itself were it a second turn
    }
    EXPECT_EQ(core_turn_stats().turns, before.turns + 1);
    other = std::thread([&] {
      const DecodeTurn turn(b);
      b_decoding = true;
    });
    ASSERT_TRUE(eventually([&] { return core_turn_stats().waited > before.waited; }))
        << "the other model queued for its turn";
    EXPECT_FALSE(b_decoding.load()) << "a's step is not over";
  }
  other.join();
  EXPECT_TRUE(b_decoding.load());
  const CoreTurnStats after = core_turn_stats();
  EXPECT_EQ(after.turns, before.turns + 2);
  EXPECT_GT(after.pauses, before.pauses) << "a's pool sleeps once b waits for the cores";
  EXPECT_EQ(after.max_at_once, 1);
}
