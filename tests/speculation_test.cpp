// Speculation's parts that need no model: its settings, the n-gram lookup
// as the pinned common library gives it, and the pace of a draft model's
// guesses.
#include "engine/speculation.h"

#include <gtest/gtest.h>

#include "core/error.h"

using namespace reclaim;

TEST(Speculation, ItsNamesAreLlamaServersAndItsBoundsAreChecked) {
  Speculation::Kind k = Speculation::Kind::none;
  EXPECT_TRUE(speculation_from_name("ngram-simple", k));
  EXPECT_EQ(k, Speculation::Kind::ngram);
  EXPECT_TRUE(speculation_from_name("draft-simple", k));
  EXPECT_EQ(k, Speculation::Kind::draft);
  EXPECT_FALSE(speculation_from_name("eagle3", k));
  EXPECT_STREQ(speculation_name(Speculation::Kind::ngram), "ngram-simple");
  Speculation s;
  s.kind = Speculation::Kind::ngram;
  EXPECT_NO_THROW(validate(s));
  s.draft_max = kMaxDraft + 1;
  EXPECT_THROW(validate(s), Error);
  s.draft_max = 4;
  s.draft_min = 5;
  EXPECT_THROW(validate(s), Error);
  s.draft_min = 0;
  s.kind = Speculation::Kind::draft;
  EXPECT_THROW(validate(s), Error);  // no draft model's file
  s.draft = "draft.gguf";
  EXPECT_NO_THROW(validate(s));
}

// The lookup proposes what followed the latest earlier match of the last
// n tokens (the sampled one last), cut to n_max and to nothing below
// draft_min.
TEST(Speculation, TheNgramGuessIsWhatFollowedTheLastMatch) {
  Speculation s;
  s.kind = Speculation::Kind::ngram;
  s.ngram_n = 2;
  s.ngram_m = 4;
  // The lookup never matches at position 0 (llama.cpp's "no match").
  const std::vector<llama_token> history = {7, 1, 2, 3, 4, 5, 6, 9, 9, 1};
  std::vector<llama_token> guess;
  ngram_guess(s, history, 2, 8, guess);  // "1 2" appeared near the start, then 3 4 5 6
  EXPECT_EQ(guess, (std::vector<llama_token>{3, 4, 5, 6}));
  ngram_guess(s, history, 2, 3, guess);
  EXPECT_EQ(guess, (std::vector<llama_token>{3, 4, 5}));
  ngram_guess(s, history, 7, 8, guess);  // "1 7" never appeared
  EXPECT_TRUE(guess.empty());
  s.draft_min = 5;
  ngram_guess(s, history, 2, 8, guess);
  EXPECT_TRUE(guess.empty());
}

// A draft that is always right guesses 1 token, then draft_max; one that is never right guesses one token and rests 3, 7, 15,
// ... steps, at most 255; a partly right one guesses what was kept and one
// more.
TEST(Speculation, TheGuessGrowsWhileKeptAndRestsLongerAfterEachMiss) {
  GuessPace right;
  std::vector<int32_t> lengths;
  for (int i = 0; i < 6; ++i) {
    const int32_t n = right.allow(100);
    lengths.push_back(n);
    right.judged(n, n, 8);
  }
  EXPECT_EQ(lengths, (std::vector<int32_t>{1, 8, 8, 8, 8, 8}));
  EXPECT_EQ(right.allow(3), 3);  // never past what the step may take

  GuessPace wrong;
  std::vector<int> guessed_at;
  for (int step = 0; step < 1200; ++step) {
    const int32_t n = wrong.allow(8);
    if (n == 0) continue;
    EXPECT_EQ(n, 1) << "at step " << step;
    guessed_at.push_back(step);
    wrong.judged(n, 0, 8);
  }
  EXPECT_EQ(guessed_at, (std::vector<int>{0, 4, 12, 28, 60, 124, 252, 508, 764, 1020}));

  GuessPace partly;
  partly.judged(1, 1, 8);
  EXPECT_EQ(partly.allow(8), 8);
  partly.judged(8, 2, 8);
  EXPECT_EQ(partly.allow(8), 3);
  partly.judged(3, 0, 8);  // a miss: one token, after a rest of 3
  for (int i = 0; i < 3; ++i) EXPECT_EQ(partly.allow(8), 0);
  EXPECT_EQ(partly.allow(8), 1);
}
