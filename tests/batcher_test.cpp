#include "engine/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include "core/ledger.h"
#include "engine/model.h"
#include "batch_checks.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::request_entries;
using reclaim::testing::cells_left;
using reclaim::testing::sequence_empty;
using reclaim::testing::sequence_holds_its_cache;
using reclaim::testing::eventually;
using reclaim::testing::ready_within;
using reclaim::testing::expect_as_alone;
using reclaim::testing::judged;
using reclaim::testing::small_model;
using reclaim::testing::small_session;

namespace {

ModelLoad load() { return reclaim::testing::small_load(); }

BatcherOptions batching(int n_seq, int n_ctx = 128) { return {n_seq, small_session(n_ctx)}; }

GenerateRequest request(const std::string& prompt, int max_tokens = 24) {
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return judged(r);
}

const std::vector<std::string> kPrompts = {
    "The first request asks about rivers",
    "A second, somewhat longer request that asks about mountains and valleys and the weather there",
    "Third",
    "The fourth request is about the sea",
};

// What each prompt gives alone, on a session's own context.
std::vector<GenerateResult> alone(Model& model, const std::vector<GenerateRequest>& reqs) {
  std::vector<GenerateResult> out;
  for (const GenerateRequest& r : reqs) {
    Session s(model, small_session());
    out.push_back(generate(s, r));
  }
  return out;
}

// Each request on a thread of its own, started while the decode thread is
// held at its first decode until all are in, so that they run together
// however the threads are scheduled; each one's text streams into
// `streamed`.
std::vector<std::future<GenerateResult>> start_together(Model& model, Batcher& b, const std::vector<GenerateRequest>& reqs,
                                                        std::vector<std::string>& streamed) {
  streamed.assign(reqs.size(), "");
  std::vector<std::future<GenerateResult>> got;
  std::lock_guard hold(model.decode_mutex());
  for (size_t i = 0; i < reqs.size(); ++i) {
    got.push_back(std::async(std::launch::async, [&b, &reqs, &streamed, i] {
      GenerateHooks h;
      h.on_text = [&streamed, i](std::string_view t) { streamed[i] += t; };
      return b.generate(reqs[i], h);
    }));
  }
  EXPECT_TRUE(eventually([&] { return b.active() + b.waiting() >= reqs.size(); })) << "the requests did not all come in";
  return got;
}

}  // namespace

TEST(Batcher, ConcurrentRequestsGetTheTokensEachGetsAloneInFewerDecodes) {
  Model model(load());
  std::vector<GenerateRequest> reqs;
  for (const std::string& p : kPrompts) reqs.push_back(request(p));
  const std::vector<GenerateResult> want = alone(model, reqs);

  Batcher& b = model.start_batcher(batching(4));
  std::vector<std::string> streamed;
  std::vector<std::future<GenerateResult>> got = start_together(model, b, reqs, streamed);
  size_t generated = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const GenerateResult r = got[i].get();
    expect_as_alone(want[i], r, "request " + std::to_string(i));
    EXPECT_EQ(streamed[i], r.text) << "request " << i;
    EXPECT_EQ(r.timings.prompt_tokens, want[i].timings.prompt_tokens);
    generated += r.tokens.size();
  }
  // Alone, each token is a decode of its own; together they share steps.
  EXPECT_LT(b.steps(), generated) << "the requests did not decode together";
  EXPECT_EQ(b.active(), 0u);
  // Each ended well and left its cells to the prompt cache, and no more.
  for (int32_t s = 0; s < b.n_seq(); ++s) {
    EXPECT_GT(b.cached_tokens(s), 0u) << "sequence " << s;
    EXPECT_TRUE(sequence_holds_its_cache(b, s)) << "sequence " << s;
  }
  EXPECT_EQ(request_entries(), 0u);
}

TEST(Batcher, SampledRequestsWithASeedMatchTheirSessionRuns) {
  Model model(load());
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 3; ++i) {
    GenerateRequest r = request(kPrompts[i], 16);
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 1234 + static_cast<uint32_t>(i);
    r.sampling.repeat_penalty = 1.1f;
    reqs.push_back(r);
  }
  const std::vector<GenerateResult> want = alone(model, reqs);
  Batcher& b = model.start_batcher(batching(3));
  std::vector<std::future<GenerateResult>> got;
  for (const GenerateRequest& r : reqs) got.push_back(std::async(std::launch::async, [&b, &r] { return b.generate(r); }));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const GenerateResult r = got[i].get();
    expect_as_alone(want[i], r, "request " + std::to_string(i), /*greedy=*/false);
    EXPECT_EQ(r.seed, want[i].seed);
  }
  EXPECT_EQ(request_entries(), 0u);
}

// Guesses decoded beside several requests at once, in a batch too small for
// all of them (each next token first, then as much of each guess as fits),
// change no greedy token, no seeded draw (the chain draws once a token, as
// without guesses) and no stop: each request streams and ends as it does
// alone, and leaves the cells of what it decoded, no refused guess among them.
TEST(Batcher, GuessesBesideOtherRequestsChangeNoTokenNoDrawAndNoStop) {
  Model model(load());
  std::vector<GenerateRequest> reqs = {request(kPrompts[0], 40), request(kPrompts[1], 40), request(kPrompts[3], 40)};
  reqs[1].sampling.temperature = 0.9f;
  reqs[1].sampling.seed = 77;
  reqs[1].sampling.repeat_penalty = 1.1f;
  const std::vector<GenerateResult> plain = alone(model, reqs);
  // A stop string from the middle of what the third says alone.
  ASSERT_GT(plain[2].text.size(), 12u) << "the third request says too little to be stopped in its middle";
  reqs[2].stop = {plain[2].text.substr(plain[2].text.size() / 2, 4)};
  const GenerateResult stopped_alone = alone(model, {reqs[2]})[0];
  ASSERT_EQ(stopped_alone.finish, FinishReason::stop);

  BatcherOptions bo = batching(3);
  bo.session.n_batch = 8;
  bo.speculation.kind = Speculation::Kind::ngram;
  bo.speculation.ngram_n = 1;
  bo.speculation.ngram_m = 8;
  bo.speculation.draft_max = 8;
  Batcher& b = model.start_batcher(bo);
  std::vector<std::string> streamed;
  std::vector<std::future<GenerateResult>> got = start_together(model, b, reqs, streamed);
  int32_t guessed = 0, kept = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const GenerateResult r = got[i].get();
    const GenerateResult& want = i == 2 ? stopped_alone : plain[i];
    expect_as_alone(want, r, "request " + std::to_string(i), /*greedy=*/i != 1);
    EXPECT_EQ(streamed[i], r.text) << "request " << i;
    guessed += r.timings.draft_tokens;
    kept += r.timings.draft_accepted;
    EXPECT_LE(r.timings.draft_accepted, r.timings.draft_tokens);
  }
  EXPECT_GT(guessed, 0) << "no guess was decoded: the test proves nothing";
  EXPECT_GT(kept, 0) << "no guess was kept";
  EXPECT_EQ(b.guessed(), static_cast<uint64_t>(guessed));
  for (int32_t s = 0; s < b.n_seq(); ++s) EXPECT_TRUE(sequence_holds_its_cache(b, s)) << "sequence " << s;
  EXPECT_EQ(request_entries(), 0u);
}

// A draft model's guesses: with a draft that is always right (the target's
// extra layers add nothing) nearly every guess is kept and a step makes
// several tokens; with an unrelated one nearly none is; either way each
// request gets what it gets alone. The draft's weights and context are on
// the ledger under the model, and go with it.
TEST(Batcher, ADraftModelsGuessesChangeNoTokenAndSaveStepsWhereItIsRight) {
  const reclaim::testing::DraftPair& pair = reclaim::testing::draft_pair();
  const uint64_t entries_before = Ledger::process().totals().count;
  std::vector<GenerateRequest> reqs = {request(kPrompts[0], 32), request(kPrompts[1], 32)};
  ModelLoad target;
  target.path = pair.target;
  std::vector<GenerateResult> want;
  {
    Model m(target);
    want = alone(m, reqs);
  }
  for (const std::string& draft : {pair.right, pair.wrong}) {
    SCOPED_TRACE(draft);
    Model model(target);
    BatcherOptions bo = batching(2);
    bo.speculation.kind = Speculation::Kind::draft;
    bo.speculation.draft = draft;
    bo.speculation.draft_max = 6;
    Batcher& b = model.start_batcher(bo);
    ASSERT_TRUE(b.speculates());
    size_t draft_entries = 0;
    for (const LedgerEntry& e : Ledger::process().entries()) draft_entries += e.owner.find("/draft") != std::string::npos;
    EXPECT_GE(draft_entries, 2u) << "the draft's weights and context are not on the ledger under the model";
    std::vector<std::future<GenerateResult>> got;
    for (const GenerateRequest& r : reqs) got.push_back(std::async(std::launch::async, [&b, &r] { return b.generate(r); }));
    int32_t guessed = 0, kept = 0;
    size_t generated = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const GenerateResult r = got[i].get();
      expect_as_alone(want[i], r, "request " + std::to_string(i));
      guessed += r.timings.draft_tokens;
      kept += r.timings.draft_accepted;
      generated += r.tokens.size();
    }
    ASSERT_GT(guessed, 0);
    const double rate = static_cast<double>(kept) / guessed;
    if (draft == pair.right) {
      EXPECT_GT(rate, 0.8) << kept << " of " << guessed << " guesses kept";
      EXPECT_LT(b.steps() * 2, generated) << "a step made fewer than two tokens";
    } else {
      EXPECT_LT(rate, 0.3) << kept << " of " << guessed << " guesses kept";
    }
    for (int32_t s = 0; s < b.n_seq(); ++s) EXPECT_TRUE(sequence_holds_its_cache(b, s)) << "sequence " << s;
    EXPECT_EQ(request_entries(), 0u);
  }
  EXPECT_EQ(Ledger::process().totals().count, entries_before);
}

// An unload while requests guess with a draft: they end as cancelled within
// a step (a draft decode in flight is aborted with the batch's), and the
// model's unload takes the draft's weights and context with everything
// else.
TEST(Batcher, StoppingWhileADraftGuessesCancelsAndTheUnloadTakesTheDraft) {
  const uint64_t before = Ledger::process().totals().count;
  ModelLoad target;
  target.path = reclaim::testing::draft_pair().target;
  auto model = std::make_unique<Model>(target);
  BatcherOptions bo = batching(2, 2048);
  bo.speculation.kind = Speculation::Kind::draft;
  bo.speculation.draft = reclaim::testing::draft_pair().right;
  // Paced, so that the request (to the end of 2,048 positions: some 250
  // steps, at least 0.5 s) is still running when the test sees 16 tokens.
  bo.decode = [](llama_context* c, llama_batch batch) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return llama_decode(c, batch);
  };
  Batcher& b = model->start_batcher(bo);
  std::atomic<int> generated{0};
  GenerateHooks h;
  h.on_tokens = [&](int32_t n) { generated = n; };
  auto running = std::async(std::launch::async, [&] { return b.generate(request(kPrompts[1], -1), h); });
  // Past the first guesses, which a draft that is always right makes long.
  ASSERT_TRUE(eventually([&] { return generated.load() >= 16; }));
  b.stop();
  const GenerateResult r = running.get();
  EXPECT_EQ(r.finish, FinishReason::cancelled);
  EXPECT_GT(r.timings.draft_accepted, 0);
  model->unload();
  EXPECT_EQ(Ledger::process().totals().count, before);
}

TEST(Batcher, ADraftOfAnotherVocabularyIsRefusedNamingIt) {
  ModelLoad target;
  target.path = reclaim::testing::draft_pair().target;
  Model model(target);
  BatcherOptions bo = batching(1);
  bo.speculation.kind = Speculation::Kind::draft;
  bo.speculation.draft = small_model("bpe");
  try {
    model.start_batcher(bo);
    ADD_FAILURE() << "a bpe draft was taken for an spm model";
  } catch (const InvalidModelFile& e) {
    EXPECT_NE(std::string(e.what()).find("cannot guess for this model"), std::string::npos) << e.what();
  }
  EXPECT_EQ(model.batcher(), nullptr);
}

TEST(Batcher, MoreRequestsThanSequencesWaitTheirTurn) {
  Model model(load());
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(request(kPrompts[i % kPrompts.size()] + " " + std::to_string(i), 12));
  const std::vector<GenerateResult> want = alone(model, reqs);
  Batcher& b = model.start_batcher(batching(2));
  std::atomic<size_t> most{0};
  std::vector<std::future<GenerateResult>> got;
  for (const GenerateRequest& r : reqs) {
    got.push_back(std::async(std::launch::async, [&] {
      GenerateHooks h;
      h.on_text = [&](std::string_view) {
        size_t n = b.active(), m = most.load();
        while (n > m && !most.compare_exchange_weak(m, n)) {
        }
      };
      return b.generate(r, h);
    }));
  }
  for (size_t i = 0; i < reqs.size(); ++i) expect_as_alone(want[i], got[i].get(), "request " + std::to_string(i));
  EXPECT_LE(most.load(), 2u);
  EXPECT_GE(most.load(), 1u);
  EXPECT_EQ(b.active(), 0u);
}

TEST(Batcher, ACancelledRequestEndsAndTheOthersRunOn) {
  Model model(load());
  std::vector<GenerateRequest> reqs = {request(kPrompts[0], 40), request(kPrompts[1], 40)};
  const std::vector<GenerateResult> want = alone(model, reqs);
  Batcher& b = model.start_batcher(batching(2));
  CancelToken cancel;
  auto cancelled = std::async(std::launch::async, [&] {
    GenerateHooks h;
    int pieces = 0;
    h.on_text = [&](std::string_view) {
      if (++pieces == 3) cancel.cancel(CancelReason::client_gone);
    };
    return b.generate(reqs[0], h, &cancel);
  });
  auto other = std::async(std::launch::async, [&] { return b.generate(reqs[1]); });
  const GenerateResult c = cancelled.get();
  EXPECT_EQ(c.finish, FinishReason::cancelled);
  EXPECT_EQ(c.cancel_reason, CancelReason::client_gone);
  EXPECT_LT(c.tokens.size(), want[0].tokens.size());
  // What it did generate is what it would have.
  expect_as_alone(want[0], c, "the cancelled request");
  const GenerateResult o = other.get();
  expect_as_alone(want[1], o, "the other request");
  EXPECT_EQ(b.active(), 0u);
  // Only the request that ended well left cells, for the prompt cache.
  for (int32_t s = 0; s < b.n_seq(); ++s) EXPECT_TRUE(sequence_holds_its_cache(b, s)) << "sequence " << s;
  EXPECT_EQ(b.cached_tokens(), cells_left(o));
  EXPECT_EQ(request_entries(), 0u);
}

TEST(Batcher, ACallerThatThrowsFromItsTextHookLeavesNothingBehind) {
  Model model(load());
  Batcher& b = model.start_batcher(batching(2));
  GenerateHooks h;
  h.on_text = [](std::string_view) { throw std::runtime_error("client went away"); };
  GenerateRequest r = request(kPrompts[0], 40);
  r.sampling.temperature = 0.8f;  // a sampler chain in the request's scope
  r.sampling.seed = 7;
  EXPECT_THROW(b.generate(r, h), std::runtime_error);
  EXPECT_EQ(b.active(), 0u);
  EXPECT_EQ(request_entries(), 0u);
  for (int32_t s = 0; s < b.n_seq(); ++s) EXPECT_TRUE(sequence_empty(b, s)) << "sequence " << s;
  // The sequence it had is free and clean for the next request.
  Model fresh(load());
  Session s(fresh, small_session());
  const GenerateResult alone_now = generate(s, request(kPrompts[2]));
  expect_as_alone(alone_now, b.generate(request(kPrompts[2])));
}

// A decode that fails at a step of two generating requests: both end with
// the error and their KV cells gone, and the one that was waiting for a
// sequence then runs as it would alone.
void expect_a_failed_step_ends_its_requests(const std::function<int32_t(int step, llama_context*, llama_batch)>& decode,
                                            const std::string& error) {
  Model model(load());
  const std::vector<GenerateRequest> reqs = {request(kPrompts[0], 40), request(kPrompts[1], 40), request(kPrompts[2])};
  const std::vector<GenerateResult> want = alone(model, reqs);
  BatcherOptions o = batching(2);
  std::atomic<int> steps{0};
  o.decode = [&](llama_context* ctx, llama_batch b) { return decode(++steps, ctx, b); };
  Batcher& b = model.start_batcher(o);
  std::vector<std::future<GenerateResult>> got;
  {
    // Held until all three are in: the first two take the sequences in
    // order, and the third waits for one.
    std::lock_guard hold(model.decode_mutex());
    for (size_t i = 0; i < reqs.size(); ++i) {
      got.push_back(std::async(std::launch::async, [&, i] { return b.generate(reqs[i]); }));
      ASSERT_TRUE(eventually([&] { return b.active() + b.waiting() >= i + 1; }));
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    try {
      got[i].get();
      ADD_FAILURE() << "request " << i << " did not fail with its step";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(error), std::string::npos) << e.what();
    }
  }
  const GenerateResult third = got[2].get();
  expect_as_alone(want[2], third, "the third request");
  EXPECT_EQ(b.active(), 0u);
  EXPECT_EQ(b.waiting(), 0u);
  // Only the third, which ended well, left cells, for the prompt cache.
  for (int32_t s = 0; s < b.n_seq(); ++s) EXPECT_TRUE(sequence_holds_its_cache(b, s)) << "sequence " << s;
  EXPECT_EQ(b.cached_tokens(), cells_left(third));
  EXPECT_EQ(request_entries(), 0u);
}

TEST(Batcher, AFailedDecodeEndsEveryRequestInItsStepAndTheRestRunOn) {
  // The step decodes, so its cells are written, and then reports a failure.
  expect_a_failed_step_ends_its_requests(
      [](int step, llama_context* ctx, llama_batch b) {
        const int32_t rc = llama_decode(ctx, b);
        return step == 5 ? -3 : rc;
      },
      "llama_decode failed (code -3) at a batch of 2 tokens of 2 requests");
}

TEST(Batcher, AStepThatThrowsEndsEveryRequestInItAndTheRestRunOn) {
  expect_a_failed_step_ends_its_requests(
      [](int step, llama_context* ctx, llama_batch b) {
        if (step == 5) throw std::runtime_error("compute buffer lost");
        return llama_decode(ctx, b);
      },
      "compute buffer lost");
}

TEST(Batcher, EachSequenceHasTheContextAskedFor) {
  Model model(load());
  Batcher& b = model.start_batcher(batching(3, 256));  // llama.cpp rounds each up to 256
  EXPECT_EQ(b.n_ctx_seq(), 256);
  EXPECT_EQ(llama_n_ctx(b.context()), 3u * 256u);
  GenerateRequest r = request(kPrompts[1]);
  r.max_tokens = -1;  // until the sequence's context is full
  const GenerateResult full = b.generate(r);
  EXPECT_EQ(full.finish, FinishReason::context);
  // The last token is sampled from the last position's logits and never decoded.
  EXPECT_EQ(full.timings.prompt_tokens + static_cast<int32_t>(full.tokens.size()), 256 + 1);
  std::string words;
  for (int i = 0; i < 300; ++i) words += " word";
  EXPECT_THROW(b.generate(request(words, 4)), ContextOverflow);
  EXPECT_EQ(request_entries(), 0u);
  EXPECT_EQ(b.active(), 0u);
}

TEST(Batcher, StoppingCancelsWhatRunsAndRefusesWhatComes) {
  Model model(load());
  Batcher& b = model.start_batcher(batching(1));
  std::promise<void> started;
  std::atomic<bool> once{false};
  auto running = std::async(std::launch::async, [&] {
    GenerateHooks h;
    h.on_text = [&](std::string_view) {
      if (!once.exchange(true)) started.set_value();
    };
    GenerateRequest r = request(kPrompts[0], -1);
    return b.generate(r, h);
  });
  ASSERT_TRUE(ready_within(started.get_future()));
  // One more, waiting for the only sequence.
  auto waiting = std::async(std::launch::async, [&] { return b.generate(request(kPrompts[2])); });
  ASSERT_TRUE(eventually([&] { return b.waiting() > 0; }));
  b.stop();
  const GenerateResult r = running.get();
  EXPECT_EQ(r.finish, FinishReason::cancelled);
  const GenerateResult w = waiting.get();
  EXPECT_EQ(w.finish, FinishReason::cancelled);
  EXPECT_TRUE(w.tokens.empty());
  EXPECT_EQ(b.active(), 0u);
  EXPECT_EQ(b.waiting(), 0u);
  EXPECT_THROW(b.generate(request(kPrompts[1])), Error);
  EXPECT_EQ(request_entries(), 0u);
}

TEST(Batcher, UnloadingTheModelTakesTheBatchContextAndThreadWithIt) {
  const uint64_t before = Ledger::process().totals().count;
  auto model = std::make_unique<Model>(load());
  const uint64_t with_model = Ledger::process().totals().count;
  Batcher& b = model->start_batcher(batching(2));
  EXPECT_EQ(b.generate(request(kPrompts[0], 4)).tokens.size(), 4u);
  const std::string owner = model->scope().path() + "/batch";
  size_t kinds = 0;
  for (const LedgerEntry& e : Ledger::process().entries()) kinds += e.owner == owner;
  EXPECT_EQ(kinds, 3u);  // context, batch, decode thread
  // And the prompt cache's entry, beside the batch.
  EXPECT_EQ(Ledger::process().totals().count, with_model + 4);
  model->unload();
  EXPECT_EQ(Ledger::process().totals().count, before);
  model.reset();
}
