#include "engine/test_model.h"

#include <llama.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "temp_path.h"

using namespace reclaim;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TestModelSpec tiny(const std::string& vocab, const std::string& type = "f16") {
  TestModelSpec s;
  s.vocab = vocab;
  s.type = type;
  s.n_embd = 64;
  s.n_layer = 1;
  return s;
}

}  // namespace

TEST(TestModel, SameArgumentsGiveTheSameBytes) {
  std::string a = reclaim::testing::temp_path("tm_a.gguf"), b = reclaim::testing::temp_path("tm_b.gguf"),
              c = reclaim::testing::temp_path("tm_c.gguf");
  make_test_model(tiny("spm"), a);
  make_test_model(tiny("spm"), b);
  TestModelSpec other = tiny("spm");
  other.seed = 2;
  make_test_model(other, c);
  std::string ba = slurp(a), bb = slurp(b), bc = slurp(c);
  EXPECT_GT(ba.size(), 1000u);
  EXPECT_EQ(ba, bb);
  EXPECT_NE(ba, bc);
}

TEST(TestModel, LoadsAndGeneratesInLlama) {
  for (const char* vocab : {"spm", "bpe"}) {
    for (const char* type : {"f32", "f16", "q8_0"}) {
      std::string path = reclaim::testing::temp_path(std::string("tm_") + vocab + "_" + type + ".gguf");
      TestModelShape shape = make_test_model(tiny(vocab, type), path);
      llama_model* m = llama_model_load_from_file(path.c_str(), llama_model_default_params());
      ASSERT_NE(m, nullptr) << vocab << " " << type;
      EXPECT_EQ(llama_model_n_embd(m), 64);
      EXPECT_EQ(llama_vocab_n_tokens(llama_model_get_vocab(m)), shape.n_vocab);
      llama_context_params cp = llama_context_default_params();
      cp.n_ctx = 64;
      cp.n_threads = cp.n_threads_batch = 1;
      llama_context* ctx = llama_init_from_model(m, cp);
      ASSERT_NE(ctx, nullptr);
      llama_token toks[32];
      int n = llama_tokenize(llama_model_get_vocab(m), "hello world", 11, toks, 32, true, false);
      ASSERT_GT(n, 0);
      ASSERT_EQ(llama_decode(ctx, llama_batch_get_one(toks, n)), 0);
      const float* logits = llama_get_logits_ith(ctx, -1);
      bool finite = true;
      for (int i = 0; i < shape.n_vocab; ++i) finite = finite && std::isfinite(logits[i]);
      EXPECT_TRUE(finite) << vocab << " " << type;
      llama_free(ctx);
      llama_model_free(m);
    }
  }
}

TEST(TestModel, SizeTargetIsMet) {
  TestModelSpec s;
  s.vocab = "bpe";
  s.type = "f16";
  s.size = 300ll << 20;
  TestModelShape shape = test_model_shape(s);
  EXPECT_EQ(shape.n_vocab, 151936);
  EXPECT_NEAR(static_cast<double>(shape.bytes), 300.0 * (1 << 20), 0.05 * 300 * (1 << 20));
  EXPECT_GE(shape.n_layer, 1);
}

TEST(TestModel, BadInputIsAClearError) {
  TestModelSpec s = tiny("/nonexistent/vocab.gguf");
  EXPECT_THROW(make_test_model(s, reclaim::testing::temp_path("x.gguf")), Error);
  s = tiny("spm", "q4_k");
  try {
    make_test_model(s, reclaim::testing::temp_path("x.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_k"), std::string::npos);
  }
  s = tiny("spm");
  s.n_embd = 100;
  EXPECT_THROW(make_test_model(s, reclaim::testing::temp_path("x.gguf")), Error);
}

namespace {

// The last logits of "hello world" and the next eight greedy tokens.
std::pair<std::vector<float>, std::vector<llama_token>> greedy_run(const std::string& path) {
  llama_model* m = llama_model_load_from_file(path.c_str(), llama_model_default_params());
  EXPECT_NE(m, nullptr) << path;
  if (!m) return {};
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 64;
  cp.n_threads = cp.n_threads_batch = 1;
  llama_context* ctx = llama_init_from_model(m, cp);
  const llama_vocab* vocab = llama_model_get_vocab(m);
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  llama_token toks[32];
  const int n = llama_tokenize(vocab, "hello world", 11, toks, 32, true, false);
  EXPECT_EQ(llama_decode(ctx, llama_batch_get_one(toks, n)), 0);
  const float* last = llama_get_logits_ith(ctx, -1);
  std::vector<float> logits(last, last + n_vocab);
  std::vector<llama_token> out;
  for (int i = 0; i < 8; ++i) {
    const float* l = llama_get_logits_ith(ctx, -1);
    llama_token best = static_cast<llama_token>(std::max_element(l, l + n_vocab) - l);
    out.push_back(best);
    EXPECT_EQ(llama_decode(ctx, llama_batch_get_one(&best, 1)), 0);
  }
  llama_free(ctx);
  llama_model_free(m);
  return {logits, out};
}

}  // namespace

// A target whose layers past the draft's add nothing answers as the draft
// does, token for token (speculative decoding's full acceptance); another
// seed's model of the same shape does not (its draft is never right).
TEST(TestModel, ZeroedLayersPastADraftsAnswerAsTheDraft) {
  const std::string draft = reclaim::testing::temp_path("tm_draft.gguf"), target = reclaim::testing::temp_path("tm_target.gguf"),
                    other = reclaim::testing::temp_path("tm_other.gguf");
  TestModelSpec d = tiny("spm");
  d.n_layer = 2;
  make_test_model(d, draft);
  TestModelSpec t = d;
  t.n_layer = 5;
  t.zero_layers_from = 2;
  make_test_model(t, target);
  TestModelSpec o = t;
  o.seed = 2;
  make_test_model(o, other);
  const auto [dl, dt] = greedy_run(draft);
  const auto [tl, tt] = greedy_run(target);
  const auto [ol, ot] = greedy_run(other);
  ASSERT_EQ(dl.size(), tl.size());
  double most = 0, apart = 0;
  for (size_t i = 0; i < dl.size(); ++i) {
    most = std::max(most, static_cast<double>(std::fabs(dl[i] - tl[i])));
    apart = std::max(apart, static_cast<double>(std::fabs(dl[i] - ol[i])));
  }
  EXPECT_LT(most, 1e-3);
  EXPECT_GT(apart, 0.1);
  EXPECT_EQ(dt, tt);
  EXPECT_NE(dt, ot);
  TestModelSpec bad = d;
  bad.zero_layers_from = 2;
  EXPECT_THROW(make_test_model(bad, reclaim::testing::temp_path("tm_bad.gguf")), Error);
}
