// What one request's generation does with each token, whoever decodes it:
// generate() on a session's own context, or a Batcher that decodes many
// requests' tokens in one batch. Both go through this, so a request ends for
// the same reasons and streams the same text either way.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <llama.h>

#include "core/scope.h"
#include "engine/generate.h"
#include "engine/owners.h"
#include "engine/text_stream.h"

namespace reclaim {

// The request's prompt as tokens: the given ones or the text tokenized, each
// checked against the vocabulary, the whole against a context of `n_ctx`
// positions (ContextOverflow). Throws Error on an empty prompt.
std::vector<llama_token> prompt_tokens(const llama_vocab* vocab, const GenerateRequest& request, int32_t n_ctx);

class Generation {
 public:
  using Clock = std::chrono::steady_clock;

  // The sampler chain, when the request needs one, goes into `scope` and has
  // seen the prompt (for repeat penalties, over at most the `n_ctx` tokens
  // of its sequence). `result` is filled as it runs.
  Generation(Scope& scope, const llama_vocab* vocab, const GenerateRequest& request,
             const std::vector<llama_token>& prompt, int32_t n_ctx, GenerateResult& result);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Asked while a grammar weighs the vocabulary: true stops the request
  // (its client left, its model unloads) in the middle of that step.
  void stop_when(std::function<bool()> stopped) { stopped_ = std::move(stopped); }
  // What sample() throws when stop_when's predicate stopped it.
  struct Stopped {};

  // The next token from the logits of batch row `row` (-1: the last).
  // Throws Stopped, and GrammarTooCostly when a grammar takes longer than
  // the request's grammar_token_time over one token.
  llama_token sample(llama_context* ctx, int32_t row);
  llama_token sample_with_grammar(const float* logits);
  // Takes a sampled token, which would be decoded at position `pos` of a
  // context of `n_ctx`. Appends the text now safe to emit to `text`; returns
  // true when the request has ended (result.finish says why).
  bool accept(llama_token token, int32_t pos, int32_t n_ctx, std::string& text);
  // The end: what the stream still held, and the final timings.
  std::string finish();
  // The logprobs accepted since the last call (empty unless asked for).
  std::vector<TokenLogprob> take_logprobs();

  // The timings so far, as finish() will have them at this point.
  Timings timings_now() const;
  void prompt_done() { prompt_done_ = Clock::now(); result_.timings.prompt_ms = ms(start_, prompt_done_); }
  Clock::time_point start() const { return start_; }
  int32_t max_tokens() const { return max_tokens_; }  // < 0: no limit
  static double ms(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

 private:
  const llama_vocab* vocab_;
  int32_t n_vocab_;
  int32_t max_tokens_;
  GenerateResult& result_;
  ScopedRef<llama_sampler> sampler_;  // null: plain greedy, an argmax
  ScopedRef<llama_sampler> grammar_;  // null: none
  std::vector<llama_token_data> candidates_;  // the grammar's path: the logits as llama.cpp's array
  std::function<bool()> stopped_;
  std::chrono::milliseconds grammar_token_time_;
  void mask_with_grammar(llama_token_data_array& arr);
  std::vector<llama_token> preserved_;        // sorted
  int32_t n_logprobs_ = -1;
  bool post_sampling_ = false;
  TokenLogprob sampled_;          // the last sampled token's, until accepted
  int32_t samples_ = 0;           // tokens sampled, the end token included
  size_t logprobs_taken_ = 0;
  std::vector<int32_t> order_;    // scratch for the top tokens
  void note_logprob(const float* logits, llama_token t);
  // post_sampling: the chain's candidates once it has drawn `t` from them.
  void note_drawn(const llama_token_data_array& arr, llama_token t);
  // The chain's draw from the logits, its candidates kept (post_sampling).
  llama_token draw(const float* logits);
  // The logits as llama.cpp's candidate array (in candidates_), and the
  // chain's pick from it, noted when post_sampling.
  llama_token_data_array fill(const float* logits);
  llama_token pick(llama_token_data_array& arr);
  // A token drawn for certain (greedy): probability 1, alone.
  void note_certain(llama_token t);
  TextStream stream_;
  Clock::time_point start_ = Clock::now(), prompt_done_ = start_;
};

}  // namespace reclaim
