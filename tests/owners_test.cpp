#include "engine/owners.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/ledger.h"
#include "engine/test_model.h"
#include "sanitized.h"
#include "temp_path.h"

using namespace reclaim;

namespace {

const std::string& model_path() {
  static const std::string path = [] {
    std::string p = reclaim::testing::temp_path("owners_test.gguf");
    TestModelSpec s;
    s.vocab = "spm";
    s.n_embd = 64;
    s.n_layer = 2;
    make_test_model(s, p);
    return p;
  }();
  return path;
}

std::string write_file(const std::string& name, const std::string& bytes) {
  std::string p = reclaim::testing::temp_path(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

std::string error_of(const std::string& path) {
  Scope scope("model:bad");
  try {
    ModelLoad load;
    load.path = path;
    load_model(scope, load);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Owners, ModelContextBatchSamplerLiveOnTheLedgerUntilTheScopeCloses) {
  Ledger& ledger = Ledger::process();
  const uint64_t before = ledger.totals().count;
  {
    Scope model_scope("model:t");
    ModelLoad load;
    load.path = model_path();
    ScopedRef<llama_model> model = load_model(model_scope, load);
    ASSERT_TRUE(model);
    Scope request(model_scope, "request:1");
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = cp.n_threads_batch = 2;
    ScopedRef<llama_context> ctx = new_context(request, model.get(), cp);
    ScopedRef<llama_batch> batch = new_batch(request, 64, 1);
    ScopedRef<llama_sampler> chain = new_sampler_chain(request, "greedy");
    auto kinds = ledger.by_kind();
    EXPECT_EQ(kinds[Kind::model].count, 1u);
    // Its tensors and the heap its load took (the vocab at least), which a
    // sanitizer's allocator hides from glibc's figures.
    if (!reclaim::testing::sanitized()) {
      EXPECT_GT(kinds[Kind::model].bytes, llama_model_size(model.get()));
    } else {
      EXPECT_GE(kinds[Kind::model].bytes, llama_model_size(model.get()));
    }
    EXPECT_EQ(kinds[Kind::context].count, 1u);
    EXPECT_GT(kinds[Kind::context].bytes, 0u);
    EXPECT_EQ(kinds[Kind::thread].count, 1u);
    EXPECT_EQ(kinds[Kind::batch].count, 1u);
    EXPECT_EQ(kinds[Kind::sampler].count, 1u);
    auto owners = ledger.by_owner();
    EXPECT_EQ(owners["model:t/request:1"].count, 4u);
  }
  EXPECT_EQ(ledger.totals().count, before);
}

TEST(Owners, EarlyReleaseFreesOnce) {
  Ledger& ledger = Ledger::process();
  const uint64_t before = ledger.totals().count;
  Scope scope("model:early");
  ModelLoad load;
  load.path = model_path();
  ScopedRef<llama_model> model = load_model(scope, load);
  EXPECT_EQ(ledger.totals().count, before + 1);
  model.release();
  EXPECT_FALSE(model);
  EXPECT_EQ(ledger.totals().count, before);
  scope.close();
  EXPECT_EQ(ledger.totals().count, before);
}

TEST(Owners, AbortedLoadLeavesNothing) {
  Ledger& ledger = Ledger::process();
  const uint64_t before = ledger.totals().count;
  Scope scope("model:abort");
  ModelLoad load;
  load.path = model_path();
  load.progress = [](float p) { return p < 0.5f; };
  EXPECT_THROW(load_model(scope, load), LoadAborted);
  EXPECT_EQ(scope.live_cleanups(), 0u);
  EXPECT_EQ(ledger.totals().count, before);
}

TEST(Owners, BadModelFilesAreClearErrors) {
  EXPECT_NE(error_of("/nonexistent/m.gguf").find("No such file"), std::string::npos);
  EXPECT_NE(error_of(reclaim::testing::temp_dir()).find("is a directory"), std::string::npos);
  EXPECT_NE(error_of(write_file("empty.gguf", "")).find("too short"), std::string::npos);
  EXPECT_NE(error_of(write_file("text.gguf", "hello, not a model")).find("not a GGUF file"), std::string::npos);
  // A real header cut short: llama.cpp's own reason is passed on.
  std::ifstream f(model_path(), std::ios::binary);
  std::string head(4096, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  std::string truncated = error_of(write_file("truncated.gguf", head));
  EXPECT_NE(truncated.find("cannot load model"), std::string::npos) << truncated;
  EXPECT_EQ(Ledger::process().by_owner().count("model:bad"), 0u);
}

TEST(Owners, LoadModesLoad) {
  for (const char* name : {"mmap", "none", "mlock", "mmap-mlock"}) {
    Scope scope(std::string("model:") + name);
    ModelLoad load;
    load.path = model_path();
    load.mode = load_mode_from_name(name);
    EXPECT_TRUE(load_model(scope, load)) << name;
  }
  EXPECT_THROW(load_mode_from_name("mmap2"), Error);
}
