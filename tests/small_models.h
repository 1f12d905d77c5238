// Small test models shared by the engine tests, made once per test run.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "engine/session.h"
#include "engine/test_model.h"
#include "engine/test_projector.h"
#include "temp_path.h"

namespace reclaim::testing {

// A 2-layer, 64-wide model with the spm (llama) or bpe (qwen2) vocab.
inline const std::string& small_model(const std::string& vocab) {
  static std::map<std::string, std::string> made;
  auto it = made.find(vocab);
  if (it != made.end()) return it->second;
  std::string path = reclaim::testing::temp_path("small-" + vocab + ".gguf");
  TestModelSpec s;
  s.vocab = vocab;
  s.n_embd = 64;
  s.n_layer = 2;
  s.n_ctx_train = 2048;
  make_test_model(s, path);
  return made.emplace(vocab, path).first->second;
}

// A speculative decoding pair on the spm vocabulary: `target` has 4
// layers, the last two adding nothing, so its logits are those of `right`
// (the same seed with 2 layers), a draft that is always right; `wrong` has
// another seed, a draft that is nearly never right.
struct DraftPair {
  std::string target, right, wrong;
};
inline const DraftPair& draft_pair() {
  static const DraftPair pair = [] {
    DraftPair p{temp_path("draft-target.gguf"), temp_path("draft-right.gguf"), temp_path("draft-wrong.gguf")};
    TestModelSpec s;
    s.vocab = "spm";
    s.n_embd = 64;
    s.n_ctx_train = 2048;
    s.n_layer = 4;
    s.zero_layers_from = 2;
    make_test_model(s, p.target);
    s.n_layer = 2;
    s.zero_layers_from = -1;
    make_test_model(s, p.right);
    s.seed = 2;
    make_test_model(s, p.wrong);
    return p;
  }();
  return pair;
}

// An image projector for small_model(vocab) (64 wide): 64-pixel images in
// 16 embeddings.
inline const std::string& small_projector(const std::string& vocab = "spm", int64_t n_embd = 64) {
  static std::map<std::string, std::string> made;
  const std::string key = vocab + "-" + std::to_string(n_embd);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  std::string path = temp_path("small-" + key + "-mmproj.gguf");
  TestProjectorSpec s;
  s.n_embd_text = n_embd;
  make_test_projector(s, path);
  return made.emplace(key, path).first->second;
}

// How the engine tests load it.
inline ModelLoad small_load(const std::string& vocab = "spm") {
  ModelLoad l;
  l.path = small_model(vocab);
  return l;
}

// The spm model with its test projector: a model that takes images.
inline ModelLoad small_seeing_load() {
  ModelLoad l = small_load("spm");
  l.mmproj = small_projector("spm");
  return l;
}

// The context the small-model tests give a request.
inline SessionOptions small_session(int n_ctx = 128) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = 64;
  return o;
}

}  // namespace reclaim::testing
