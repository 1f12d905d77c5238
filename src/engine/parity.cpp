#include "engine/parity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace reclaim {

namespace {

std::string figure(float x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", static_cast<double>(x));
  return b;
}

// The largest difference between the log-probabilities two runs give the
// same tokens at one step: the token picked, and each top token both list.
float step_delta(const TokenLogprob& a, const TokenLogprob& b) {
  float d = std::fabs(a.logprob - b.logprob);
  for (const auto& [token, lp] : a.top) {
    for (const auto& [token_b, lp_b] : b.top) {
      if (token_b == token) d = std::max(d, std::fabs(lp - lp_b));
    }
  }
  return d;
}

float lead(const TokenLogprob& lp) { return lp.top[0].second - lp.top[1].second; }

}  // namespace

Parity compare_runs(const GenerateResult& alone, const GenerateResult& other, bool greedy, float tolerance) {
  Parity p;
  auto fail = [&](std::string why) {
    p.holds = false;
    p.why = std::move(why);
    return p;
  };
  for (const GenerateResult* r : {&alone, &other}) {
    if (r->logprobs.size() != r->tokens.size()) return fail("a run carries no log-probabilities (ask for them)");
    for (const TokenLogprob& lp : r->logprobs) {
      if (lp.top.size() < static_cast<size_t>(kParityLogprobs)) {
        return fail("a run carries fewer than " + std::to_string(kParityLogprobs) + " top log-probabilities");
      }
    }
  }
  const size_t common = std::min(alone.tokens.size(), other.tokens.size());
  size_t i = 0;
  for (; i < common && alone.tokens[i] == other.tokens[i]; ++i) {
    const float d = step_delta(alone.logprobs[i], other.logprobs[i]);
    p.max_delta = std::max(p.max_delta, d);
    if (d > tolerance) {
      return fail("step " + std::to_string(i) + ": a log-probability differs by " + figure(d) + ", over the tolerance " +
                  figure(tolerance));
    }
  }
  p.steps_compared = static_cast<int32_t>(i);
  const bool same_length = alone.tokens.size() == other.tokens.size();
  // A cancelled run is a prefix of what it would have been: it did not part
  // where it stopped.
  const bool cut_short = alone.finish == FinishReason::cancelled || other.finish == FinishReason::cancelled;
  if (i == common && !same_length && cut_short) return p;
  if (i == common && same_length) {
    if (alone.finish != other.finish) {
      return fail(std::string("the same tokens, but one run ended by ") + finish_reason_name(alone.finish) +
                  " and the other by " + finish_reason_name(other.finish));
    }
    return p;
  }
  // They part here: by another token, or one ended (an end token is not in
  // `tokens`) where the other went on. The step's figures come from alone
  // where it has them.
  p.parted_at = static_cast<int32_t>(i);
  const TokenLogprob& at = i < alone.logprobs.size() ? alone.logprobs[i] : other.logprobs[i];
  p.margin = lead(at);
  if (greedy && p.margin > 2 * tolerance) {
    return fail("step " + std::to_string(i) + ": the runs part where alone's best token leads by " + figure(p.margin) +
                ", more than twice the tolerance " + figure(tolerance) + " (not a near tie)");
  }
  return p;
}

}  // namespace reclaim
