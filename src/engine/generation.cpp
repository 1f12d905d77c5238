#include "engine/generation.h"

#include <algorithm>
#include <cmath>

#include "engine/image_prompt.h"

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
                       const std::vector<llama_token>& prompt, int32_t n_ctx, GenerateResult& result)
    : vocab_(vocab), n_vocab_(llama_vocab_n_tokens(vocab)), max_tokens_(req.max_tokens), result_(result),
      grammar_token_time_(req.grammar_token_time), stream_(req.stop) {
  result_.timings.prompt_tokens = static_cast<int32_t>(prompt.size());
  // Plain greedy needs no sampler chain: an argmax over the logits picks the
  // same token as llama.cpp's greedy sampler (the first of equal maxima)
  // without building the candidate array of the whole vocabulary each step,
  // which cost 7% of generation speed with a 151,936-token vocab
  // (bench/generate: tg 0.93x of llama-bench with the chain, 1.0x without).
  validate(req.sampling);
  const bool argmax = req.sampling.plain_greedy() && req.grammar.empty();
  if (!argmax) {
    result_.seed = resolve_seed(req.sampling);
    // The penalties' window is a buffer of its length: no longer than the
    // sequence can be (-1, llama.cpp's "the context", is that too).
    SamplingParams sampling = req.sampling;
    if (sampling.repeat_last_n < 0 || sampling.repeat_last_n > n_ctx) sampling.repeat_last_n = n_ctx;
    sampler_ = new_sampler(scope, vocab, sampling, result_.seed);
    for (llama_token t : prompt) {
      if (!is_image_token(t)) llama_sampler_accept(sampler_.get(), t);
    }
  }
  // The grammar is a sampler apart from the chain: the chain reads the
  // prompt (for its penalties), the grammar only what is generated.
  if (!req.grammar.empty()) grammar_ = new_grammar_sampler(scope, vocab, req.grammar);
  preserved_ = req.preserved_tokens;
  std::sort(preserved_.begin(), preserved_.end());
  if (req.logprobs > kMaxTopLogprobs) throw Error("logprobs: at most " + std::to_string(kMaxTopLogprobs) + " top tokens");
  n_logprobs_ = req.logprobs;
  post_sampling_ = req.post_sampling && n_logprobs_ >= 0;
}

// The chain goes when the generation ends, not with the scope: a session may
// run several generations, and its scope would keep every chain till its end.
Generation::~Generation() {
  grammar_.release();
  sampler_.release();
}

llama_token Generation::sample(llama_context* ctx, int32_t row) {
  const float* logits = llama_get_logits_ith(ctx, row);
  if (!logits) throw Error("llama.cpp returned no logits for batch row " + std::to_string(row));
  llama_token t;
  if (grammar_) {
    t = sample_with_grammar(logits);
  } else if (sampler_) {
    t = post_sampling_ ? draw(logits) : llama_sampler_sample(sampler_.get(), ctx, row);
  } else {
    t = argmax(logits, n_vocab_);
    if (post_sampling_) note_certain(t);  // greedy draws its one token for certain
  }
  if (n_logprobs_ >= 0 && !post_sampling_) note_logprob(logits, t);
  return t;
}

// What llama_sampler_sample does (the chain over the logits as an array,
// then its accept), with the array kept for note_drawn.
llama_token Generation::draw(const float* logits) {
  llama_token_data_array arr = fill(logits);
  const llama_token t = pick(arr);
  llama_sampler_accept(sampler_.get(), t);
  return t;
}

llama_token_data_array Generation::fill(const float* logits) {
  candidates_.resize(static_cast<size_t>(n_vocab_));
  for (int32_t i = 0; i < n_vocab_; ++i) candidates_[static_cast<size_t>(i)] = {i, logits[i], 0.0f};
  return llama_token_data_array{candidates_.data(), candidates_.size(), -1, false};
}

llama_token Generation::pick(llama_token_data_array& arr) {
  llama_sampler_apply(sampler_.get(), &arr);
  if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) throw Error("the sampler chain picked no token");
  const llama_token t = arr.data[arr.selected].id;
  if (post_sampling_) note_drawn(arr, t);
  return t;
}

void Generation::note_certain(llama_token t) {
  sampled_ = TokenLogprob{t, 0.0f, {}};
  if (n_logprobs_ > 0) sampled_.top.emplace_back(t, 0.0f);
}

// The chain's last sampler (dist) leaves each candidate's probability in p,
// those it cut being gone from the array. A greedy chain (temperature 0)
// leaves none: its pick is certain.
void Generation::note_drawn(const llama_token_data_array& arr, llama_token t) {
  order_.clear();
  for (size_t i = 0; i < arr.size; ++i) {
    if (arr.data[i].p > 0.0f) order_.push_back(static_cast<int32_t>(i));
  }
  if (order_.empty()) {
    note_certain(t);
    return;
  }
  sampled_ = TokenLogprob{t, -INFINITY, {}};
  for (size_t i = 0; i < arr.size; ++i) {
    if (arr.data[i].id == t) sampled_.logprob = std::log(arr.data[i].p);
  }
  if (n_logprobs_ == 0) return;
  const auto n = std::min(order_.size(), static_cast<size_t>(n_logprobs_));
  std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), order_.end(), [&](int32_t a, int32_t b) {
    return arr.data[a].p > arr.data[b].p || (arr.data[a].p == arr.data[b].p && arr.data[a].id < arr.data[b].id);
  });
  for (size_t k = 0; k < n; ++k) sampled_.top.emplace_back(arr.data[order_[k]].id, std::log(arr.data[order_[k]].p));
}

void Generation::note_logprob(const float* logits, llama_token t) {
  float max = logits[0];
  for (int32_t i = 1; i < n_vocab_; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab_; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  sampled_ = TokenLogprob{t, logits[t] - log_z, {}};
  if (n_logprobs_ == 0) return;
  const auto n = static_cast<size_t>(std::min(n_logprobs_, n_vocab_));
  order_.resize(static_cast<size_t>(n_vocab_));
  for (int32_t i = 0; i < n_vocab_; ++i) order_[static_cast<size_t>(i)] = i;
  std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), order_.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t k = 0; k < n; ++k) sampled_.top.emplace_back(order_[k], logits[order_[k]] - log_z);
}

std::vector<TokenLogprob> Generation::take_logprobs() {
  std::vector<TokenLogprob> out(result_.logprobs.begin() + static_cast<std::ptrdiff_t>(logprobs_taken_), result_.logprobs.end());
  logprobs_taken_ = result_.logprobs.size();
  return out;
}

// common_sampler_sample's way: the chain picks from the logits alone, and
// only when the grammar refuses that pick does it mask the whole vocabulary
// and the chain pick again. Masking costs the grammar a look at every token
// of the vocabulary; a model that mostly writes what the grammar allows (a
// trained one) pays it rarely, random weights nearly every step.
llama_token Generation::sample_with_grammar(const float* logits) {
  try {
    llama_token_data_array arr = fill(logits);
    llama_token t = pick(arr);
    llama_token_data one{t, 1.0f, 0.0f};
    llama_token_data_array single{&one, 1, -1, false};
    llama_sampler_apply(grammar_.get(), &single);
    if (std::isinf(one.logit) && one.logit < 0) {
      arr = fill(logits);
      mask_with_grammar(arr);
      const bool any = std::any_of(arr.data, arr.data + arr.size, [](const llama_token_data& d) { return std::isfinite(d.logit); });
      if (!any) {
        throw GrammarDeadEnd("the grammar allows no token of this model's vocabulary after the " +
                             std::to_string(result_.tokens.size()) + " tokens it accepted: it cannot be completed");
      }
      t = pick(arr);
    }
    llama_sampler_accept(grammar_.get(), t);
    llama_sampler_accept(sampler_.get(), t);
    return t;
  } catch (const Error&) {
    throw;
  } catch (const Stopped&) {
    throw;
  } catch (const std::exception& e) {
    // What llama.cpp's grammar throws as it runs: the text it accepted
    // opened more alternatives than its bound (grammar-stack-bound.patch).
    throw GrammarTooCostly(std::string("the grammar went over a bound as it ran: ") + e.what());
  }
}

// The grammar over the whole vocabulary, a slice at a time: each token is
// weighed alone (llama.cpp's grammar apply sets a refused token's logit to
// -inf), so slices give what one call would, and between them the request
// can be stopped and its time checked. One token's weighing costs the
// grammar's open alternatives times the vocabulary, on the decode thread
// that the model's other requests share: a `grammar` of 1,000 one-word
// alternatives took about 12 s a token on the bpe test model before this
// bound (HostileText.AGrammarTooCostlyForTheVocabularyIsA400 prints what
// one takes now).
void Generation::mask_with_grammar(llama_token_data_array& arr) {
  constexpr size_t kSlice = 1024;
  const Clock::time_point until = Clock::now() + grammar_token_time_;
  for (size_t at = 0; at < arr.size; at += kSlice) {
    if (stopped_ && stopped_()) throw Stopped{};
    if (at > 0 && Clock::now() > until) {
      throw GrammarTooCostly("the grammar took more than " + std::to_string(grammar_token_time_.count()) +
                             " ms to weigh this model's vocabulary for one token (it had weighed " + std::to_string(at) +
                             " of " + std::to_string(arr.size) + " tokens): it has too many alternatives open at once");
    }
    llama_token_data_array slice{arr.data + at, std::min(kSlice, arr.size - at), -1, false};
    llama_sampler_apply(grammar_.get(), &slice);
  }
}

bool Generation::accept(llama_token t, int32_t pos, int32_t n_ctx, std::string& text) {
  GenerateResult& r = result_;
  if (r.tokens.empty()) r.timings.first_token_ms = ms(start_, Clock::now());
  ++samples_;
  if (llama_vocab_is_eog(vocab_, t)) {
    r.finish = FinishReason::eos;
    return true;
  }
  r.tokens.push_back(t);
  if (n_logprobs_ >= 0 && sampled_.token == t) r.logprobs.push_back(std::move(sampled_));
  const bool preserved = std::binary_search(preserved_.begin(), preserved_.end(), t);
  text += stream_.push(token_piece(vocab_, t, preserved));
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

Timings Generation::timings_now() const {
  const Clock::time_point now = Clock::now();
  Timings t = result_.timings;
  t.generated_tokens = static_cast<int32_t>(result_.tokens.size());
  t.generate_decodes = samples_ > 0 ? samples_ - 1 : 0;
  if (prompt_done_ == start_) {
    t.prompt_ms = ms(start_, now);
  } else {
    t.generate_ms = ms(prompt_done_, now);
  }
  t.total_ms = ms(start_, now);
  return t;
}

std::string Generation::finish() {
  const Clock::time_point now = Clock::now();
  result_.timings.generated_tokens = static_cast<int32_t>(result_.tokens.size());
  // The first token comes from the prompt's last logits; each one after it
  // (an end token too) from a decode of the one before.
  result_.timings.generate_decodes = samples_ > 0 ? samples_ - 1 : 0;
  if (result_.timings.prompt_ms == 0 && prompt_done_ == start_) result_.timings.prompt_ms = ms(start_, now);
  result_.timings.generate_ms = prompt_done_ == start_ ? 0 : ms(prompt_done_, now);
  result_.timings.total_ms = ms(start_, now);
  return stream_.finish();
}

}  // namespace reclaim
