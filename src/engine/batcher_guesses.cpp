// The guesses a speculating batch decodes beside each sequence's next token:
// the n-gram lookup's, or the draft model's asked for once a step.
#include <algorithm>

#include "engine/batcher.h"
#include "engine/batcher_job.h"
#include "engine/core_turns.h"
#include "engine/model.h"

namespace reclaim {

void Batcher::guess_next(Job& j) {
  j.guess.clear();
  // The guesses are text; a prompt's images are not (their stand-ins are
  // no tokens a draft could read).
  if (!spec_.on() || j.images) return;
  // Tokens past the request's length or its context would be decoded for
  // nothing: the step makes 1 + guesses tokens at most.
  int32_t n_max = std::min(spec_.draft_max, n_ctx_seq_ - j.n_past - 1);
  if (const int32_t max_tokens = j.gen->max_tokens(); max_tokens >= 0) {
    n_max = std::min(n_max, max_tokens - static_cast<int32_t>(j.result->tokens.size()) - 1);
  }
  if (!drafter_) {
    ngram_guess(spec_, j.history, j.next, n_max, j.guess);
  } else if (n_max >= std::max(1, spec_.draft_min)) {
    // Never below draft_min: a shorter guess would not be decoded, and its
    // verdict never reached.
    if (int32_t n = j.pace.allow(n_max); n > 0) {
      n = std::min(n_max, std::max(n, spec_.draft_min));
      asks_.push_back(Drafter::Ask{j.seq, &j.history, j.next, n, &j.guess});
    }
  }
}

void Batcher::draft_guesses() {
  if (asks_.empty()) return;
  // The jobs asking are in their slots until their next step: only this
  // thread retires them.
  const bool done = drafter_->guess(asks_, [this](llama_context* c, llama_batch b) {
    DecodeTurn turn(model_);
    return llama_decode(c, b);
  });
  for (Drafter::Ask& q : asks_) {
    if (!done || static_cast<int32_t>(q.guess->size()) < spec_.draft_min) q.guess->clear();
  }
  asks_.clear();
}

}  // namespace reclaim
