#include "engine/generate.h"

#include <mutex>
#include <optional>

#include "engine/core_turns.h"
#include "engine/generation.h"

namespace reclaim {

bool has_tokenizer(const llama_vocab* vocab) { return llama_vocab_type(vocab) != LLAMA_VOCAB_TYPE_NONE; }

void check_token_ids(const llama_vocab* vocab, const std::vector<llama_token>& tokens) {
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  for (llama_token t : tokens) {
    if (t < 0 || t >= n_vocab) {
      throw BadPrompt("prompt token " + std::to_string(t) + " is not in the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
    }
  }
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, std::string_view text, bool add_special,
                                  bool parse_special) {
  if (!has_tokenizer(vocab)) {
    throw NoTokenizer("this model has no tokenizer (llama.cpp's no_vocab): it takes token ids, not text");
  }
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

std::string token_piece(const llama_vocab* vocab, llama_token token, bool special) {
  if (!has_tokenizer(vocab)) return {};
  char buf[256];
  int32_t n = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, special);
  if (n >= 0) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab, token, big.data(), static_cast<int32_t>(big.size()), 0, special);
  big.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return big;
}

void check_context_fits(int32_t n_prompt, int32_t max_tokens, int32_t n_ctx) {
  if (n_prompt > n_ctx) {
    throw ContextOverflow("the prompt is " + std::to_string(n_prompt) + " tokens, longer than the context of " +
                              std::to_string(n_ctx) + " tokens",
                          n_prompt, n_ctx);
  }
  const int64_t needed = static_cast<int64_t>(n_prompt) + max_tokens - 1;
  if (max_tokens > 0 && needed > n_ctx) {
    throw ContextOverflow("the prompt (" + std::to_string(n_prompt) + " tokens) plus up to " + std::to_string(max_tokens) +
                              " generated tokens need " + std::to_string(needed) +
                              " positions, more than the context of " + std::to_string(n_ctx) + " tokens",
                          n_prompt, n_ctx);
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

// false: aborted by the cancel token. The step's turn (engine/core_turns.h)
// is held in `turn` until its sampling is done; a previous one goes first.
bool decode(Session& s, const llama_batch& b, std::optional<StepTurn>& turn) {
  turn.emplace(s.model());
  const int32_t rc = llama_decode(s.context(), b);
  if (rc == 0) return true;
  if (s.cancelled()) return false;
  throw Error("llama_decode failed (code " + std::to_string(rc) + ") at a batch of " + std::to_string(b.n_tokens) + " tokens");
}

}  // namespace

GenerateResult generate(Session& s, const GenerateRequest& req, const GenerateHooks& hooks) {
  const llama_vocab* vocab = s.model().vocab();
  GenerateResult r;
  const std::vector<llama_token> prompt = prompt_tokens(vocab, req, s.n_ctx());
  const auto n_prompt = static_cast<int32_t>(prompt.size());
  Generation gen(s.scope(), vocab, req, prompt, s.n_ctx(), r);
  gen.stop_when([&s] { return s.cancelled(); });

  // Marks every cell free; the buffers need no zeroing (llama-bench does the same).
  llama_memory_clear(llama_get_memory(s.context()), false);
  auto cancelled = [&] {
    if (!s.cancelled()) return false;
    r.finish = FinishReason::cancelled;
    r.cancel_reason = s.cancel_token()->reason();
    return true;
  };
  std::string text;
  auto emit = [&] {
    if (text.empty()) return;
    if (hooks.on_text) hooks.on_text(text);
    r.text += text;
    text.clear();
  };
  int step = 0;
  llama_batch& batch = s.batch();
  std::optional<StepTurn> turn;
  for (int32_t done = 0; done < n_prompt;) {
    const int32_t n = std::min(s.n_batch(), n_prompt - done);
    turn.reset();
    if (hooks.before_decode) hooks.before_decode(step, true);
    if (hooks.tick) hooks.tick();
    ++step;
    fill(batch, prompt.data() + done, n, done, done + n == n_prompt);
    if (cancelled() || !decode(s, batch, turn)) {
      cancelled();
      gen.finish();
      return r;
    }
    done += n;
  }
  gen.prompt_done();

  for (int32_t pos = n_prompt;; ++pos) {
    if (cancelled()) break;
    const size_t before = r.tokens.size();
    llama_token next;
    try {
      next = gen.sample(s.context(), -1);
    } catch (const Generation::Stopped&) {
      cancelled();
      break;
    }
    turn.reset();  // the text's hooks may wait on a reader
    const bool end = gen.accept(next, pos, s.n_ctx(), text);
    if (hooks.on_logprobs && req.logprobs >= 0) hooks.on_logprobs(gen.take_logprobs());
    emit();
    if (hooks.on_tokens && r.tokens.size() != before) hooks.on_tokens(static_cast<int32_t>(r.tokens.size()));
    if (end) break;
    if (hooks.before_decode) hooks.before_decode(step, false);
    if (hooks.tick) hooks.tick();
    ++step;
    if (cancelled()) break;
    const llama_token t = r.tokens.back();
    fill(batch, &t, 1, pos, true);
    if (!decode(s, batch, turn)) {
      cancelled();
      break;
    }
  }
  text = gen.finish();
  emit();
  return r;
}

}  // namespace reclaim
