// The batch and its releases on the architectures users run (arch_models.h):
// a plain KV cache, a sliding window, experts, and recurrent state, alone or
// beside attention. Each sequence's memory must be whole while its request
// runs and gone when it ends, whatever kind of memory it is.
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <limits>
#include <thread>

#include "arch_models.h"
#include "core/ledger.h"
#include "engine/batcher.h"
#include "engine/gguf_check.h"
#include "engine/model.h"
#include "engine/session.h"
#include "batch_checks.h"
#include "gguf_corpus.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::request_entries;
using reclaim::testing::cells_left;
using reclaim::testing::sequence_empty;
using reclaim::testing::sequence_holds_its_cache;
using reclaim::testing::eventually;
using reclaim::testing::ready_within;
using reclaim::testing::Arch;
using reclaim::testing::arch_model;
using reclaim::testing::small_session;
using reclaim::testing::expect_as_alone;
using reclaim::testing::judged;

namespace {

class ArchBatch : public ::testing::TestWithParam<Arch> {
 protected:
  ModelLoad load() const {
    ModelLoad l;
    l.path = arch_model(GetParam().file);
    return l;
  }
};

// A prompt of token ids: these models have no tokenizer.
GenerateRequest ids(int first, int n, int max_tokens) {
  GenerateRequest r;
  for (int i = 0; i < n; ++i) r.prompt_tokens.push_back(static_cast<llama_token>((first + i * 7) % 128));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return judged(r);
}

std::vector<GenerateRequest> three() { return {ids(3, 20, 16), ids(40, 9, 16), ids(77, 31, 16)}; }

GenerateResult alone(Model& model, const GenerateRequest& r) {
  Session s(model, small_session());
  return generate(s, r);
}

}  // namespace

TEST_P(ArchBatch, RequestsDecodedTogetherGetTheTokensEachGetsAlone) {
  Model model(load());
  ASSERT_FALSE(has_tokenizer(model.vocab()));
  const std::vector<GenerateRequest> reqs = three();
  std::vector<GenerateResult> want;
  for (const GenerateRequest& r : reqs) want.push_back(alone(model, r));

  Batcher& b = model.start_batcher({3, small_session()});
  std::vector<std::future<GenerateResult>> got;
  {
    // The decode thread waits at its first decode until all three are in.
    std::lock_guard hold(model.decode_mutex());
    for (const GenerateRequest& r : reqs) got.push_back(std::async(std::launch::async, [&b, &r] { return b.generate(r); }));
    ASSERT_TRUE(eventually([&] { return b.active() + b.waiting() >= reqs.size(); }));
  }
  size_t generated = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const GenerateResult r = got[i].get();
    expect_as_alone(want[i], r, "request " + std::to_string(i));
    EXPECT_EQ(r.tokens.size(), 16u) << "request " << i;  // no end token: the model has no vocabulary
    EXPECT_TRUE(r.text.empty());
    generated += r.tokens.size();
  }
  EXPECT_LT(b.steps(), generated) << "the requests did not decode together";
  // Each left its cells for the prompt cache, and no more.
  for (int32_t s = 0; s < b.n_seq(); ++s) EXPECT_TRUE(sequence_holds_its_cache(b, s)) << "sequence " << s;
  EXPECT_EQ(b.cached_tokens(), 20u + 9 + 31 + 3 * 15);  // each prompt, and 15 of its 16 tokens
  EXPECT_EQ(request_entries(), 0u);
}

// A next turn on the prompt cache gets the tokens it gets alone, on every
// kind of memory: a KV cache cut where the new prompt leaves the cached
// one, a sliding window, a recurrent state kept whole when the new prompt
// extends all of it.
TEST_P(ArchBatch, ANextTurnOnThePromptCacheGetsTheTokensItGetsAlone) {
  Model model(load());
  Batcher& b = model.start_batcher({1, small_session()});
  const GenerateRequest first = ids(5, 24, 8);
  const GenerateResult r1 = b.generate(first);
  ASSERT_EQ(b.cached_tokens(0), cells_left(r1));
  // The whole exchange so far, then more: all of the cache is a prefix.
  GenerateRequest next = first;
  next.prompt_tokens.insert(next.prompt_tokens.end(), r1.tokens.begin(), r1.tokens.end());
  for (int i = 0; i < 6; ++i) next.prompt_tokens.push_back(static_cast<llama_token>((90 + i * 3) % 128));
  const GenerateResult r2 = b.generate(next);
  expect_as_alone(alone(model, next), r2, "the next turn");
  // lfm2 reports a sliding window (32) beside its recurrent state, whose one
  // cell, at the last position, is then not the window the next position
  // needs: llama-server's check refuses it too, and the prompt is decoded.
  const bool window_and_state = llama_model_n_swa(model.get()) > 0 && GetParam().kind == "hybrid";
  EXPECT_EQ(static_cast<size_t>(r2.timings.cached_tokens), window_and_state ? 0 : cells_left(r1));
  // Half of the first prompt, then something else: a cut in the middle,
  // which a recurrent state refuses; then the request decodes it all.
  GenerateRequest other = ids(5, 12, 8);
  for (int i = 0; i < 6; ++i) other.prompt_tokens.push_back(static_cast<llama_token>((17 + i * 5) % 128));
  const GenerateResult r3 = b.generate(other);
  expect_as_alone(alone(model, other), r3, "the turn cut in the middle");
  EXPECT_TRUE(r3.timings.cached_tokens == 12 || r3.timings.cached_tokens == 0) << r3.timings.cached_tokens;
  EXPECT_TRUE(sequence_holds_its_cache(b, 0));
}

// A request cancelled mid-generation leaves its sequence empty; the next
// request given that sequence starts from nothing of it. For recurrent state
// this is the whole-sequence removal, the one kind llama.cpp's recurrent
// memory always accepts (a partial removal may be refused: it keeps one
// state per sequence, not one per position).
TEST_P(ArchBatch, ACancelledRequestsSequenceIsEmptyAndTheNextOneThereStartsClean) {
  Model model(load());
  const GenerateRequest first = ids(5, 24, 40), next = ids(61, 12, 16);
  const GenerateResult next_alone = alone(model, next);
  CancelToken cancel;
  // Cancelled from the decode thread, at its sixth step (the prompt's and
  // five tokens'): a request's own thread may be woken only after a small
  // model has generated all it was asked for.
  int steps = 0;
  BatcherOptions bo{1, small_session()};
  bo.decode = [&](llama_context* ctx, llama_batch batch) {
    if (++steps == 6) cancel.cancel(CancelReason::client_gone);
    return llama_decode(ctx, batch);
  };
  Batcher& b = model.start_batcher(bo);
  const GenerateResult c = b.generate(first, {}, &cancel);
  EXPECT_EQ(c.finish, FinishReason::cancelled);
  EXPECT_EQ(c.tokens.size(), 5u);
  EXPECT_TRUE(sequence_empty(b, 0));
  const GenerateResult n = b.generate(next);
  expect_as_alone(next_alone, n, "the next request");
  EXPECT_EQ(n.timings.cached_tokens, 0);
  EXPECT_TRUE(sequence_holds_its_cache(b, 0));
  EXPECT_EQ(b.cached_tokens(0), cells_left(n));
  EXPECT_EQ(request_entries(), 0u);
}

TEST_P(ArchBatch, UnloadingInTheMiddleOfRequestsLeavesNothingOnTheLedger) {
  const uint64_t before = Ledger::process().totals().count;
  auto model = std::make_unique<Model>(load());
  Batcher& b = model->start_batcher({2, small_session()});
  std::promise<void> started;
  std::atomic<bool> once{false};
  GenerateHooks h;
  h.on_tokens = [&](int32_t) {
    if (!once.exchange(true)) started.set_value();
  };
  auto running = std::async(std::launch::async, [&] { return b.generate(ids(9, 16, -1), h); });
  ASSERT_TRUE(ready_within(started.get_future()));
  b.stop();  // as an unload in cancel mode does, before the model goes
  EXPECT_EQ(running.get().finish, FinishReason::cancelled);
  model->unload();
  EXPECT_EQ(Ledger::process().totals().count, before);
}

// Speculative decoding keeps what the model picks of each guess and drops
// the rest of its cells, so a greedy request's tokens are those it gets
// without guesses (by the promise of engine/parity.h: a step of 1 + k rows
// takes other kernels than a step of one). A random model that soon repeats
// itself gives the n-gram lookup its matches. A
// model whose memory cannot drop the refused guesses decodes without them.
TEST_P(ArchBatch, GuessedTokensChangeNothingAGreedyRequestGets) {
  Model model(load());
  GenerateRequest r;
  for (int rep = 0; rep < 4; ++rep) {
    for (int i = 0; i < 10; ++i) r.prompt_tokens.push_back(static_cast<llama_token>((13 + i * 11) % 128));
  }
  r.max_tokens = 48;
  r.sampling.temperature = 0;
  r = judged(r);
  const GenerateResult plain = alone(model, r);
  BatcherOptions bo{1, small_session()};
  bo.speculation.kind = Speculation::Kind::ngram;
  // These models soon repeat a loop of two or three tokens, and the lookup
  // proposes only what followed its latest match in the history: with a
  // one-token match, the loop's other tokens.
  bo.speculation.ngram_n = 1;
  bo.speculation.ngram_m = 8;
  bo.speculation.draft_max = 8;
  Batcher& b = model.start_batcher(bo);
  const GenerateResult got = b.generate(r);
  const bool can = GetParam().kind != "recurrent" && GetParam().kind != "hybrid";
  EXPECT_EQ(b.speculates(), can);
  expect_as_alone(plain, got, "with guesses");
  EXPECT_EQ(got.tokens.size(), 48u);
  if (can) {
    EXPECT_GT(got.timings.draft_tokens, 0) << "no guess was decoded: the test proves nothing";
    EXPECT_GT(got.timings.draft_accepted, 0) << "no guess was kept";
    EXPECT_LT(b.steps(), 1 + got.tokens.size()) << "the kept guesses saved no step";
    EXPECT_EQ(b.guessed(), static_cast<uint64_t>(got.timings.draft_tokens));
    EXPECT_EQ(b.guesses_kept(), static_cast<uint64_t>(got.timings.draft_accepted));
  } else {
    EXPECT_EQ(got.timings.draft_tokens, 0);
  }
  // The refused guesses' cells are gone: the sequence holds what the prompt
  // cache says, the prompt and the tokens decoded.
  EXPECT_TRUE(sequence_holds_its_cache(b, 0));
  EXPECT_EQ(b.cached_tokens(0), cells_left(got));
  EXPECT_EQ(request_entries(), 0u);
}

// What the model says of its memory is what its context does: a sequence of
// a kv model can be cut back to a prefix; one with recurrent state cannot
// (llama.cpp refuses), and the model says so before anyone tries.
TEST_P(ArchBatch, ItsMemoryIsWhatItSaysAndOnlyKvSequencesCanBeCut) {
  Model model(load());
  const std::string kind = GetParam().kind;
  const ModelInfo& info = model.info();
  if (kind == "recurrent" || kind == "hybrid") {
    EXPECT_EQ(info.memory, kind);
    EXPECT_FALSE(info.can_cut_sequences());
  } else {
    EXPECT_EQ(info.memory, kind == "sliding-window kv" ? "kv+sliding-window" : "kv");
    EXPECT_TRUE(info.can_cut_sequences());
  }
  Session s(model, small_session());
  GenerateRequest r = ids(11, 20, 1);
  (void)generate(s, r);  // 20 positions in sequence 0, and one more token sampled
  llama_memory_t mem = llama_get_memory(s.context());
  EXPECT_EQ(llama_memory_seq_rm(mem, 0, 10, -1), info.can_cut_sequences());
  EXPECT_TRUE(llama_memory_seq_rm(mem, 0, -1, -1));  // the whole of it: always
  EXPECT_EQ(llama_memory_seq_pos_max(mem, 0), -1);
}

// llama.cpp's model saver writes -inf for the KDA gate's lower bound (its
// default: none) into every file it saves, and the GGUF checks take it; any
// other value that is not a number is still refused, naming the key.
TEST_P(ArchBatch, TheChecksTakeTheSaversUnboundedGateAndRefuseAnyOtherNonNumber) {
  const std::string path = arch_model(GetParam().file);
  EXPECT_NO_THROW(check_gguf_metadata(path));
  const std::string good = reclaim::testing::read_bytes(path);
  size_t at = 0;
  for (const reclaim::testing::GgufField& f : reclaim::testing::GgufWalker(good).walk().fields) {
    if (f.key.size() > 21 && f.key.compare(f.key.size() - 21, 21, ".kda.gate_lower_bound") == 0 && f.type == 6) {
      at = f.value_at;
    }
  }
  ASSERT_NE(at, 0u) << "no float *.kda.gate_lower_bound in " << path;
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::string b = good;
    reclaim::testing::put<float>(b, at, bad);
    const std::string damaged = reclaim::testing::temp_path("kda-" + GetParam().file + ".gguf");
    std::ofstream(damaged, std::ios::binary) << b;
    try {
      check_gguf_metadata(damaged);
      ADD_FAILURE() << bad << " was taken";
    } catch (const InvalidModelFile& e) {
      EXPECT_NE(std::string(e.what()).find("kda.gate_lower_bound"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchBatch, ::testing::ValuesIn(reclaim::testing::archs()), reclaim::testing::arch_name);
