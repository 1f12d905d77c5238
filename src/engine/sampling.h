// Sampling parameters and the llama.cpp sampler chain they build. The order
// is llama.cpp's own (common/sampling.cpp): penalties, top-k, top-p, min-p,
// temperature, then a seeded draw; temperature <= 0 is greedy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  int32_t repeat_last_n = 64;     // the window of the three penalties; -1: the whole context
  float frequency_penalty = 0.0f;  // OpenAI's: by how often a token came; 0: off
  float presence_penalty = 0.0f;   // OpenAI's: once a token came; 0: off
  // Added to a token's logit before anything else (OpenAI's logit_bias:
  // -100 all but bans a token).
  std::vector<llama_logit_bias> logit_bias;
  // 0xFFFFFFFF (LLAMA_DEFAULT_SEED): a fresh seed each time; resolve_seed()
  // picks it, so that the run can be reported and repeated.
  uint32_t seed = LLAMA_DEFAULT_SEED;

  bool greedy() const { return temperature <= 0.0f; }
  bool penalties() const {
    return repeat_last_n != 0 && (repeat_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f);
  }
  // Plain greedy: the argmax of the logits as they come.
  bool plain_greedy() const { return greedy() && !penalties() && logit_bias.empty(); }
};

// A grammar the sampled tokens must follow (llama.cpp's GBNF sampler): a
// JSON schema's, a tool list's, or the client's own.
struct GrammarSpec {
  std::string gbnf;  // empty: none
  bool lazy = false;  // only from the first trigger on (tool calls amid text)
  std::vector<std::string> trigger_patterns;  // regular expressions over the text generated
  std::vector<llama_token> trigger_tokens;
  // What the template's prompt already put in the reply (its generation
  // prompt): the grammar reads it first, as llama-server's does.
  std::vector<llama_token> prefill;
  bool empty() const { return gbnf.empty(); }
};

// Throws Error naming the first parameter out of range.
void validate(const SamplingParams& p);
// The seed to use: p.seed, or a random one when it is LLAMA_DEFAULT_SEED.
uint32_t resolve_seed(const SamplingParams& p);

// Builds the chain in `scope` (one sampler entry on the ledger); `seed` is
// the resolved one.
ScopedRef<llama_sampler> new_sampler(Scope& scope, const llama_vocab* vocab, const SamplingParams& p, uint32_t seed);

// The grammar's sampler in `scope` (a sampler entry on the ledger), having
// read the spec's prefill. Throws Error when the grammar does not parse,
// GrammarTooLarge (engine/grammar_limits.h) when it is over a bound.
ScopedRef<llama_sampler> new_grammar_sampler(Scope& scope, const llama_vocab* vocab, const GrammarSpec& g);

// Whether llama.cpp parses `gbnf` (its root rule "root") for this vocabulary;
// throws GrammarTooLarge first when it is over a bound.
bool grammar_parses(const llama_vocab* vocab, const std::string& gbnf);

// The index of the largest of `n` logits, the first of equal maxima: the
// token llama.cpp's greedy sampler picks, without its candidate array.
llama_token argmax(const float* logits, int32_t n);

}  // namespace reclaim
