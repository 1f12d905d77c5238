// The batch's prompt cache (engine/prompt_cache.h): what a request reuses,
// counted in decoded tokens; the tokens it gives, the same as without it;
// where its cells are on the ledger.
#include <gtest/gtest.h>

#include "sanitized.h"

#include "core/ledger.h"
#include "engine/batcher.h"
#include "engine/model.h"
#include "batch_checks.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::cells_left;
using reclaim::testing::sequence_empty;
using reclaim::testing::sequence_holds_its_cache;
using reclaim::testing::small_model;
using reclaim::testing::small_session;
using reclaim::testing::expect_as_alone;
using reclaim::testing::judged;

namespace {

ModelLoad load() { return reclaim::testing::small_load(); }

GenerateRequest request(std::vector<llama_token> prompt, int max_tokens = 12, bool cache = true) {
  GenerateRequest r;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.cache_prompt = cache;
  return judged(r);
}

// A chat as a client sends it: each turn the whole conversation so far,
// then the next message.
class Conversation {
 public:
  Conversation(Model& model, std::string opening) : model_(model) {
    tokens_ = tokenize(model.vocab(), opening, true);
  }
  GenerateRequest turn(const std::string& message, bool cache = true) {
    for (llama_token t : tokenize(model_.vocab(), message, false)) tokens_.push_back(t);
    return request(tokens_, 12, cache);
  }
  void answered(const GenerateResult& r) { tokens_.insert(tokens_.end(), r.tokens.begin(), r.tokens.end()); }

 private:
  Model& model_;
  std::vector<llama_token> tokens_;
};

const std::vector<std::string> kMessages = {
    " Tell me about the rivers of the north and where they run.",
    " And the mountains they come from?",
    " Which of them freezes first in the winter, and for how long?",
    " Thank you; now the sea they all reach.",
};

const LedgerEntry* cache_entry(Model& model) {
  static LedgerEntry found;
  for (const LedgerEntry& e : Ledger::process().entries()) {
    if (e.owner == model.scope().path() + "/cache" && e.kind == Kind::prompt_cache) {
      found = e;
      return &found;
    }
  }
  return nullptr;
}

}  // namespace

TEST(PromptCache, ANextTurnDecodesOnlyWhatIsNew) {
  Model model(load());
  Batcher& b = model.start_batcher({1, small_session(512)});
  Conversation chat(model, "A conversation about water.");
  GenerateRequest q = chat.turn(kMessages[0]);
  GenerateResult r = b.generate(q);
  EXPECT_EQ(r.timings.cached_tokens, 0);
  ASSERT_EQ(b.cached_tokens(0), cells_left(r));
  EXPECT_TRUE(sequence_holds_its_cache(b, 0));
  chat.answered(r);

  for (size_t i = 1; i < kMessages.size(); ++i) {
    const size_t cached = b.cached_tokens(0);
    q = chat.turn(kMessages[i]);
    const uint64_t before = b.tokens();
    r = b.generate(q);
    // Everything the last turn left is a prefix of this one's prompt.
    EXPECT_EQ(static_cast<size_t>(r.timings.cached_tokens), cached) << "turn " << i;
    EXPECT_EQ(r.timings.prompt_tokens, static_cast<int32_t>(q.prompt_tokens.size()));
    // Decoded: the prompt's new tokens, then each generated one but the last.
    const size_t generated_decoded = cells_left(r) - q.prompt_tokens.size();
    EXPECT_EQ(b.tokens() - before, q.prompt_tokens.size() - cached + generated_decoded) << "turn " << i;
    EXPECT_TRUE(sequence_holds_its_cache(b, 0));
    chat.answered(r);
  }
}

TEST(PromptCache, TheSameTokensComeWithAndWithoutTheCache) {
  Model model(load());
  Batcher& b = model.start_batcher({1, small_session(512)});
  // One conversation after the other: with one sequence, a request without
  // the cache drops what is cached.
  auto converse = [&](bool cache, int& reused) {
    Conversation chat(model, "A conversation about water.");
    std::vector<GenerateResult> out;
    for (const std::string& m : kMessages) {
      out.push_back(b.generate(chat.turn(m, cache)));
      reused += out.back().timings.cached_tokens;
      chat.answered(out.back());
    }
    return out;
  };
  int reused = 0, reused_without = 0;
  const std::vector<GenerateResult> with = converse(true, reused);
  const std::vector<GenerateResult> without = converse(false, reused_without);
  // Each side's next turn carries its own answers: after a turn where the
  // two part (at a near tie), the conversations are no longer the same.
  for (size_t i = 0; i < kMessages.size(); ++i) {
    if (expect_as_alone(without[i], with[i], "turn " + std::to_string(i)).parted_at >= 0) break;
  }
  EXPECT_GT(reused, 0) << "the cached side never reused anything";
  EXPECT_EQ(reused_without, 0);
}

TEST(PromptCache, APartialMatchReusesTheSharedPart) {
  Model model(load());
  Batcher& b = model.start_batcher({1, small_session(512)});
  const std::vector<llama_token> first = tokenize(model.vocab(), "The rivers of the north run to the sea in spring", true);
  (void)b.generate(request(first));
  const size_t shared = first.size() / 2;
  std::vector<llama_token> second(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(shared));
  for (llama_token t : tokenize(model.vocab(), " but the mountains keep their snow", false)) second.push_back(t);
  ASSERT_NE(second[shared], first[shared]);
  const uint64_t before = b.tokens();
  const GenerateResult r = b.generate(request(second));
  EXPECT_EQ(static_cast<size_t>(r.timings.cached_tokens), shared);
  const size_t generated_decoded = cells_left(r) - second.size();
  EXPECT_EQ(b.tokens() - before, second.size() - shared + generated_decoded);
  // The whole prompt again: all but its last token come from the cache.
  const std::vector<llama_token> again(second.begin(), second.end());
  const GenerateResult a = b.generate(request(again));
  EXPECT_EQ(static_cast<size_t>(a.timings.cached_tokens), again.size() - 1);
  expect_as_alone(r, a, "the whole prompt again");
}

TEST(PromptCache, EachConversationFindsItsOwnSequence) {
  Model model(load());
  Batcher& b = model.start_batcher({2, small_session(512)});
  Conversation one(model, "One conversation, about water."), two(model, "Another, about stone and hills.");
  for (size_t i = 0; i < kMessages.size(); ++i) {
    for (Conversation* c : {&one, &two}) {
      const GenerateRequest q = c->turn(kMessages[i]);
      const GenerateResult r = b.generate(q);
      // From the second turn on, the whole earlier exchange is reused: the
      // other conversation's sequence was not taken.
      if (i > 0) EXPECT_GT(r.timings.cached_tokens, static_cast<int32_t>(q.prompt_tokens.size() / 2)) << "turn " << i;
      c->answered(r);
    }
  }
  for (int32_t s = 0; s < 2; ++s) EXPECT_TRUE(sequence_holds_its_cache(b, s));
}

TEST(PromptCache, CachePromptFalseNeitherReusesNorLeaves) {
  Model model(load());
  Batcher& b = model.start_batcher({1, small_session(512)});
  const std::vector<llama_token> p = tokenize(model.vocab(), "The rivers of the north run to the sea", true);
  (void)b.generate(request(p));
  ASSERT_GT(b.cached_tokens(0), 0u);
  const GenerateResult r = b.generate(request(p, 12, false));
  EXPECT_EQ(r.timings.cached_tokens, 0);
  EXPECT_EQ(b.cached_tokens(0), 0u);
  EXPECT_TRUE(sequence_empty(b, 0));
}

TEST(PromptCache, ItsCellsAreOnTheLedgerAndGoWithTheModel) {
  auto model = std::make_unique<Model>(load());
  Batcher& b = model->start_batcher({1, small_session(512)});
  const LedgerEntry* empty = cache_entry(*model);
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->all_bytes(), 0u);
  const uint64_t model_bytes = Ledger::process().totals().bytes;
  (void)b.generate(request(tokenize(model->vocab(), "The rivers of the north run to the sea in spring", true), 32));
  const LedgerEntry* held = cache_entry(*model);
  ASSERT_NE(held, nullptr);
  // Its share of the KV buffer: moved out of the context's entry, so the
  // total is what it was. (Under a sanitizer the context's entry may read 0:
  // its bytes are the heap's growth, which mallinfo does not see there.)
  if (!reclaim::testing::sanitized()) EXPECT_GT(held->all_bytes(), 0u);
  EXPECT_EQ(Ledger::process().totals().bytes, model_bytes);
  const std::string path = model->scope().path();
  model->unload();
  for (const LedgerEntry& e : Ledger::process().entries()) EXPECT_NE(e.owner.rfind(path, 0), 0u) << e.owner << " " << e.label;
  model.reset();
}

// With one sequence, two conversations take turns: each turn finds the
// other's cells there, saves them to host memory, and puts its own back.
TEST(PromptCache, AConversationWhoseSequenceWasTakenComesBackFromTheStore) {
  Model model(load());
  BatcherOptions o{1, small_session(512)};
  o.cache_ram = 64u << 20;
  Batcher& b = model.start_batcher(o);
  Conversation one(model, "One conversation, about water."), two(model, "Another, about stone and hills.");
  std::vector<GenerateResult> got;
  for (size_t i = 0; i < kMessages.size(); ++i) {
    for (Conversation* c : {&one, &two}) {
      const GenerateRequest q = c->turn(kMessages[i]);
      const size_t saved_before = b.saved_count();
      const GenerateResult r = b.generate(q);
      if (i > 0) {
        // All it left last time came back, and the other's went to the store.
        EXPECT_GT(r.timings.cached_tokens, static_cast<int32_t>(q.prompt_tokens.size() / 2)) << "turn " << i;
        EXPECT_EQ(b.saved_count(), saved_before) << "one save taken back, one made";
      }
      got.push_back(r);
      c->answered(r);
    }
  }
  EXPECT_EQ(b.saved_count(), 1u);
  EXPECT_GT(b.saved_bytes(), 0u);
  // The same tokens as with the store off, where each turn decodes all.
  Model fresh(load());
  Batcher& plain = fresh.start_batcher({1, small_session(512)});
  Conversation one_again(fresh, "One conversation, about water."), two_again(fresh, "Another, about stone and hills.");
  // After a turn where the two part (at a near tie), that conversation is
  // no longer the same on both: the comparison ends there.
  size_t k = 0;
  bool parted = false;
  for (size_t i = 0; i < kMessages.size() && !parted; ++i) {
    for (Conversation* c : {&one_again, &two_again}) {
      const GenerateResult r = plain.generate(c->turn(kMessages[i]));
      parted = parted || expect_as_alone(r, got[k], "turn " + std::to_string(i)).parted_at >= 0;
      ++k;
      c->answered(r);
    }
  }
  EXPECT_EQ(plain.saved_count(), 0u) << "no store: nothing saved";
}

TEST(PromptCache, SavesAreOnTheLedgerWithinTheirCapAndGoWhenDropped) {
  auto model = std::make_unique<Model>(load());
  BatcherOptions o{1, small_session(512)};
  o.cache_ram = 64u << 20;
  Batcher& b = model->start_batcher(o);
  const std::string owner = model->scope().path() + "/cache";
  auto saves_on_ledger = [&] {
    uint64_t bytes = 0;
    size_t n = 0;
    for (const LedgerEntry& e : Ledger::process().entries()) {
      if (e.owner == owner && e.kind == Kind::prompt_cache && e.label.rfind("saved", 0) == 0) {
        bytes += e.all_bytes();
        ++n;
      }
    }
    return std::make_pair(n, bytes);
  };
  for (const char* opening : {"First of three.", "Second of three, longer.", "Third of three, the longest of all."}) {
    (void)b.generate(request(tokenize(model->vocab(), opening, true), 16));
  }
  // Three conversations, one sequence: two saved.
  EXPECT_EQ(b.saved_count(), 2u);
  EXPECT_EQ(saves_on_ledger(), std::make_pair(size_t{2}, b.saved_bytes()));
  // A cap that holds one: the least recently used goes.
  const uint64_t one = b.saved_bytes() / 2;
  b.set_cache_ram(one + one / 2);
  EXPECT_EQ(b.saved_count(), 1u);
  EXPECT_EQ(saves_on_ledger().first, 1u);
  b.drop_saved();
  EXPECT_EQ(b.saved_count(), 0u);
  EXPECT_EQ(b.saved_bytes(), 0u);
  EXPECT_EQ(saves_on_ledger().first, 0u);
  (void)b.generate(request(tokenize(model->vocab(), "A fourth, which saves the third.", true), 16));
  EXPECT_EQ(b.saved_count(), 1u);
  const std::string path = model->scope().path();
  model->unload();
  for (const LedgerEntry& e : Ledger::process().entries()) EXPECT_NE(e.owner.rfind(path, 0), 0u) << e.owner << " " << e.label;
  model.reset();
}

// A save about to be put back is never the one dropped to make room for the
// save of the sequence it goes into: with room for one save, the returning
// conversation comes back whole, and the one it displaces is not saved.
TEST(PromptCache, ASaveBeingPutBackIsNotDroppedForTheOneItDisplaces) {
  Model model(load());
  BatcherOptions o{1, small_session(512)};
  o.cache_ram = 64u << 20;
  Batcher& b = model.start_batcher(o);
  Conversation one(model, "One conversation, about water."),
      two(model, "Another, about stone and hills, and the long roads over them in winter and in spring.");
  GenerateResult first = b.generate(one.turn(kMessages[0]));
  one.answered(first);
  two.answered(b.generate(two.turn(kMessages[0])));
  ASSERT_EQ(b.saved_count(), 1u);
  // Room for the first conversation's save only; the second's is larger.
  b.set_cache_ram(b.saved_bytes());
  const size_t cached = cells_left(first);
  const GenerateRequest q = one.turn(kMessages[1]);
  const GenerateResult back = b.generate(q);
  EXPECT_EQ(static_cast<size_t>(back.timings.cached_tokens), cached);
  EXPECT_EQ(b.saved_count(), 0u) << "the displaced conversation had no room";
  Model fresh(load());
  Session s(fresh, small_session(512));
  expect_as_alone(generate(s, q), back, "the restored conversation");
}
