#include "engine/sampling.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace reclaim {

void validate(const SamplingParams& p) {
  auto bad = [](const std::string& what) { throw Error("sampling: " + what); };
  if (!std::isfinite(p.temperature)) bad("temperature must be a finite number");
  if (!(p.top_p > 0.0f) || !std::isfinite(p.top_p)) bad("top-p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min-p must be in [0, 1]");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) bad("repeat penalty must be > 0");
  if (p.repeat_last_n < 0) bad("repeat-last-n must be >= 0");
}

uint32_t resolve_seed(const SamplingParams& p) {
  if (p.seed != LLAMA_DEFAULT_SEED) return p.seed;
  std::random_device rd;
  uint32_t s = rd();
  return s == LLAMA_DEFAULT_SEED ? 0 : s;
}

Owned<llama_sampler> new_sampler(Scope& scope, const llama_vocab* vocab, const SamplingParams& p, uint32_t seed) {
  validate(p);
  Owned<llama_sampler> chain = new_sampler_chain(scope, p.greedy() ? "greedy" : "sampled seed=" + std::to_string(seed));
  llama_sampler* c = chain.get();
  // llama_sampler_chain_add takes ownership, so the chain's one cleanup frees all.
  if (p.repeat_penalty != 1.0f && p.repeat_last_n > 0) {
    llama_sampler_chain_add(c, llama_sampler_init_penalties(llama_vocab_n_tokens(vocab), p.repeat_last_n,
                                                            p.repeat_penalty, 0.0f, 0.0f));
  }
  if (p.greedy()) {
    llama_sampler_chain_add(c, llama_sampler_init_greedy());
    return chain;
  }
  if (p.top_k > 0) llama_sampler_chain_add(c, llama_sampler_init_top_k(p.top_k));
  if (p.top_p < 1.0f) llama_sampler_chain_add(c, llama_sampler_init_top_p(p.top_p, 1));
  if (p.min_p > 0.0f) llama_sampler_chain_add(c, llama_sampler_init_min_p(p.min_p, 1));
  llama_sampler_chain_add(c, llama_sampler_init_temp(p.temperature));
  llama_sampler_chain_add(c, llama_sampler_init_dist(seed));
  return chain;
}

}  // namespace reclaim
