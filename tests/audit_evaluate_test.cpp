// The audit's verdict on figures given here, without running cycles.
#include <gtest/gtest.h>

#include "audit/audit.h"

namespace reclaim::audit {
namespace {

constexpr int64_t MiB = 1 << 20;

const Check& check(const std::vector<Check>& cs, const std::string& name) {
  for (const Check& c : cs) {
    if (c.name == name) return c;
  }
  static const Check none{"(missing)", 0, 0, true, false};
  ADD_FAILURE() << "no check named " << name;
  return none;
}

SideResult one_cycle(int64_t anon_after, int64_t swap_after) {
  SideResult r;
  r.baseline.anon = 100 * MiB;
  CycleRecord c;
  c.after.anon = anon_after;
  c.after.swap = swap_after;
  r.cycles = {c, c};
  return r;
}

TEST(AuditEvaluate, ALeakPushedOutToSwapStillFails) {
  // 40 MiB of the baseline and a 2 MiB leak went to swap: anon looks lower
  // than at the start, the private total is 2 MiB higher.
  const std::vector<Check> cs = evaluate(one_cycle(60 * MiB, 42 * MiB), Thresholds{});
  EXPECT_TRUE(check(cs, "anon residue").ok);
  EXPECT_FALSE(check(cs, "anon+swap residue").ok);
  EXPECT_EQ(check(cs, "anon+swap residue").value, 2 * MiB);
}

TEST(AuditEvaluate, MemoryThatOnlyMovedToSwapIsNoResidue) {
  const std::vector<Check> cs = evaluate(one_cycle(60 * MiB, 40 * MiB), Thresholds{});
  EXPECT_TRUE(check(cs, "anon+swap residue").ok);
  EXPECT_EQ(check(cs, "anon+swap residue").value, 0);
}

}  // namespace
}  // namespace reclaim::audit
