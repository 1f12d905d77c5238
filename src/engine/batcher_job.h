// The batcher's record of one request, shared by the files that make up
// Batcher (batcher.cpp, batcher_images.cpp, batcher_guesses.cpp); no one
// else includes it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <string>
#include <vector>

#include "engine/batcher.h"
#include "engine/generation.h"
#include "engine/image_prompt.h"

namespace reclaim {

// One request. It lives on its caller's stack; the caller leaves only once
// the decode thread has let go of it (done).
struct Batcher::Job {
  std::vector<llama_token> prompt;
  Generation* gen = nullptr;
  GenerateResult* result = nullptr;
  const CancelToken* cancel = nullptr;
  bool cache_prompt = true;
  Scope* scope = nullptr;  // the request's
  // Its images' runs in the prompt, each decoded alone when the prompt's
  // feed reaches it (Batcher::feed_image); null: a prompt of text.
  const std::vector<ImageSpan>* images = nullptr;

  // The decode thread's own.
  int32_t seq = -1;
  int32_t n_past = 0;    // positions in the KV cells
  int32_t n_fed = 0;     // prompt tokens put in a batch so far
  int32_t n_in_step = 0; // tokens of this job in the current batch
  int32_t row = -1;      // its logits row in the current batch, or -1
  llama_token next = -1; // sampled, to be decoded next step
  // Speculating: the tokens in its cells, which the guess is looked up in,
  // the guess after `next`, and how much of it is in the current batch.
  std::vector<llama_token> history;
  std::vector<llama_token> guess;
  int32_t n_guess = 0;
  GuessPace pace;  // with a draft model
  size_t next_image = 0;   // the first of `images` not yet in the cells
  int32_t extra_cells = 0; // cells beyond positions (images under M-RoPE)
  int32_t cached = 0;    // prompt tokens the cache gave
  std::chrono::steady_clock::time_point began;  // when it got its sequence
  bool wants_progress = false, wants_timings = false;  // the caller's hooks

  // Under Batcher::mu_.
  std::condition_variable cv;
  std::string out;       // text not yet taken by the caller
  std::vector<TokenLogprob> out_logprobs;  // and the logprobs of its tokens
  int32_t generated = 0; // tokens so far
  std::vector<PromptProgress> progress;  // reports not yet taken, when wanted
  Timings live;          // the timings as of the text in `out`, when wanted
  bool done = false;
  std::exception_ptr error;

  std::atomic<bool> abandoned{false};  // the caller is leaving

  bool generating() const { return n_fed == static_cast<int32_t>(prompt.size()); }
  bool stopped() const { return abandoned.load() || (cancel && cancel->cancelled()); }
};

}  // namespace reclaim
