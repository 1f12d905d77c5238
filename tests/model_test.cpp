#include "engine/model.h"

#include <gtest/gtest.h>

#include "core/arena.h"
#include "core/ledger.h"
#include "core/usage.h"
#include "engine/batcher.h"
#include "engine/progress.h"
#include "engine/session.h"
#include "sanitized.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::small_model;

namespace {

ModelLoad load_of(const std::string& path) {
  ModelLoad l;
  l.path = path;
  return l;
}

uint64_t ledger_bytes(Kind kind) {
  uint64_t b = 0;
  for (const LedgerEntry& e : Ledger::process().entries()) {
    if (e.kind == kind) b += e.bytes;
  }
  return b;
}

}  // namespace

TEST(Model, ExposesItsMetadata) {
  Model m(load_of(small_model("bpe")));
  const ModelInfo& i = m.info();
  EXPECT_EQ(i.architecture, "llama");
  EXPECT_EQ(i.name, "reclaim-test-model");
  EXPECT_EQ(i.n_ctx_train, 2048);
  EXPECT_EQ(i.n_layer, 2);
  EXPECT_EQ(i.n_embd, 64);
  EXPECT_EQ(i.n_vocab, 151936);
  EXPECT_GT(i.n_params, 2u * 151936 * 64);
  EXPECT_GT(i.file_bytes, i.tensor_bytes);
  EXPECT_EQ(i.load_mode, "mmap");
  EXPECT_NE(i.chat_template.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(m.scope().path(), "model:small-bpe.gguf");
}

TEST(Model, TheEstimateMatchesWhatTheLoadAndTheContextTake) {
  // The context a Session of these options makes (one row of logits a step).
  SessionOptions so;
  so.n_ctx = 1024;
  so.n_batch = 256;
  so.n_threads = 2;
  const llama_context_params cp = session_context_params(so, 0, 2);
  ModelInfo info;
  ModelLoad load = load_of(small_model("spm"));
  const uint64_t live_before = Ledger::process().totals().count;
  MemoryEstimate e = estimate_memory(load, cp, &info);
  EXPECT_EQ(Ledger::process().totals().count, live_before) << "the estimate must leave nothing behind";
  EXPECT_EQ(info.n_layer, 2);
  EXPECT_EQ(e.device(), 0);  // a CPU build
  if (!e.exact) GTEST_SKIP() << "built without llama.cpp's llama-ext.h (RECLAIM_LLAMA_EXT_DIR): the estimate is a formula";

  Model m(load);
  EXPECT_EQ(e.model_host, static_cast<int64_t>(m.info().tensor_bytes));
  // The model's ledger bytes are its tensors and the heap its load took, C
  // malloc included; the simulated load's overhead is a measure of the same.
  const auto load_heap = static_cast<double>(ledger_bytes(Kind::model) - m.info().tensor_bytes);
  if (!reclaim::testing::sanitized()) {
    EXPECT_NEAR(load_heap / static_cast<double>(e.model_overhead), 1.0, 0.1)
        << "load heap on the ledger " << load_heap << ", estimated overhead " << e.model_overhead;
  }
  Session s(m, so);
  const auto measured = static_cast<double>(ledger_bytes(Kind::context));
  const double estimated = static_cast<double>(e.per_context_host());
  // A context's bytes are what the heap grew by while it was made; under a
  // sanitizer the heap is the sanitizer's, which mallinfo does not see, and
  // this context's buffers (one row of logits) are too small to be mapped
  // apart.
  if (!reclaim::testing::sanitized()) {
    ASSERT_GT(measured, 0);
    EXPECT_NEAR(estimated / measured, 1.0, 0.05) << "estimated " << estimated << " measured " << measured;
  }
  EXPECT_GT(e.context_host, 0);  // the KV cache
  EXPECT_GT(e.compute_host, 0);
  // The vocab at least, as the load arena measures it; a sanitized build
  // turns the arena off.
  if (!reclaim::testing::sanitized()) EXPECT_GT(e.model_overhead, 0);
}

// Read into memory of its own, a model's tensors are its load's heap: they
// count once on the ledger (they counted twice, once as tensors and once as
// heap), and the estimate says what the ledger does.
TEST(Model, ReadWithoutAMappingItsTensorsCountOnceAndAsEstimated) {
  if (reclaim::testing::sanitized()) GTEST_SKIP() << "the sanitizer's heap is not measured";
  ModelLoad load = load_of(small_model("spm"));
  load.mode = LoadMode::none;
  const MemoryEstimate e = estimate_memory(load, session_context_params(SessionOptions{}, 0, 1));
  if (!e.exact) GTEST_SKIP() << "built without llama.cpp's llama-ext.h: the estimate is a formula";
  Model m(load);
  const auto measured = static_cast<double>(ledger_bytes(Kind::model));
  const auto tensors = static_cast<double>(m.info().tensor_bytes);
  EXPECT_NEAR(measured / static_cast<double>(e.model_host + e.model_overhead), 1.0, 0.1)
      << "ledger " << measured << ", estimated " << e.model_host << " + " << e.model_overhead;
  // The tensors, the vocab and the rounding of their buffers: under twice
  // the tensors, where counting them twice is more.
  EXPECT_LT(measured, 2 * tensors) << "tensors " << tensors;
}

// A batch that guesses takes a row of logits for each guessed token, beside
// each sequence's own: the estimate counts them as the context does.
TEST(Model, TheEstimateOfABatchThatGuessesCountsItsRowsOfLogits) {
  BatcherOptions bo;
  bo.n_seq = 2;
  bo.session.n_ctx = 256;
  bo.session.n_batch = 64;
  bo.session.n_threads = 2;
  bo.speculation.kind = Speculation::Kind::ngram;
  bo.speculation.draft_max = 16;
  const llama_context_params cp = batch_context_params(bo, 0, 2);
  ModelLoad load = load_of(small_model("bpe"));  // 151,936 floats a row
  const MemoryEstimate e = estimate_memory(load, cp);
  if (!e.exact) GTEST_SKIP() << "built without llama.cpp's llama-ext.h: the estimate is a formula";
  if (reclaim::testing::sanitized()) GTEST_SKIP() << "the sanitizer's heap is not measured";
  Model m(load);
  const uint64_t before = ledger_bytes(Kind::context);
  m.start_batcher(bo);
  const auto measured = static_cast<double>(ledger_bytes(Kind::context) - before);
  const double estimated = static_cast<double>(e.per_context_host());
  // 32 rows more than the sequences' 2: 19 MiB, a third of the whole.
  EXPECT_NEAR(estimated / measured, 1.0, 0.05) << "estimated " << estimated << " measured " << measured;
}

TEST(Model, AFailedLoadLeavesNothingAndSaysWhy) {
  const uint64_t before = Ledger::process().totals().count;
  try {
    Model m(load_of("/nonexistent/model.gguf"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
  }
  EXPECT_EQ(Ledger::process().totals().count, before);
}

TEST(Model, ACancelledLoadIsAbortedAndLeavesNothing) {
  const uint64_t before = Ledger::process().totals().count;
  CancelToken cancel;
  ModelLoad load = load_of(small_model("bpe"));
  int calls = 0;
  auto progress = load_progress("small", &cancel, false);
  load.progress = [&](float p) {
    if (++calls == 2) cancel.cancel(CancelReason::interrupted);
    return progress(p);
  };
  EXPECT_THROW(Model m(load), LoadAborted);
  EXPECT_GE(calls, 2);
  EXPECT_EQ(Ledger::process().totals().count, before);
}

// The vocab's blocks and a context's bookkeeping are made in arenas of their
// own (core/arena.h), which go, unmapped, with what made them.
TEST(Model, ItsVocabAndItsContextsLiveInArenasThatGoWithThem) {
  const arena::Stats before = arena::stats();
  const Usage u0 = Usage::capture();
  arena::Stats loaded, with_context;
  {
    Model model(load_of(small_model("bpe")));
    loaded = arena::stats();
    {
      SessionOptions so;
      so.n_ctx = 256;
      Session s(model, so);
      with_context = arena::stats();
    }
    EXPECT_EQ(arena::stats().arenas, loaded.arenas) << "the context's arena outlived the context";
  }
  EXPECT_EQ(loaded.arenas, before.arenas + 1);
  // 151,936 tokens: their texts, the token map and the merges.
  EXPECT_GT(loaded.in_use - before.in_use, uint64_t{10} << 20);
  EXPECT_EQ(with_context.arenas, loaded.arenas + 1);
  EXPECT_GT(with_context.in_use, loaded.in_use);
  const arena::Stats after = arena::stats();
  EXPECT_EQ(after.arenas, before.arenas);
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(Usage::capture().maps, u0.maps);
}
