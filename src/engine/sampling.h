// Sampling parameters and the llama.cpp sampler chain they build. The order
// is llama.cpp's own (common/sampling.cpp): penalties, top-k, top-p, min-p,
// temperature, then a seeded draw; temperature <= 0 is greedy.
#pragma once

#include <cstdint>
#include <string>

#include <llama.h>

#include "core/scope.h"
#include "engine/owners.h"

namespace reclaim {

struct SamplingParams {
  float temperature = 0.8f;   // <= 0: greedy (argmax)
  int32_t top_k = 40;         // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.05f;        // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;
  // 0xFFFFFFFF (LLAMA_DEFAULT_SEED): a fresh seed each time; resolve_seed()
  // picks it, so that the run can be reported and repeated.
  uint32_t seed = LLAMA_DEFAULT_SEED;

  bool greedy() const { return temperature <= 0.0f; }
};

// Throws Error naming the first parameter out of range.
void validate(const SamplingParams& p);
// The seed to use: p.seed, or a random one when it is LLAMA_DEFAULT_SEED.
uint32_t resolve_seed(const SamplingParams& p);

// Builds the chain in `scope` (one sampler entry on the ledger); `seed` is
// the resolved one.
Owned<llama_sampler> new_sampler(Scope& scope, const llama_vocab* vocab, const SamplingParams& p, uint32_t seed);

// The index of the largest of `n` logits, the first of equal maxima: the
// token llama.cpp's greedy sampler picks, without its candidate array.
llama_token argmax(const float* logits, int32_t n);

}  // namespace reclaim
