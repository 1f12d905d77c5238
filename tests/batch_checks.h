// What the batch tests look at: nothing of a request on the ledger or in its
// sequence's memory after it ends, and a state reached within a bound.
#pragma once

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/ledger.h"
#include "engine/batcher.h"
#include "engine/parity.h"

namespace reclaim::testing {

// Ledger entries of requests still open ("…/request:<n>").
inline size_t request_entries() {
  size_t n = 0;
  for (const LedgerEntry& e : Ledger::process().entries()) n += e.owner.find("/request:") != std::string::npos;
  return n;
}

// No position of sequence `seq` is left in the batch's memory.
inline bool sequence_empty(Batcher& b, int32_t seq) {
  return llama_memory_seq_pos_max(llama_get_memory(b.context()), seq) == -1;
}

// Sequence `seq` holds the cells of exactly the tokens its prompt cache
// says it keeps, and no others.
inline bool sequence_holds_its_cache(Batcher& b, int32_t seq) {
  return llama_memory_seq_pos_max(llama_get_memory(b.context()), seq) + 1 ==
         static_cast<llama_pos>(b.cached_tokens(seq));
}

// The cells a request that ended well leaves in its sequence: its prompt,
// then the tokens it generated that were decoded (the last one sampled never
// is; an end-of-generation token is not among r.tokens).
inline size_t cells_left(const GenerateResult& r) {
  const bool last_undecoded = r.finish == FinishReason::length || r.finish == FinishReason::stop;
  return static_cast<size_t>(r.timings.prompt_tokens) + r.tokens.size() - (last_undecoded && !r.tokens.empty() ? 1 : 0);
}

// A request asks for the log-probabilities that the promise between a run
// alone and a run beside others is judged by (engine/parity.h).
inline GenerateRequest judged(GenerateRequest r) {
  r.logprobs = kParityLogprobs;
  return r;
}

// That promise, as a test's expectation: `got` is what `alone` would be, up
// to the first near tie, with every log-probability within the tolerance.
// When they never part (and neither was cut short), the text and the way
// they ended are the same too.
inline Parity expect_as_alone(const GenerateResult& alone, const GenerateResult& got, const std::string& what = "",
                              bool greedy = true) {
  const Parity p = compare_runs(alone, got, greedy);
  EXPECT_TRUE(p.holds) << what << ": " << p.why;
  if (p.holds && p.parted_at < 0 && got.tokens.size() == alone.tokens.size()) {
    EXPECT_EQ(got.text, alone.text) << what;
    EXPECT_EQ(got.finish, alone.finish) << what;
  }
  return p;
}

// Until `pred` holds, polling; false if it did not within `bound`.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds bound = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

// Whether `f` became ready within `bound`.
inline bool ready_within(std::future<void>&& f, std::chrono::milliseconds bound = std::chrono::seconds(60)) {
  return f.wait_for(bound) == std::future_status::ready;
}

}  // namespace reclaim::testing
