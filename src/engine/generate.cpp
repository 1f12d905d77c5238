#include "engine/generate.h"

#include <chrono>
#include <mutex>

#include "core/defer.h"
#include "engine/text_stream.h"

namespace reclaim {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::eos: return "eos";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::context: return "context";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, std::string_view text, bool add_special,
                                  bool parse_special) {
  if (text.size() > static_cast<size_t>(INT32_MAX) / 2) throw Error("prompt of " + std::to_string(text.size()) + " bytes is too long to tokenize");
  const auto len = static_cast<int32_t>(text.size());
  // A token is at least one byte, plus BOS/EOS.
  std::vector<llama_token> tokens(static_cast<size_t>(len) + 4);
  int32_t n = llama_tokenize(vocab, text.data(), len, tokens.data(), static_cast<int32_t>(tokens.size()), add_special,
                             parse_special);
  if (n < 0) {
    tokens.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), len, tokens.data(), static_cast<int32_t>(tokens.size()), add_special,
                       parse_special);
  }
  if (n < 0) throw Error("cannot tokenize the prompt (" + std::to_string(text.size()) + " bytes)");
  tokens.resize(static_cast<size_t>(n));
  return tokens;
}

std::string token_piece(const llama_vocab* vocab, llama_token token) {
  char buf[256];
  int32_t n = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, false);
  if (n >= 0) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab, token, big.data(), static_cast<int32_t>(big.size()), 0, false);
  big.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return big;
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

void check_context_fits(int32_t n_prompt, int32_t max_tokens, int32_t n_ctx) {
  if (n_prompt > n_ctx) {
    throw ContextOverflow("the prompt is " + std::to_string(n_prompt) + " tokens, longer than the context of " +
                          std::to_string(n_ctx) + " tokens");
  }
  const int64_t needed = static_cast<int64_t>(n_prompt) + max_tokens - 1;
  if (max_tokens > 0 && needed > n_ctx) {
    throw ContextOverflow("the prompt (" + std::to_string(n_prompt) + " tokens) plus up to " + std::to_string(max_tokens) +
                          " generated tokens need " + std::to_string(needed) +
                          " positions, more than the context of " + std::to_string(n_ctx) + " tokens");
  }
}

namespace {

void fill(llama_batch& b, const llama_token* tokens, int32_t n, int32_t pos, bool last_logits) {
  b.n_tokens = n;
  for (int32_t i = 0; i < n; ++i) {
    b.token[i] = tokens[i];
    b.pos[i] = pos + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = last_logits && i == n - 1;
  }
}

// false: aborted by the cancel token.
bool decode(Session& s, const llama_batch& b) {
  int32_t rc;
  {
    std::lock_guard lock(s.model().decode_mutex());  // one graph at a time on the model's pool
    rc = llama_decode(s.context(), b);
  }
  if (rc == 0) return true;
  if (s.cancelled()) return false;
  throw Error("llama_decode failed (code " + std::to_string(rc) + ") at a batch of " + std::to_string(b.n_tokens) + " tokens");
}

}  // namespace

GenerateResult generate(Session& s, const GenerateRequest& req, const GenerateHooks& hooks) {
  const Clock::time_point start = Clock::now();
  const llama_vocab* vocab = s.model().vocab();
  GenerateResult r;
  std::vector<llama_token> prompt =
      req.prompt_tokens.empty() ? tokenize(vocab, req.prompt, req.add_special) : req.prompt_tokens;
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  for (llama_token t : prompt) {
    if (t < 0 || t >= n_vocab) throw Error("prompt token " + std::to_string(t) + " is not in the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
  }
  if (prompt.empty()) throw Error("the prompt is empty (no tokens)");
  const auto n_prompt = static_cast<int32_t>(prompt.size());
  check_context_fits(n_prompt, req.max_tokens, s.n_ctx());
  r.timings.prompt_tokens = n_prompt;

  // Plain greedy needs no sampler chain: an argmax over the logits picks the
  // same token as llama.cpp's greedy sampler (the first of equal maxima)
  // without building the candidate array of the whole vocabulary each step,
  // which cost 7% of generation speed with a 151,936-token vocab
  // (bench/generate: tg 0.93x of llama-bench with the chain, 1.0x without).
  validate(req.sampling);
  const bool argmax = req.sampling.greedy() && (req.sampling.repeat_penalty == 1.0f || req.sampling.repeat_last_n == 0);
  Owned<llama_sampler> sampler;
  if (!argmax) {
    r.seed = resolve_seed(req.sampling);
    sampler = new_sampler(s.scope(), vocab, req.sampling, r.seed);
    for (llama_token t : prompt) llama_sampler_accept(sampler.get(), t);
  }
  Defer release_sampler([&] { sampler.release(); });
  auto sample = [&]() -> llama_token {
    if (!argmax) return llama_sampler_sample(sampler.get(), s.context(), -1);
    const float* logits = llama_get_logits_ith(s.context(), -1);
    if (!logits) throw Error("llama.cpp returned no logits for the last token");
    llama_token best = 0;
    for (int32_t i = 1; i < n_vocab; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return best;
  };

  // Marks every cell free; the buffers need no zeroing (llama-bench does the same).
  llama_memory_clear(llama_get_memory(s.context()), false);
  auto cancelled = [&] {
    if (!s.cancelled()) return false;
    r.finish = FinishReason::cancelled;
    r.cancel_reason = s.cancel_token()->reason();
    return true;
  };
  int step = 0;
  llama_batch& batch = s.batch();
  for (int32_t done = 0; done < n_prompt;) {
    const int32_t n = std::min(s.n_batch(), n_prompt - done);
    if (hooks.before_decode) hooks.before_decode(step, true);
    ++step;
    fill(batch, prompt.data() + done, n, done, done + n == n_prompt);
    if (cancelled() || !decode(s, batch)) {
      cancelled();
      r.timings.prompt_ms = ms_since(start);
      r.timings.total_ms = r.timings.prompt_ms;
      return r;
    }
    done += n;
  }
  const Clock::time_point prompt_done = Clock::now();
  r.timings.prompt_ms = std::chrono::duration<double, std::milli>(prompt_done - start).count();

  TextStream stream(req.stop);
  auto emit = [&](std::string text) {
    if (text.empty()) return;
    if (hooks.on_text) hooks.on_text(text);
    r.text += text;
  };
  int32_t pos = n_prompt;
  for (;;) {
    if (cancelled()) break;
    const llama_token t = sample();
    if (r.tokens.empty()) r.timings.first_token_ms = ms_since(start);
    if (llama_vocab_is_eog(vocab, t)) {
      r.finish = FinishReason::eos;
      break;
    }
    r.tokens.push_back(t);
    emit(stream.push(token_piece(vocab, t)));
    if (stream.stopped()) {
      r.finish = FinishReason::stop;
      r.stop = stream.matched_stop();
      break;
    }
    const auto n_gen = static_cast<int32_t>(r.tokens.size());
    if (req.max_tokens >= 0 && n_gen >= req.max_tokens) {
      r.finish = FinishReason::length;
      break;
    }
    if (pos >= s.n_ctx()) {
      r.finish = FinishReason::context;
      break;
    }
    if (hooks.before_decode) hooks.before_decode(step, false);
    ++step;
    if (cancelled()) break;
    fill(batch, &t, 1, pos, true);
    if (!decode(s, batch)) {
      cancelled();
      break;
    }
    ++pos;
  }
  emit(stream.finish());
  r.timings.generated_tokens = static_cast<int32_t>(r.tokens.size());
  r.timings.generate_ms = ms_since(prompt_done);
  r.timings.total_ms = ms_since(start);
  return r;
}

}  // namespace reclaim
