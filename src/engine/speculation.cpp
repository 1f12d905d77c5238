#include "engine/speculation.h"

#include <algorithm>

#include <ngram-map.h>

#include "core/error.h"

namespace reclaim {

bool speculation_from_name(const std::string& name, Speculation::Kind& out) {
  if (name == "none") {
    out = Speculation::Kind::none;
  } else if (name == "ngram-simple") {
    out = Speculation::Kind::ngram;
  } else if (name == "draft-simple") {
    out = Speculation::Kind::draft;
  } else {
    return false;
  }
  return true;
}

const char* speculation_name(Speculation::Kind kind) {
  switch (kind) {
    case Speculation::Kind::none: return "none";
    case Speculation::Kind::ngram: return "ngram-simple";
    case Speculation::Kind::draft: return "draft-simple";
  }
  return "?";
}

void validate(const Speculation& s) {
  if (s.kind == Speculation::Kind::draft && s.draft.empty()) throw Error("draft-simple needs a draft model's file");
  if (s.draft_max < 1 || s.draft_max > kMaxDraft) {
    throw Error("draft_max must be 1.." + std::to_string(kMaxDraft) + ", not " + std::to_string(s.draft_max));
  }
  if (s.draft_min < 0 || s.draft_min > s.draft_max) {
    throw Error("draft_min must be 0..draft_max (" + std::to_string(s.draft_max) + "), not " + std::to_string(s.draft_min));
  }
  if (s.ngram_n < 1 || s.ngram_n > 1024) throw Error("the n-gram size must be 1..1024, not " + std::to_string(s.ngram_n));
  if (s.ngram_m < 1 || s.ngram_m > 1024) throw Error("the m-gram size must be 1..1024, not " + std::to_string(s.ngram_m));
}

bool can_speculate(const llama_model* model) { return !llama_model_is_recurrent(model) && !llama_model_is_hybrid(model); }

void ngram_guess(const Speculation& s, const std::vector<llama_token>& history, llama_token next, int32_t n_max,
                 std::vector<llama_token>& guess) {
  guess.clear();
  if (n_max < std::max(1, s.draft_min)) return;
  const common_ngram_simple_config config{static_cast<uint16_t>(s.ngram_n), static_cast<uint16_t>(s.ngram_m)};
  guess = common_ngram_simple_draft(config, history, next);
  if (static_cast<int32_t>(guess.size()) > n_max) guess.resize(static_cast<size_t>(n_max));
  if (static_cast<int32_t>(guess.size()) < s.draft_min) guess.clear();
}

}  // namespace reclaim
