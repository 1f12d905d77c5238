// The vetter runs this test program as its child (engine_main.cpp hands
// `__vet` to vet_child_main), so a damaged file crashes that child, not the
// tests.
#include "runtime/vetter.h"

#include <ggml.h>
#include <gguf.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <vector>

#include "batch_checks.h"
#include "core/ledger.h"
#include "engine/batcher.h"
#include "gguf_corpus.h"
#include "runtime/registry.h"
#include "sanitized.h"
#include "small_models.h"

namespace reclaim {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::sanitized;
using testing::small_model;
using testing::small_session;
using testing::temp_path;

// The one damage of the corpus named `name`, written to `path`.
void write_damaged(const std::string& name, const std::string& path) {
  bool found = false;
  testing::for_each_damage(testing::read_bytes(small_model("spm")), [&](const testing::DamagedFile& d) {
    if (d.name != name) return;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << d.bytes;
    found = true;
  });
  ASSERT_TRUE(found) << name;
}

VetterOptions self_vetting() { return VetterOptions{.program = Vetter::this_program()}; }

// What vet() said when it refused the file (InvalidModelFile); a failure
// of the test when it did not.
std::string refusal(Vetter& v, const VetRequest& q) {
  try {
    (void)v.vet(q);
    ADD_FAILURE() << "'" << q.path << "' was accepted";
  } catch (const InvalidModelFile& e) {
    return e.what();
  }
  return {};
}

// What vet() said when it could not give a verdict (an Error, tried again
// later); a failure of the test when it gave one.
std::string no_verdict(Vetter& v, const VetRequest& q) {
  try {
    (void)v.vet(q);
    ADD_FAILURE() << "'" << q.path << "' was accepted";
  } catch (const InvalidModelFile& e) {
    ADD_FAILURE() << "the child's trouble was taken for the file's fault: " << e.what();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

VetRequest request_for(const std::string& path) {
  VetRequest q;
  q.path = path;
  q.context = session_context_params(small_session(), 0, 2);
  return q;
}

TEST(Vetter, AGoodFileIsVettedOnceAndItsEstimateIsThisProcesssOwn) {
  Vetter v(self_vetting());
  const VetRequest q = request_for(small_model("spm"));
  const VetReport r = v.vet(q);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.has_tokenizer);
  EXPECT_EQ(r.info.n_layer, 2);
  ModelLoad load;
  load.path = q.path;
  const MemoryEstimate here = estimate_memory(load, q.context);
  EXPECT_EQ(r.estimate.model_host, here.model_host);
  EXPECT_EQ(r.estimate.context_host, here.context_host);
  EXPECT_EQ(r.estimate.compute_host, here.compute_host);
  // The heap a load takes, measured in reclaim's arena, which a sanitized
  // build turns off.
  if (!sanitized()) EXPECT_GT(r.estimate.model_overhead, 0);
  (void)v.vet(q);
  EXPECT_EQ(v.counts().children, 1u);
  EXPECT_EQ(v.counts().cached, 1u);
}

TEST(Vetter, ADamagedFileIsRefusedWithWhatIsWrongAndTheVerdictIsKept) {
  const std::string path = temp_path("vet-block-count.gguf");
  write_damaged("llama_block_count=0", path);
  Vetter v(self_vetting());
  for (int i = 0; i < 2; ++i) {
    const std::string m = refusal(v, request_for(path));
    EXPECT_NE(m.find("'llama.block_count' is 0"), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
  }
  EXPECT_EQ(v.counts().children, 1u);
  EXPECT_EQ(v.counts().refused, 1u);
}

TEST(Vetter, AFileThatMakesLlamaCppAbortEndsOnlyTheChild) {
  // Without reclaim's checks, llama.cpp meets a block count of 0 with a
  // GGML_ASSERT: what any damage the checks miss would do.
  const std::string path = temp_path("vet-abort.gguf");
  write_damaged("llama_block_count=0", path);
  Vetter v(self_vetting());
  VetRequest q = request_for(path);
  q.checks = false;
  const std::string m = refusal(v, q);
  EXPECT_NE(m.find("makes llama.cpp abort at the estimate stage"), std::string::npos) << m;
  EXPECT_NE(m.find("GGML_ASSERT(hparams.n_layer_all > 0"), std::string::npos) << m;
  // This process is alive to say so, and the file's verdict is kept.
  EXPECT_THROW((void)v.vet(q), InvalidModelFile);
  EXPECT_EQ(v.counts().children, 1u);
}

TEST(Vetter, IntegerWeightsAreNamedBeforeTheyCrashADecode) {
  const std::string path = temp_path("vet-i8.gguf");
  write_damaged("last-tensor-type-i8", path);
  Vetter v(self_vetting());
  const std::string checked = refusal(v, request_for(path));
  EXPECT_NE(checked.find("is of type i8, which no model weight is"), std::string::npos) << checked;
  // Without the check the decode crashes; the child contains that too.
  VetRequest q = request_for(path);
  q.checks = false;
  const std::string crashed = refusal(v, q);
  EXPECT_NE(crashed.find("crashed the vetting process (signal"), std::string::npos) << crashed;
}

// A stand-in for the vetting child: the estimate part approves at once; the
// decode part says it has loaded the file, then waits for `go` to exist and
// refuses it at the decode stage.
VetterOptions loads_then_refuses(const std::string& go) {
  const std::string script =
      "case \"$1\" in\n"
      "  *'\"part\":\"decode\"'*)\n"
      "    echo '{\"loaded\":true}'\n"
      "    while [ ! -e '" + go + "' ]; do sleep 0.01; done\n"
      "    echo '{\"ok\":false,\"stage\":\"decode\",\"error\":\"the decode failed\"}' ;;\n"
      "  *) echo '{\"ok\":true,\"has_tokenizer\":true}' ;;\n"
      "esac\n";
  return VetterOptions{.program = {"/bin/sh", "-c", script, "sh"}};
}

TEST(Vetter, AFileIsLoadableOnceAChildLoadedItAndRefusedWhenItsDecodeFails) {
  const std::string go = temp_path("vet-go");
  std::filesystem::remove(go);
  Vetter v(loads_then_refuses(go));
  const VetRequest q = request_for(small_model("spm"));
  // The estimate is made and a child has loaded the file; its decode waits.
  const VetReport loadable = v.vet_to_load(q);
  EXPECT_TRUE(loadable.ok);
  EXPECT_TRUE(v.counts().running);
  EXPECT_FALSE(v.known(q).has_value());
  std::ofstream(go) << "go";
  const std::string m = refusal(v, q);
  EXPECT_EQ(m, "the decode failed");
  // The verdict is kept: no step of it runs again.
  EXPECT_THROW((void)v.vet_to_load(q), InvalidModelFile);
  EXPECT_EQ(v.counts().children, 1u);
}

// A stand-in whose two parts say what they know, then wait for `go` to
// exist before they end (as a child's frees and later stages take time).
// Its estimate part reports `estimate`.
VetterOptions says_early_then_waits(const std::string& go, const VetReport& estimate) {
  const std::string wait = "    while [ ! -e '" + go + "' ]; do sleep 0.01; done\n";
  const std::string report = to_json(estimate).dump();
  const std::string script =
      "case \"$1\" in\n"
      "  *'\"part\":\"decode\"'*)\n"
      "    echo '{\"loaded\":true}'\n" + wait +
      "    echo '{\"ok\":true}' ;;\n"
      "  *)\n"
      "    echo '" + nlohmann::json{{"estimated", to_json(estimate)}}.dump() + "'\n" + wait +
      "    echo '" + report + "' ;;\n"
      "esac\n";
  return VetterOptions{.program = {"/bin/sh", "-c", script, "sh"}};
}

TEST(Vetter, AFirstLoadWaitsForWhatEachChildKnowsNotForTheChildrenToEnd) {
  const std::string go = temp_path("vet-early-go");
  std::filesystem::remove(go);
  VetReport estimate;
  estimate.ok = true;
  estimate.has_tokenizer = true;
  estimate.estimate.model_host = 1234;
  Vetter v(says_early_then_waits(go, estimate));
  const VetRequest q = request_for(small_model("spm"));
  auto first_load = std::async(std::launch::async, [&] { return v.vet_to_load(q); });
  if (first_load.wait_for(30s) != std::future_status::ready) {
    std::ofstream(go) << "go";  // lets the children end, so that the test does
    FAIL() << "the first load waited for the children to end";
  }
  const VetReport loadable = first_load.get();
  EXPECT_TRUE(loadable.ok);
  EXPECT_EQ(loadable.estimate.model_host, 1234);
  EXPECT_TRUE(v.counts().running);
  EXPECT_FALSE(v.known(q).has_value());
  std::ofstream(go) << "go";
  EXPECT_EQ(v.vet(q).estimate.model_host, 1234);
}

TEST(Vetter, EachPartSaysWhatItKnowsOnceAndAsItEnds) {
  VetRequest q = request_for(small_model("spm"));
  q.part = VetPart::estimate;
  std::vector<VetReport> early;
  int loaded = 0;
  VetProgress progress{.loaded = [&] { ++loaded; }, .estimated = [&](const VetReport& r) { early.push_back(r); }};
  const VetReport estimated = vet_here(q, progress);
  ASSERT_TRUE(estimated.ok) << estimated.error;
  ASSERT_EQ(early.size(), 1u);
  EXPECT_TRUE(early[0].ok);
  EXPECT_EQ(early[0].estimate.model_host, estimated.estimate.model_host);
  EXPECT_EQ(early[0].estimate.compute_host, estimated.estimate.compute_host);
  EXPECT_EQ(early[0].info.n_vocab, estimated.info.n_vocab);
  EXPECT_EQ(early[0].has_tokenizer, estimated.has_tokenizer);
  EXPECT_EQ(loaded, 0);
  q.part = VetPart::decode;
  const VetReport decoded = vet_here(q, progress);
  ASSERT_TRUE(decoded.ok) << decoded.error;
  EXPECT_EQ(loaded, 1);
  EXPECT_EQ(early.size(), 1u);
}

TEST(Vetter, ARegistryMakesNoContextOfAFileUntilItsWholeVerdictIsIn) {
  const std::string go = temp_path("vet-registry-go");
  std::filesystem::remove(go);
  RegistryOptions o;
  o.session = small_session();
  o.vetter = std::make_shared<Vetter>(loads_then_refuses(go));
  o.parallel = 1;
  Registry reg(o, {{"m", small_model("spm"), false}});
  const uint64_t standing = Ledger::process().totals().count;
  auto acquired = std::async(std::launch::async, [&] { return reg.acquire("m"); });
  // The registry loads the file (its weights are on the ledger) beside the
  // child's decode, and waits there.
  auto weights_held = [] {
    for (const LedgerEntry& e : Ledger::process().entries()) {
      if (e.kind == Kind::model) return true;
    }
    return false;
  };
  ASSERT_TRUE(eventually(weights_held));
  EXPECT_EQ(reg.status("m").state, ModelState::loading);
  EXPECT_EQ(acquired.wait_for(0ms), std::future_status::timeout);
  std::ofstream(go) << "go";
  EXPECT_THROW((void)acquired.get(), InvalidModelFile);
  EXPECT_EQ(reg.status("m").state, ModelState::unloaded);
  EXPECT_EQ(reg.status("m").last_error, "the decode failed");
  EXPECT_FALSE(weights_held());
  EXPECT_EQ(Ledger::process().totals().count, standing);
}

TEST(Vetter, AFileRewrittenInPlaceIsVettedAgain) {
  const std::string path = temp_path("vet-rewritten.gguf");
  std::filesystem::copy_file(small_model("spm"), path, std::filesystem::copy_options::overwrite_existing);
  Vetter v(self_vetting());
  EXPECT_TRUE(v.vet(request_for(path)).ok);
  // Another size, so another identity even within the clock's resolution.
  write_damaged("trunc-data-middle", path);
  EXPECT_THROW((void)v.vet(request_for(path)), InvalidModelFile);
  EXPECT_EQ(v.counts().children, 2u);
  // Only the latest version's verdict is kept: a file rewritten again and
  // again does not grow the cache, and an earlier version is vetted anew.
  EXPECT_EQ(v.counts().kept, 1u);
  write_damaged("trunc-data-start", path);
  EXPECT_THROW((void)v.vet(request_for(path)), InvalidModelFile);
  std::filesystem::copy_file(small_model("spm"), path, std::filesystem::copy_options::overwrite_existing);
  EXPECT_TRUE(v.vet(request_for(path)).ok);
  EXPECT_EQ(v.counts().kept, 1u);
  EXPECT_EQ(v.counts().children, 4u);
  // Another file's verdict is its own.
  EXPECT_TRUE(v.vet(request_for(small_model("spm"))).ok);
  EXPECT_EQ(v.counts().kept, 2u);
}

TEST(Vetter, AnAbortIsAVerdictWithItsMessage) {
  // A stand-in child that dies as an assert does, after its message.
  Vetter v(VetterOptions{.program = {"/bin/sh", "-c", "echo 'x.cpp:1: GGML_ASSERT(n > 0) failed' >&2; kill -ABRT $$", "sh"}});
  const std::string m = refusal(v, request_for(small_model("spm")));
  EXPECT_NE(m.find("signal 6"), std::string::npos) << m;
  EXPECT_NE(m.find("GGML_ASSERT(n > 0) failed"), std::string::npos) << m;
}

TEST(Vetter, AChildOutOfMemoryIsAnErrorTriedAgainNotAVerdict) {
  // As ggml ends a process whose allocation failed.
  Vetter v(VetterOptions{.program = {"/bin/sh", "-c",
                                     "echo 'ggml_malloc: failed to allocate 512.00 MB' >&2; "
                                     "echo 'ggml.c:414: fatal error' >&2; kill -ABRT $$",
                                     "sh"}});
  for (int i = 0; i < 2; ++i) {
    const std::string m = no_verdict(v, request_for(small_model("spm")));
    EXPECT_NE(m.find("ran out of memory"), std::string::npos) << m;
  }
  EXPECT_EQ(v.counts().children, 2u);
  EXPECT_EQ(v.counts().refused, 0u);
}

TEST(Vetter, AChildPastItsTimeIsAnErrorTriedAgainNotAVerdict) {
  VetterOptions o{.program = {"/bin/sh", "-c", "sleep 30", "sh"}};
  o.timeout = 200ms;
  Vetter v(o);
  for (int i = 0; i < 2; ++i) {
    const std::string m = no_verdict(v, request_for(small_model("spm")));
    EXPECT_NE(m.find("took longer than"), std::string::npos) << m;
  }
  EXPECT_EQ(v.counts().children, 2u);
}

TEST(Vetter, StoppingKillsTheChildItRuns) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    Vetter v(VetterOptions{.program = {"/bin/sh", "-c", "sleep 30", "sh"}});
    v.vet_in_background({request_for(small_model("spm"))});
    // Destroyed while the child sleeps (or before it starts): both end now.
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(Vetter, TheBackgroundQueueLeavesVerdictsReady) {
  const std::string bad = temp_path("vet-bg-bad.gguf");
  write_damaged("trunc-header", bad);
  Vetter v(self_vetting());
  v.vet_in_background({request_for(small_model("spm")), request_for(bad)});
  ASSERT_TRUE(v.wait_idle(60s));
  ASSERT_TRUE(v.known(request_for(small_model("spm"))).has_value());
  EXPECT_TRUE(v.known(request_for(small_model("spm")))->ok);
  ASSERT_TRUE(v.known(request_for(bad)).has_value());
  EXPECT_FALSE(v.known(request_for(bad))->ok);
  EXPECT_EQ(v.counts().children, 2u);
}

TEST(Vetter, ARegistryRefusesADamagedModelAndServesTheGoodOneBesideIt) {
  const std::string bad = temp_path("vet-registry-bad.gguf");
  write_damaged("llama_attention_layer_norm_rms_epsilon=-1", bad);
  RegistryOptions o;
  o.session = small_session();
  o.vetter = std::make_shared<Vetter>(self_vetting());
  o.parallel = 1;
  Registry reg(o, {{"good", small_model("spm"), false}, {"bad", bad, false}});
  // The vetter's thread and stop pipe and the registry's reaper.
  const uint64_t standing = Ledger::process().totals().count;
  EXPECT_EQ(standing, 3u);
  EXPECT_THROW((void)reg.acquire("bad"), InvalidModelFile);
  EXPECT_EQ(reg.status("bad").state, ModelState::unloaded);
  EXPECT_NE(reg.status("bad").last_error.find("'llama.attention.layer_norm_rms_epsilon' is -1"), std::string::npos)
      << reg.status("bad").last_error;
  {
    Lease l = reg.acquire("good");
    GenerateRequest g;
    g.prompt = "Hello";
    g.max_tokens = 4;
    g.sampling.temperature = 0;
    EXPECT_EQ(l.model().batcher()->generate(g).timings.generated_tokens, 4);
  }
  // A second request for the bad one is answered from the verdict.
  EXPECT_THROW((void)reg.acquire("bad"), InvalidModelFile);
  EXPECT_EQ(o.vetter->counts().children, 2u);
  reg.unload_all(UnloadMode::cancel, 0ms);
  EXPECT_EQ(Ledger::process().totals().count, standing);
}

}  // namespace
}  // namespace reclaim

namespace reclaim {

namespace {

// The test projector with one change: `drop` left out of its tensors, or
// `key` written as a string where mtmd reads a number.
std::string damaged_projector(const std::string& name, const std::string& drop, const std::string& key) {
  const std::string& good = reclaim::testing::small_projector("spm");
  ggml_context* data = nullptr;
  gguf_context* in = gguf_init_from_file(good.c_str(), {false, &data});
  EXPECT_NE(in, nullptr);
  gguf_context* out = gguf_init_empty();
  gguf_set_kv(out, in);
  if (!key.empty()) gguf_set_val_str(out, key.c_str(), "sixty-four");
  for (int64_t i = 0; i < gguf_get_n_tensors(in); ++i) {
    const char* t = gguf_get_tensor_name(in, i);
    if (drop != t) gguf_add_tensor(out, ggml_get_tensor(data, t));
  }
  const std::string path = reclaim::testing::temp_path(name);
  EXPECT_TRUE(gguf_write_to_file(out, path.c_str(), false));
  gguf_free(out);
  gguf_free(in);
  ggml_free(data);
  return path;
}

}  // namespace

TEST(Vetter, AModelsProjectorIsVettedWithItAndCountedInItsEstimate) {
  Vetter v(self_vetting());
  VetRequest q = request_for(small_model("spm"));
  const VetReport alone = v.vet(q);
  q.mmproj = reclaim::testing::small_projector("spm");
  const VetReport with = v.vet(q);
  ASSERT_TRUE(with.ok) << with.error;
  // Its f32 weights at least (tests/projector_test.cpp counts them).
  const int64_t weights = (16 * 16 * 3 * 32 + 32 * 16 + 32 * 64 + 64 + 64 * 64 + 64) * 4;
  EXPECT_GE(with.estimate.model_host - alone.estimate.model_host, weights);
  EXPECT_EQ(v.counts().children, 2u) << "a model with a projector is vetted again";

  q.mmproj = damaged_projector("vet-mmproj-no-tensor.gguf", "mm.2.weight", "");
  std::string m = refusal(v, q);
  EXPECT_NE(m.find("vet-mmproj-no-tensor.gguf"), std::string::npos) << m;
  // mtmd reads a number with gguf's getter, which asserts on a string: the
  // child ends, this process says which file and where.
  q.mmproj = damaged_projector("vet-mmproj-key-type.gguf", "", "clip.vision.image_size");
  m = refusal(v, q);
  EXPECT_NE(m.find("vet-mmproj-key-type.gguf"), std::string::npos) << m;
  EXPECT_NE(m.find("projector"), std::string::npos) << m;
}

}  // namespace reclaim
