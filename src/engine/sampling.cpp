#include "engine/sampling.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "engine/grammar_limits.h"

namespace reclaim {

void validate(const SamplingParams& p) {
  auto bad = [](const std::string& what) { throw Error("sampling: " + what); };
  if (!std::isfinite(p.temperature)) bad("temperature must be a finite number");
  if (!(p.top_p > 0.0f) || !std::isfinite(p.top_p)) bad("top-p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min-p must be in [0, 1]");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) bad("repeat penalty must be > 0");
  if (p.repeat_last_n < -1) bad("repeat-last-n must be -1 (the whole context), 0 (off) or more");
  if (!std::isfinite(p.frequency_penalty) || p.frequency_penalty < -2 || p.frequency_penalty > 2) {
    bad("frequency penalty must be between -2 and 2");
  }
  if (!std::isfinite(p.presence_penalty) || p.presence_penalty < -2 || p.presence_penalty > 2) {
    bad("presence penalty must be between -2 and 2");
  }
}

uint32_t resolve_seed(const SamplingParams& p) {
  if (p.seed != LLAMA_DEFAULT_SEED) return p.seed;
  std::random_device rd;
  uint32_t s = rd();
  return s == LLAMA_DEFAULT_SEED ? 0 : s;
}

ScopedRef<llama_sampler> new_sampler(Scope& scope, const llama_vocab* vocab, const SamplingParams& p, uint32_t seed) {
  validate(p);
  ScopedRef<llama_sampler> chain = new_sampler_chain(scope, p.greedy() ? "greedy" : "sampled seed=" + std::to_string(seed));
  llama_sampler* c = chain.get();
  // llama_sampler_chain_add takes ownership, so the chain's one cleanup frees all.
  if (!p.logit_bias.empty()) {
    llama_sampler_chain_add(c, llama_sampler_init_logit_bias(llama_vocab_n_tokens(vocab),
                                                             static_cast<int32_t>(p.logit_bias.size()), p.logit_bias.data()));
  }
  if (p.penalties()) {
    llama_sampler_chain_add(c, llama_sampler_init_penalties(llama_vocab_n_tokens(vocab), p.repeat_last_n, p.repeat_penalty, p.frequency_penalty,
                                                            p.presence_penalty));
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

ScopedRef<llama_sampler> new_grammar_sampler(Scope& scope, const llama_vocab* vocab, const GrammarSpec& g) {
  check_grammar_limits(g.gbnf);
  ScopedRef<llama_sampler> s = new_grammar(scope, vocab, g.gbnf, g.lazy, g.trigger_patterns, g.trigger_tokens);
  try {
    for (llama_token t : g.prefill) llama_sampler_accept(s.get(), t);
  } catch (const std::exception& e) {
    throw Error(std::string("the grammar does not take the template's generation prompt: ") + e.what());
  }
  return s;
}

bool grammar_parses(const llama_vocab* vocab, const std::string& gbnf) {
  check_grammar_limits(gbnf);
  llama_sampler* g = nullptr;
  try {
    g = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
  } catch (const std::exception& e) {
    // The bound on open alternatives (patches/llama.cpp/grammar-stack-bound.patch).
    throw GrammarTooLarge(e.what());
  }
  if (!g) return false;
  llama_sampler_free(g);
  return true;
}

llama_token argmax(const float* logits, int32_t n) {
  // Sixteen lanes, each with its own best value and index, so that no
  // iteration waits on the one before: a single running index makes each
  // load's address depend on the last compare, and cost 108 us a token over
  // a 151,936-token vocab (1% of generation at 100 tokens/s), against 30 us
  // here (both -O3, no -march; reclaim's tg against llama-bench is
  // scripts/bench-generate). Strict compares keep each lane's first index;
  // equal maxima across lanes go to the smallest.
  constexpr int32_t kLanes = 16;
  if (n <= 0) return 0;
  float value[kLanes];
  int32_t index[kLanes];
  for (int32_t k = 0; k < kLanes; ++k) {
    value[k] = logits[0];
    index[k] = 0;
  }
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int32_t k = 0; k < kLanes; ++k) {
      const bool greater = logits[i + k] > value[k];
      value[k] = greater ? logits[i + k] : value[k];
      index[k] = greater ? i + k : index[k];
    }
  }
  float best_value = value[0];
  int32_t best = index[0];
  for (int32_t k = 1; k < kLanes; ++k) {
    if (value[k] > best_value || (value[k] == best_value && index[k] < best)) {
      best_value = value[k];
      best = index[k];
    }
  }
  for (; i < n; ++i) {
    if (logits[i] > best_value) {
      best_value = logits[i];
      best = i;
    }
  }
  return best;
}

}  // namespace reclaim
