// Speculative decoding: a generating sequence puts the token it sampled and
// a guess at the tokens after it into one step's batch, each with its row of
// logits. The rows are sampled in order, as one-token steps would have
// sampled them; the guesses the model picks itself are kept, and the cells
// of the first one it does not pick, and of all after it, are dropped. The
// output is what it would have been without the guesses; a right guess saves
// a step (the weights are read once for all its rows), a wrong one costs a
// row.
//
// Guesses come from the sequence itself: the tokens that followed the last
// time its latest n tokens appeared (llama-server's ngram-simple, by the
// pinned common library's own lookup). Text that repeats what it read (code
// edits, quotes, a summary of a list) guesses right often; prose rarely, and
// a step with no guess costs nothing more. Or from a draft model, a small
// one of the same vocabulary run greedily (engine/drafter.h): each guess
// costs its decode, and pays where the two models agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <llama.h>

namespace reclaim {

struct Speculation {
  enum class Kind { none, ngram, draft };
  Kind kind = Kind::none;
  std::string draft;  // the draft model's file (Kind::draft)
  // The most tokens guessed in one step, and the fewest worth a step's rows
  // (a shorter guess is not decoded).
  int32_t draft_max = 16;
  int32_t draft_min = 0;
  // The n-gram lookup's: the tokens matched (the sampled one last), and the
  // most tokens after the match it proposes (llama-server's defaults).
  int32_t ngram_n = 12;
  int32_t ngram_m = 48;

  bool on() const { return kind != Kind::none; }
  bool operator==(const Speculation&) const = default;
};

// "none", "ngram-simple" or "draft-simple" (llama-server's --spec-type
// names) into `out`; false for any other name.
bool speculation_from_name(const std::string& name, Speculation::Kind& out);
const char* speculation_name(Speculation::Kind kind);
inline constexpr const char* kSpeculationNames = "none, ngram-simple or draft-simple";
// The most tokens a step may guess: that many more rows of logits for each
// sequence, past any guess that pays on the CPU (a row costs about as much
// as a one-token step once the matrix products stop being bound by reads).
inline constexpr int32_t kMaxDraft = 64;

// Throws Error naming the field out of its range.
void validate(const Speculation& s);

// Whether a model's memory can drop the cells of the guesses it refused: a
// KV cache can; a recurrent state is one state a sequence, not one a
// position, so a model with one (recurrent or hybrid) decodes without
// guesses (llama-server's common_context_can_seq_rm says so too).
bool can_speculate(const llama_model* model);

// How much a sequence guesses with a draft model, whose every guessed token
// costs a decode of the draft: the guess starts at one token and is
// draft_max long once the target kept a whole one; it shrinks to what was
// kept and one more when part is refused; a guess refused whole rests the
// sequence 3, 7, 15, ... 255 steps before it guesses one token again. A
// draft that is never right then costs a one-token guess (and the draft's
// reading of the tokens since its last one) once in hundreds of steps.
// bench-speculation measures the loss it leaves.
class GuessPace {
 public:
  // The most tokens to guess this step (0: rest), at most n_max.
  int32_t allow(int32_t n_max) {
    if (rest_ > 0) {
      --rest_;
      return 0;
    }
    return n_max < length_ ? n_max : length_;
  }
  // A step's verdict: `kept` of the `guessed` tokens were the target's.
  void judged(int32_t guessed, int32_t kept, int32_t draft_max) {
    if (guessed <= 0) return;
    if (kept == 0) {
      misses_ = misses_ < 7 ? misses_ + 1 : 7;
      rest_ = (2 << misses_) - 1;
      length_ = 1;
      return;
    }
    misses_ = 0;
    length_ = kept == guessed ? draft_max : kept + 1;
  }

 private:
  int32_t length_ = 1, misses_ = 0, rest_ = 0;
};

// The guess after `next` for a sequence whose cells hold `history`: at most
// `n_max` tokens, none when there is no match or fewer than draft_min.
void ngram_guess(const Speculation& s, const std::vector<llama_token>& history, llama_token next, int32_t n_max,
                 std::vector<llama_token>& guess);

}  // namespace reclaim
