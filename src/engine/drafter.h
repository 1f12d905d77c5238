// A draft model: a second, smaller model of the same vocabulary whose greedy
// picks are a model's guesses (engine/speculation.h), as llama-server's
// --model-draft gives them. Each of the batch's sequences has its cells in
// the draft's context too; before a guess they are brought level with the
// target's (the tokens that differ dropped, the missing ones decoded), then
// the draft decodes a token at a time, every guessing sequence in one step.
//
// Resources: its weights, its context and its batch are in the scope
// "model:<name>/draft", which the Batcher opens before its own, so that an
// unload closes the batch (and joins the decode thread, the draft's only
// user) first. It decodes on the target model's thread pool, in the model's
// turn: the two never compute at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <llama.h>

#include "core/scope.h"
#include "engine/owners.h"

namespace reclaim {

class Model;

// The draft's context for a batch of `n_seq` sequences of `n_ctx_seq`
// positions (0: the model's training context), steps of `n_batch` tokens:
// one row of logits a sequence a step, its last token's.
llama_context_params draft_context_params(int32_t n_seq, int32_t n_ctx_seq, int32_t n_batch, int32_t max_threads);

class Drafter {
 public:
  // Loads `path` as the target's draft: `n_seq` sequences of `n_ctx_seq`
  // positions, steps of `n_batch` tokens. Throws InvalidModelFile when its
  // vocabulary is not the target's (llama-server's checks), Error when it
  // cannot be loaded.
  Drafter(Model& target, const std::string& path, int32_t n_seq, int32_t n_ctx_seq, int32_t n_batch);
  ~Drafter();
  Drafter(const Drafter&) = delete;
  Drafter& operator=(const Drafter&) = delete;

  // What one sequence asks: its guess after `next`, given the tokens in its
  // target cells, at most n_max tokens.
  struct Ask {
    int32_t seq = -1;
    const std::vector<llama_token>* history = nullptr;
    llama_token next = -1;
    int32_t n_max = 0;
    std::vector<llama_token>* guess = nullptr;
  };
  // Fills each ask's guess, on the decode thread. `decode` decodes a batch
  // on the draft's context (the Batcher's: in the model's turn, under its
  // abort). False when a decode was aborted (the guesses are not whole);
  // throws Error when one fails.
  using Decode = std::function<int32_t(llama_context*, llama_batch)>;
  bool guess(std::vector<Ask>& asks, const Decode& decode);
  // The sequence's cells go (its request ended without leaving them).
  void forget(int32_t seq);

  llama_context* context() { return ctx_.get(); }
  Scope& scope() { return scope_; }

 private:
  // Its cells of `seq` made the prefix that they share with the target's
  // `history` (the sequence's next token, after it, is always decoded again,
  // for its logits). Returns the position the first missing token goes at.
  int32_t level(int32_t seq, const std::vector<llama_token>& history);
  llama_token pick(int32_t row) const;

  Scope scope_;
  ScopedRef<llama_model> model_;
  ScopedRef<llama_context> ctx_;
  ScopedRef<llama_batch> batch_;
  int32_t n_batch_ = 0, n_vocab_ = 0;
  std::vector<std::vector<llama_token>> cells_;  // each sequence's tokens in the draft's cells
  std::vector<int32_t> row_;                     // each ask's logits row in the current batch
};

}  // namespace reclaim
