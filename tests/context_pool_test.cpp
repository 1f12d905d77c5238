#include "engine/context_pool.h"

#include <gtest/gtest.h>

#include "core/ledger.h"
#include "engine/generate.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::small_model;
using reclaim::testing::small_session;

namespace {

ModelLoad pooled_load(int capacity) {
  ModelLoad l;
  l.path = small_model("spm");
  l.pooled_contexts = capacity;
  return l;
}

GenerateRequest greedy() {
  GenerateRequest r;
  r.prompt = "A pooled context must forget the last request";
  r.max_tokens = 16;
  r.sampling.temperature = 0;
  return r;
}

size_t entries_owned_by(const std::string& owner) {
  size_t n = 0;
  for (const LedgerEntry& e : Ledger::process().entries()) n += e.owner == owner;
  return n;
}

}  // namespace

TEST(ContextPool, ARequestReusesTheContextOfTheLastAndGetsTheSameTokens) {
  Model fresh_model(pooled_load(0));
  std::vector<llama_token> want;
  {
    Session s(fresh_model, small_session());
    want = generate(s, greedy()).tokens;
  }
  Model model(pooled_load(1));
  llama_context* first = nullptr;
  for (int i = 0; i < 3; ++i) {
    Session s(model, small_session());
    if (i == 0) first = s.context();
    EXPECT_EQ(s.context(), first) << "request " << i << " did not reuse the pooled context";
    EXPECT_EQ(generate(s, greedy()).tokens, want) << "request " << i;
  }
  EXPECT_EQ(model.context_pool()->pooled(), 1u);
  EXPECT_EQ(model.context_pool()->idle(), 1u);
}

TEST(ContextPool, PooledContextsAreOnTheLedgerUnderTheModelAndGoWithIt) {
  const uint64_t before = Ledger::process().totals().count;
  auto model = std::make_unique<Model>(pooled_load(2));
  const std::string pool_owner = model->scope().path() + "/pool";
  {
    Session a(*model, small_session());
    Session b(*model, small_session());
    EXPECT_NE(a.context(), b.context());
    EXPECT_EQ(entries_owned_by(pool_owner), 2u);
  }
  // The requests are gone; their contexts stay, listed under the pool.
  EXPECT_EQ(entries_owned_by(pool_owner), 2u);
  EXPECT_EQ(Ledger::process().totals().count, before + 4);  // model, threadpool, 2 contexts
  auto live = std::make_unique<Session>(*model, small_session());
  model->unload();
  EXPECT_EQ(Ledger::process().totals().count, before);
  live.reset();
  model.reset();
  EXPECT_EQ(Ledger::process().totals().count, before);
}

TEST(ContextPool, BeyondCapacityARequestGetsAContextOfItsOwn) {
  const uint64_t before = Ledger::process().totals().count;
  Model model(pooled_load(1));
  const std::string pool_owner = model.scope().path() + "/pool";
  {
    Session a(model, small_session());
    Session b(model, small_session());
    EXPECT_EQ(entries_owned_by(pool_owner), 1u);
    EXPECT_EQ(generate(b, greedy()).tokens.size(), 16u);
  }
  EXPECT_EQ(Ledger::process().totals().count, before + 3);  // model, threadpool, one pooled context
  // Other sizes do not match the pooled context.
  {
    Session other(model, small_session(256));
    EXPECT_EQ(model.context_pool()->idle(), 1u);
  }
  EXPECT_EQ(model.context_pool()->release_idle(), 1u);
  EXPECT_EQ(Ledger::process().totals().count, before + 2);
}

TEST(ContextPool, AnEarlierRequestsCancelTokenDoesNotStopTheNext) {
  Model model(pooled_load(1));
  {
    CancelToken cancel;
    cancel.cancel();
    Session s(model, small_session(), &cancel);
    EXPECT_EQ(generate(s, greedy()).finish, FinishReason::cancelled);
  }
  Session s(model, small_session());
  EXPECT_EQ(generate(s, greedy()).finish, FinishReason::length);
}

TEST(ContextPool, ALeaseTheLedgerCannotRecordGoesBackToThePool) {
  Model model(pooled_load(1));
  { Session warm(model, small_session()); }  // the pooled context now exists, idle
  const uint64_t before = Ledger::process().totals().count;
  // The lease is the first ledger entry a session takes on a pooled context.
  Ledger::process().fail_next_acquires(1);
  EXPECT_THROW(Session(model, small_session()), std::bad_alloc);
  EXPECT_EQ(Ledger::process().totals().count, before);
  EXPECT_EQ(model.context_pool()->pooled(), 1u);
  EXPECT_EQ(model.context_pool()->idle(), 1u) << "the context stayed leased to a request that never started";
  Session s(model, small_session());
  EXPECT_EQ(generate(s, greedy()).tokens.size(), 16u);
}
