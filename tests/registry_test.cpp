#include "runtime/registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <thread>

#include "core/ledger.h"
#include "engine/batcher.h"
#include "engine/generate.h"
#include "engine/test_model.h"
#include "small_models.h"
#include "temp_path.h"

using namespace reclaim;
using reclaim::testing::small_model;
using namespace std::chrono_literals;

namespace {

// A second spm file, so that two entries are two models.
const std::string& spm_copy() {
  static const std::string p = [] {
    std::string to = reclaim::testing::temp_path("small-spm-copy.gguf");
    std::filesystem::copy_file(small_model("spm"), to, std::filesystem::copy_options::overwrite_existing);
    return to;
  }();
  return p;
}

RegistryOptions options(Millis keep_alive = -1ms) {
  RegistryOptions o;
  o.keep_alive = keep_alive;
  o.session.n_ctx = 128;
  o.session.n_batch = 64;
  return o;
}

std::vector<ModelSpec> models() {
  return {{"a", small_model("spm")}, {"b", small_model("bpe")}, {"c", spm_copy()}};
}

uint64_t live() { return Ledger::process().totals().count; }

// As the server runs one: on the model's batch, under the lease's token.
GenerateResult run_request(Lease& lease, int max_tokens, const GenerateHooks& hooks = {}) {
  CancelToken own;
  own.link(&lease.cancel_token());
  GenerateRequest r;
  r.prompt = "The registry keeps";
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return lease.model().batcher()->generate(r, hooks, &own);
}

}  // namespace

TEST(Registry, ConcurrentRequestsForAnUnloadedModelShareOneLoad) {
  const uint64_t before = live();
  {
    Registry reg(options(), models());
    auto take = [&] { return reg.acquire("a"); };
    auto f1 = std::async(std::launch::async, take);
    auto f2 = std::async(std::launch::async, take);
    Lease l1 = f1.get(), l2 = f2.get();
    EXPECT_EQ(&l1.model(), &l2.model());
    ModelStatus s = reg.status("a");
    EXPECT_EQ(s.loads, 1u);
    EXPECT_EQ(s.state, ModelState::loaded);
    EXPECT_EQ(s.in_flight, 2);
    EXPECT_GT(s.estimate, 0);
    EXPECT_GT(s.loaded_bytes, 0);
    EXPECT_EQ(run_request(l1, 4).tokens.size(), 4u);
  }
  EXPECT_EQ(live(), before);
}

TEST(Registry, KeepAliveZeroUnloadsAfterTheLastRequest) {
  Registry reg(options(0ms), models());
  const uint64_t before = live();  // the registry's reaper is on it
  {
    Lease l = reg.acquire("a");
    run_request(l, 4);
  }
  ASSERT_TRUE(reg.wait_for_state("a", ModelState::unloaded, 10s));
  EXPECT_EQ(reg.status("a").unloads, 1u);
  EXPECT_EQ(live(), before);
  // A request's own keep_alive overrides the server's: here "never".
  { Lease l = reg.acquire("a", Millis(-1)); }
  EXPECT_FALSE(reg.wait_for_state("a", ModelState::unloaded, 300ms));
  EXPECT_EQ(reg.status("a").state, ModelState::loaded);
}

TEST(Registry, ARequestsKeepAliveOfZeroUnloadsAModelKeptForever) {
  Registry reg(options(-1ms), models());
  { Lease l = reg.acquire("b", 0ms); }
  EXPECT_TRUE(reg.wait_for_state("b", ModelState::unloaded, 10s));
}

TEST(Registry, TheBudgetKeepsWhatFitsAndEvictsTheLeastRecentlyUsed) {
  int64_t est_a = 0, est_b = 0;
  {
    Registry probe(options(), models());
    probe.load("a");
    probe.load("b");
    est_a = probe.status("a").estimate;
    est_b = probe.status("b").estimate;
  }
  RegistryOptions o = options();
  // a and b fit together; a third as big as a does not. (Estimates measure
  // heap that bookkeeping takes, and vary by some KiB from load to load.)
  o.memory_budget = est_a + est_b + est_a / 2;
  Registry reg(o, models());
  { Lease l = reg.acquire("a"); }
  { Lease l = reg.acquire("b"); }
  EXPECT_EQ(reg.status("a").state, ModelState::loaded) << "evicted although it fit";
  EXPECT_NEAR(static_cast<double>(reg.accounted()), static_cast<double>(est_a + est_b), 0.01 * (est_a + est_b));
  { Lease l = reg.acquire("c"); }  // a is the least recently used
  EXPECT_EQ(reg.status("a").state, ModelState::unloaded);
  EXPECT_EQ(reg.status("b").state, ModelState::loaded);
  EXPECT_EQ(reg.status("c").state, ModelState::loaded);
  EXPECT_LE(reg.accounted(), o.memory_budget);
}

TEST(Registry, AModelThatCanNeverFitIsRefusedAtOnceAndTheRefusalSaysWhy) {
  int64_t est = 0;
  {
    Registry probe(options(), models());
    probe.load("a");
    est = probe.status("a").estimate;
  }
  RegistryOptions o = options();
  o.memory_budget = est + est / 2;  // room for one spm model
  Registry reg(o, models());
  reg.load("a", true);
  try {
    reg.acquire("c");
    FAIL() << "no refusal";
  } catch (const NoRoom& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("pinned models (a "), std::string::npos) << m;
    EXPECT_NE(m.find("budget"), std::string::npos) << m;
  }
  EXPECT_EQ(reg.status("c").state, ModelState::unloaded);
  EXPECT_EQ(reg.scheduler().line.size(), 0u);
  RegistryOptions tiny = options();
  tiny.memory_budget = 1024;
  Registry small(tiny, models());
  try {
    small.acquire("a");
    FAIL() << "no refusal";
  } catch (const NoRoom& e) {
    EXPECT_NE(std::string(e.what()).find("more than the whole memory budget"), std::string::npos) << e.what();
  }
  EXPECT_EQ(small.accounted(), 0);
}

TEST(Registry, DrainWaitsForTheRequestAndCancelStopsIt) {
  Registry reg(options(), models());
  const uint64_t before = live();  // the registry's reaper is on it
  Lease held = reg.acquire("a");
  auto drained = std::async(std::launch::async, [&] { reg.unload("a", UnloadMode::drain, 60s); });
  EXPECT_EQ(drained.wait_for(300ms), std::future_status::timeout) << "the unload did not wait for the request";
  EXPECT_EQ(reg.status("a").state, ModelState::loaded);
  held.release();
  drained.get();
  EXPECT_EQ(reg.status("a").state, ModelState::unloaded);
  EXPECT_EQ(live(), before);

  // cancel: a request generating until its context is full is stopped.
  Lease busy = reg.acquire("a");
  std::promise<void> started;
  GenerateHooks hooks;
  int pieces = 0;
  hooks.on_text = [&](std::string_view) {
    if (++pieces == 2) started.set_value();
  };
  auto request = std::async(std::launch::async, [&] {
    GenerateResult r = run_request(busy, -1, hooks);
    busy.release();
    return r;
  });
  ASSERT_EQ(started.get_future().wait_for(60s), std::future_status::ready);
  reg.unload("a", UnloadMode::cancel, 0ms);
  GenerateResult r = request.get();
  EXPECT_EQ(r.finish, FinishReason::cancelled);
  EXPECT_EQ(reg.status("a").state, ModelState::unloaded);
  EXPECT_EQ(live(), before);
}

TEST(Registry, NamesAreResolvedOnlyInsideTheConfiguredSet) {
  RegistryOptions o = options();
  o.autoload = false;
  Registry reg(o, models());
  EXPECT_THROW(reg.acquire("../a"), BadModelName);
  EXPECT_THROW(reg.acquire("/etc/passwd"), BadModelName);
  EXPECT_THROW(reg.acquire(""), BadModelName);
  EXPECT_THROW(reg.acquire("a/../../etc"), BadModelName);
  EXPECT_THROW(reg.acquire("models/"), BadModelName);
  EXPECT_THROW(reg.acquire("a\tb"), BadModelName);
  EXPECT_THROW(reg.acquire("a//b"), BadModelName);
  EXPECT_THROW(reg.acquire("./a"), BadModelName);
  EXPECT_THROW(reg.acquire("a\\b"), BadModelName);
  EXPECT_THROW(reg.acquire(std::string(257, 'a')), BadModelName);
  EXPECT_THROW(reg.acquire("nope"), UnknownModel);
  // Names as Ollama and the hubs write them are names, looked up like any.
  EXPECT_THROW(reg.acquire("qwen2.5:7b"), UnknownModel);
  EXPECT_THROW(reg.acquire("org/model:Q4_K_M"), UnknownModel);
  EXPECT_THROW(reg.acquire("llama-3 (q4)=x..y"), UnknownModel);
  EXPECT_THROW(reg.acquire("a"), NotLoaded);
  reg.load("a");
  EXPECT_TRUE(reg.acquire("a"));
  EXPECT_THROW(Registry(options(), {{"x", "p"}, {"x", "q"}}), Error);
}

TEST(Registry, AliasesMayHoldColonsSlashesAndDots) {
  RegistryOptions o = options();
  o.autoload = false;
  const std::vector<ModelSpec> m = models();
  Registry reg(o, {{"qwen2.5:7b", m[0].path}, {"org/model:Q4_K_M", m[0].path}});
  reg.load("qwen2.5:7b");
  EXPECT_TRUE(reg.acquire("qwen2.5:7b"));
  EXPECT_EQ(reg.status("org/model:Q4_K_M").state, ModelState::unloaded);
  EXPECT_THROW(Registry(options(), {{"../up", m[0].path}}), BadModelName);
}

TEST(Registry, AFailedLoadLeavesNothingAndSaysWhy) {
  Registry reg(options(), {{"gone", "/nonexistent/model.gguf"}});
  const uint64_t before = live();  // the registry's reaper is on it
  EXPECT_THROW(reg.acquire("gone"), Error);
  ModelStatus s = reg.status("gone");
  EXPECT_EQ(s.state, ModelState::unloaded);
  EXPECT_NE(s.last_error.find("/nonexistent/model.gguf"), std::string::npos) << s.last_error;
  EXPECT_EQ(reg.accounted(), 0);
  EXPECT_EQ(live(), before);
}

TEST(Registry, BeyondMaxRunningRequestsWaitAndBeyondTheQueueAreRefused) {
  RegistryOptions o = options();
  o.max_running = 1;
  o.max_queue = 1;
  Registry reg(o, models());
  Lease first = reg.acquire("a");
  auto waiting = std::async(std::launch::async, [&] { return reg.acquire("a"); });
  // The second waits for the first: it is in the queue, not running.
  ASSERT_TRUE([&] {
    for (int i = 0; i < 1000 && reg.status("a").queued == 0; ++i) std::this_thread::sleep_for(5ms);
    return reg.status("a").queued == 1;
  }());
  EXPECT_EQ(reg.status("a").in_flight, 1);
  EXPECT_THROW(reg.acquire("a"), QueueFull);
  first.release();
  Lease second = waiting.get();
  EXPECT_TRUE(second);
  EXPECT_EQ(reg.status("a").queued, 0);
  EXPECT_EQ(reg.status("a").in_flight, 1);
}

TEST(Registry, AReloadReusesTheEstimateUnlessTheFileChanged) {
  const std::string path = reclaim::testing::temp_path("small-estimate.gguf");
  std::filesystem::copy_file(small_model("spm"), path, std::filesystem::copy_options::overwrite_existing);
  Registry reg(options(), {{"m", path}});
  reg.load("m");
  const int64_t first = reg.status("m").estimate;
  ASSERT_GT(first, 0);
  reg.unload("m", UnloadMode::cancel, 0ms);
  reg.load("m");
  EXPECT_EQ(reg.status("m").estimate, first);
  reg.unload("m", UnloadMode::cancel, 0ms);
  // A bigger model written under the same name is estimated again.
  TestModelSpec bigger;
  bigger.vocab = "spm";
  bigger.n_embd = 128;
  bigger.n_layer = 4;
  bigger.n_ctx_train = 2048;
  make_test_model(bigger, path);
  reg.load("m");
  EXPECT_GT(reg.status("m").estimate, first);
  reg.unload("m", UnloadMode::cancel, 0ms);
}

TEST(Registry, WithParallelAModelDecodesItsRequestsOnOneBatch) {
  const uint64_t before = live();
  {
    RegistryOptions o = options();
    o.parallel = 3;
    Registry reg(o, models());
    Lease lease = reg.acquire("a");
    ASSERT_NE(lease.model().batcher(), nullptr);
    EXPECT_EQ(lease.model().batcher()->n_seq(), 3);
    EXPECT_EQ(reg.status("a").sequences, 3);
    GenerateRequest r;
    r.prompt = "The registry keeps";
    r.max_tokens = 6;
    r.sampling.temperature = 0;
    EXPECT_EQ(lease.model().batcher()->generate(r).tokens.size(), 6u);
    EXPECT_GT(reg.status("a").decode_steps, 0u);
    // The estimate counts the one batch context of 3 sequences: more than a
    // registry whose requests each get one context of the same size.
    Registry single(options(), {{"a", small_model("spm")}});
    single.load("a");
    EXPECT_GT(reg.status("a").estimate, single.status("a").estimate);
  }
  EXPECT_EQ(live(), before);
}

TEST(Registry, ABadParallelIsRefusedAtOnce) {
  for (int32_t n : {0, -1, 257}) {
    RegistryOptions o = options();
    o.parallel = n;
    try {
      Registry reg(o, models());
      ADD_FAILURE() << "parallel " << n << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parallel requests must be 1..256"), std::string::npos) << e.what();
    }
  }
}

// A model that needs room takes it from the prompt caches' saves before any
// model: here the saves alone stand between the budget and the second model.
TEST(Registry, PromptCacheSavesGoBeforeAnyModelWhenRoomIsNeeded) {
  RegistryOptions o = options();
  o.cache_ram = 64 << 20;
  int64_t est_a = 0, est_b = 0;
  {
    Registry probe(o, models());
    probe.load("a");
    probe.load("b");
    est_a = probe.status("a").estimate;
    est_b = probe.status("b").estimate;
  }
  ASSERT_GT(est_a, 0);
  // Room for both and a margin: an estimate measures the heap, and one made
  // in another registry may differ by a little (under ctest, with another
  // test on the other core, enough to let b in beside a few KiB of saves).
  constexpr int64_t kMargin = 1 << 20;
  o.memory_budget = est_a + est_b + kMargin;
  Registry reg(o, models());
  reg.load("a");
  // Conversations on one sequence, each saved in host memory when the next
  // takes it, until the saves are well past the margin.
  for (int i = 0; reg.status("a").saved_bytes < 2 * kMargin && i < 400; ++i) {
    Lease lease = reg.acquire("a");
    GenerateRequest q;
    q.prompt_tokens.push_back(static_cast<llama_token>(1 + i % 97));
    for (int k = 0; k < 100; ++k) q.prompt_tokens.push_back(static_cast<llama_token>(100 + (i * 31 + k * 7) % 500));
    q.max_tokens = 1;
    (void)lease.model().batcher()->generate(q);
  }
  ASSERT_GE(reg.status("a").saved_bytes, static_cast<uint64_t>(2 * kMargin));
  reg.load("b");
  EXPECT_EQ(reg.status("a").state, ModelState::loaded) << "a model went for what the saves could give";
  EXPECT_EQ(reg.status("a").saved_bytes, 0u);
  EXPECT_EQ(reg.status("b").state, ModelState::loaded);
  EXPECT_EQ(reg.scheduler().cache_drops, 1u);
  EXPECT_EQ(reg.scheduler().evictions, 0u);
  // Saves again: within what the budget leaves the two models, the margin.
  for (int i = 0; i < 80; ++i) {
    Lease lease = reg.acquire("a");
    GenerateRequest q;
    for (int k = 0; k < 100; ++k) q.prompt_tokens.push_back(static_cast<llama_token>(100 + (i * 37 + k * 11) % 500));
    q.max_tokens = 1;
    (void)lease.model().batcher()->generate(q);
  }
  EXPECT_GT(reg.status("a").saved_bytes, 0u);
  EXPECT_LE(reg.status("a").saved_bytes, static_cast<uint64_t>(kMargin));
}

// Under --max-loaded, dropping the saves makes no room: they stay, and the
// least recently used model goes (with its own saves, if it had any).
TEST(Registry, PromptCacheSavesStayWhenDroppingThemCannotMakeRoom) {
  RegistryOptions o = options();
  o.cache_ram = 64 << 20;
  o.max_loaded = 2;
  Registry reg(o, models());
  reg.load("a");
  reg.load("b");
  for (int i = 0; reg.status("a").saved_bytes == 0 && i < 50; ++i) {
    Lease lease = reg.acquire("a");
    GenerateRequest q;
    for (int k = 0; k < 100; ++k) q.prompt_tokens.push_back(static_cast<llama_token>(100 + (i * 31 + k * 7) % 500));
    q.max_tokens = 1;
    (void)lease.model().batcher()->generate(q);
  }
  const uint64_t saved = reg.status("a").saved_bytes;
  ASSERT_GT(saved, 0u);
  reg.load("c");  // b is the least recently used
  EXPECT_EQ(reg.status("b").state, ModelState::unloaded);
  EXPECT_EQ(reg.status("a").state, ModelState::loaded);
  EXPECT_EQ(reg.status("c").state, ModelState::loaded);
  EXPECT_EQ(reg.status("a").saved_bytes, saved) << "the saves went for nothing";
  EXPECT_EQ(reg.scheduler().cache_drops, 0u);
  EXPECT_EQ(reg.scheduler().evictions, 1u);
}

TEST(Registry, AModelLoadedByHandReloadsForItsWaitingRequestsWithoutAutoload) {
  RegistryOptions o = options();
  o.autoload = false;
  Registry reg(o, {{"a", small_model("spm")}});
  reg.load("a");
  ModelSpec a2{"a", small_model("spm")};
  a2.settings.n_ctx = 512;
  std::future<Lease> waiting;
  {
    Lease busy = reg.acquire("a");
    reg.reconfigure({a2});
    waiting = std::async(std::launch::async, [&] { return reg.acquire("a"); });
    ASSERT_TRUE([&] {
      for (int i = 0; i < 2000 && reg.status("a").queued == 0; ++i) std::this_thread::sleep_for(5ms);
      return reg.status("a").queued == 1;
    }());
  }
  // Unloaded to take the new context, not by anyone's wish: loaded again.
  Lease l = waiting.get();
  ASSERT_TRUE(l);
  EXPECT_EQ(l.model().batcher()->n_ctx_seq(), 512);
  l.release();
  // An unload by hand stays one.
  reg.unload("a", UnloadMode::drain, 30s);
  EXPECT_THROW(reg.acquire("a"), NotLoaded);
}

TEST(Registry, AReconfigurationAddsChangesAndRemovesModels) {
  Registry reg(options(), {{"a", small_model("spm")}, {"b", small_model("bpe")}});
  reg.load("a");
  ModelSpec a2{"a", small_model("spm")};
  a2.settings.n_ctx = 512;  // llama.cpp rounds a context up to 256
  a2.settings.aliases = {"alpha"};
  std::future<Lease> by_alias;
  {
    Lease busy = reg.acquire("a");
    const Registry::Reconfigured r = reg.reconfigure({a2, {"c", spm_copy()}});
    EXPECT_EQ(r.added, 1);
    EXPECT_EQ(r.changed, 1);
    EXPECT_EQ(r.removed, 1);
    // b was not loaded: gone at once. a is busy: its running request goes on
    // as it was.
    EXPECT_THROW(reg.acquire("b"), UnknownModel);
    EXPECT_EQ(reg.list().size(), 2u);
    EXPECT_TRUE(reg.status("a").reload_pending);
    EXPECT_EQ(reg.status("a").state, ModelState::loaded);
    // Its new name is known at once. A request by it waits for the reload
    // instead of keeping the old load busy (a model never idle would never
    // reload): not admitted now, and queued when it may wait.
    EXPECT_EQ(reg.status("alpha").aliases, std::vector<std::string>{"alpha"});
    Wait now;
    now.no_wait = true;
    EXPECT_FALSE(reg.acquire("alpha", std::nullopt, now));
    by_alias = std::async(std::launch::async, [&] { return reg.acquire("alpha"); });
    ASSERT_TRUE([&] {
      for (int i = 0; i < 2000 && reg.status("a").queued == 0; ++i) std::this_thread::sleep_for(5ms);
      return reg.status("a").queued == 1;
    }());
    EXPECT_EQ(reg.status("a").in_flight, 1);
  }
  // Idle: unloaded, and the waiting request loads it with the new context.
  Lease l = by_alias.get();
  ASSERT_TRUE(l);
  EXPECT_EQ(l.model().batcher()->n_ctx_seq(), 512);
  EXPECT_FALSE(reg.status("a").reload_pending);
  EXPECT_EQ(reg.status("a").unloads, 1u);
  l.release();
  // A set that is not valid changes nothing.
  EXPECT_THROW(reg.reconfigure({{"x", small_model("spm")}, {"x", small_model("bpe")}}), Error);
  EXPECT_EQ(reg.status("c").state, ModelState::unloaded);
  EXPECT_THROW(reg.status("x"), UnknownModel);
  // Settings a loaded model takes without a reload: at once.
  ModelSpec a3 = a2;
  a3.settings.aliases = {"alef"};
  reg.load("a");
  EXPECT_EQ(reg.reconfigure({a3, {"c", spm_copy()}}).changed, 1);
  EXPECT_EQ(reg.status("alef").state, ModelState::loaded);
  EXPECT_FALSE(reg.status("a").reload_pending);
}
