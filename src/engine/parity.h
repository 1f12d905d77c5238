// What reclaim promises between a request decoded alone and the same request
// decoded beside others, or on top of a prompt cache.
//
// llama.cpp's CPU kernels take a different path for a different batch shape:
// a matrix product of one row is ggml's dot product (ggml_vec_dot_f16 and
// its kin), of two rows or more llamafile's tinyBLAS, and a prompt of 64
// tokens or more runs the tiled flash attention. Each path sums in its own
// order, so a sequence's logits move in their last bits with what shares its
// step, and on a random-weight model, whose two best logits are often all
// but tied, that can turn the pick. So the promise is not "the same tokens":
//
//   at every step before the two runs part, each of the best tokens'
//   log-probabilities is within kLogitTolerance of its value alone; and a
//   greedy request parts from its run alone only at a step where, alone,
//   its two best tokens are within 2 * kLogitTolerance of each other (a
//   tie the rounding may break either way).
//
// A sampled request may also part where its random draw falls between the
// two runs' probabilities; its logits before that are held to the same
// tolerance. bench-parity measures the differences and names the kernels.
#pragma once

#include <cstdint>
#include <string>

#include "engine/generate.h"

namespace reclaim {

// The largest difference of a log-probability that the promise allows. The
// differences measured on the test models reach 0.004, four tenths of it:
// the f16 KV cache and f16 activations turn a last-bit difference into an
// f16 step now and then (`bench-parity --embd 256 --layers 4 --seeds 4
// --tokens 64`, on an AVX-512 build and an AVX2-only one).
inline constexpr float kLogitTolerance = 1e-2f;

// The top log-probabilities a run must carry for compare_runs to judge it.
inline constexpr int32_t kParityLogprobs = 2;

struct Parity {
  bool holds = true;
  int32_t steps_compared = 0;  // steps before the runs part (all of them when they never do)
  int32_t parted_at = -1;      // the first step whose tokens differ, or where one run ended; -1: never
  float max_delta = 0;         // the largest |difference| of a top log-probability before parting
  float margin = 0;            // at the parting step: the lead of alone's best token over its second
  std::string why;             // when it does not hold: the step and the figures
};

// Judges `other` against `alone` by the promise above. Both must have been
// asked for at least kParityLogprobs top log-probabilities. `greedy`: the
// requests picked the best token (temperature 0), so a parting step must be
// a near tie.
Parity compare_runs(const GenerateResult& alone, const GenerateResult& other, bool greedy = true,
                    float tolerance = kLogitTolerance);

}  // namespace reclaim
