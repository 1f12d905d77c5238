#include "engine/generation.h"

namespace reclaim {

std::vector<llama_token> prompt_tokens(const llama_vocab* vocab, const GenerateRequest& req, int32_t n_ctx) {
  std::vector<llama_token> prompt =
      req.prompt_tokens.empty() ? tokenize(vocab, req.prompt, req.add_special) : req.prompt_tokens;
  check_token_ids(vocab, prompt);
  if (prompt.empty()) throw BadPrompt("the prompt is empty (no tokens)");
  check_context_fits(static_cast<int32_t>(prompt.size()), req.max_tokens, n_ctx);
  return prompt;
}

Generation::Generation(Scope& scope, const llama_vocab* vocab, const GenerateRequest& req,
                       const std::vector<llama_token>& prompt, GenerateResult& result)
    : vocab_(vocab), n_vocab_(llama_vocab_n_tokens(vocab)), max_tokens_(req.max_tokens), result_(result),
      stream_(req.stop) {
  result_.timings.prompt_tokens = static_cast<int32_t>(prompt.size());
  // Plain greedy needs no sampler chain: an argmax over the logits picks the
  // same token as llama.cpp's greedy sampler (the first of equal maxima)
  // without building the candidate array of the whole vocabulary each step,
  // which cost 7% of generation speed with a 151,936-token vocab
  // (bench/generate: tg 0.93x of llama-bench with the chain, 1.0x without).
  validate(req.sampling);
  const bool argmax = req.sampling.greedy() && (req.sampling.repeat_penalty == 1.0f || req.sampling.repeat_last_n == 0);
  if (!argmax) {
    result_.seed = resolve_seed(req.sampling);
    sampler_ = new_sampler(scope, vocab, req.sampling, result_.seed);
    for (llama_token t : prompt) llama_sampler_accept(sampler_.get(), t);
  }
}

// The chain goes when the generation ends, not with the scope: a session may
// run several generations, and its scope would keep every chain till its end.
Generation::~Generation() { sampler_.release(); }

llama_token Generation::sample(llama_context* ctx, int32_t row) {
  if (sampler_) return llama_sampler_sample(sampler_.get(), ctx, row);
  const float* logits = llama_get_logits_ith(ctx, row);
  if (!logits) throw Error("llama.cpp returned no logits for batch row " + std::to_string(row));
  return argmax(logits, n_vocab_);
}

bool Generation::accept(llama_token t, int32_t pos, int32_t n_ctx, std::string& text) {
  GenerateResult& r = result_;
  if (r.tokens.empty()) r.timings.first_token_ms = ms(start_, Clock::now());
  if (llama_vocab_is_eog(vocab_, t)) {
    r.finish = FinishReason::eos;
    return true;
  }
  r.tokens.push_back(t);
  text += stream_.push(token_piece(vocab_, t));
  if (stream_.stopped()) {
    r.finish = FinishReason::stop;
    r.stop = stream_.matched_stop();
    return true;
  }
  if (max_tokens_ >= 0 && static_cast<int32_t>(r.tokens.size()) >= max_tokens_) {
    r.finish = FinishReason::length;
    return true;
  }
  if (pos >= n_ctx) {
    r.finish = FinishReason::context;
    return true;
  }
  return false;
}

std::string Generation::finish() {
  const Clock::time_point now = Clock::now();
  result_.timings.generated_tokens = static_cast<int32_t>(result_.tokens.size());
  if (result_.timings.prompt_ms == 0 && prompt_done_ == start_) result_.timings.prompt_ms = ms(start_, now);
  result_.timings.generate_ms = prompt_done_ == start_ ? 0 : ms(prompt_done_, now);
  result_.timings.total_ms = ms(start_, now);
  return stream_.finish();
}

}  // namespace reclaim
