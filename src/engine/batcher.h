// Continuous batching: the requests on one model decode together in one
// context, each in a sequence of its own (llama-server's slots). Each step
// puts the next token of every generating request and a chunk of the prompts
// still being read into one batch, so N streams cost about one decode a
// token, where N sessions would cost N (the weights are read once a step).
//
// One thread decodes; a request's own thread only waits for its text and
// hands it on (hooks.on_text), so a slow client never stalls the others.
//
// Resources: the context, its batch and the decode thread are in the scope
// "model:<name>/batch". A request opens "request:<n>" under it; its sampler
// chain and its sequence are cleanups there, and the sequence's cleanup
// returns only once the decode thread has removed the request's KV cells and
// freed its slot: when generate() returns or throws, however the request
// ended, nothing of it is left in the context but the cells it leaves in the
// prompt cache (engine/prompt_cache.h) when it ended well.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <llama.h>

#include "core/cancel.h"
#include "core/scope.h"
#include "core/scoped_thread.h"
#include "engine/generate.h"
#include "engine/drafter.h"
#include "engine/owners.h"
#include "engine/prompt_cache.h"
#include "engine/session.h"
#include "engine/speculation.h"

namespace reclaim {

class ImagePrompt;
class Model;

struct BatcherOptions {
  int32_t n_seq = 1;       // requests decoding at once; more wait for a free sequence
  SessionOptions session;  // n_ctx: each sequence's context; n_batch: tokens a step
  // Host memory the prompt cache may take for sequences it saves when
  // another conversation takes them (engine/prompt_store.h); 0: none.
  uint64_t cache_ram = 0;
  // Guesses decoded beside each sequence's next token (engine/speculation.h);
  // off for a model whose memory cannot drop the refused ones.
  Speculation speculation;
  // What each step's batch is decoded with; empty: llama_decode. Tests put a
  // failing one here: llama.cpp offers no way to make a valid batch fail.
  std::function<int32_t(llama_context*, llama_batch)> decode;
};

// The context a Batcher makes: n_seq sequences of session.n_ctx positions
// each, every sequence with its own KV cells (not unified), so that a
// request admitted can always run to its length whatever the others do.
// With speculation, each sequence's guesses have rows of logits too.
llama_context_params batch_context_params(const BatcherOptions& o, int32_t n_ctx_train, int32_t max_threads);

class Batcher {
 public:
  Batcher(Model& model, const BatcherOptions& options);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Runs one request, waiting for a free sequence first. `cancel` (may be
  // null) stops it within one decode step. hooks.on_text runs on the calling
  // thread; hooks.before_decode is not called (steps are shared).
  GenerateResult generate(const GenerateRequest& request, const GenerateHooks& hooks = {},
                          const CancelToken* cancel = nullptr);

  // Cancels every request and joins the decode thread, now rather than when
  // the scope closes (it runs the scope's cleanup for the thread); later
  // requests fail. The context stays until the scope closes. Idempotent.
  void stop() noexcept;

  int32_t n_seq() const { return n_seq_; }
  int32_t n_ctx_seq() const { return n_ctx_seq_; }
  int32_t n_batch() const { return n_batch_; }
  size_t active() const;     // sequences in use
  std::vector<bool> in_use() const;  // each sequence's, by id
  size_t waiting() const;    // requests waiting for one
  uint64_t steps() const { return steps_.load(); }    // decodes so far
  uint64_t tokens() const { return tokens_.load(); }  // tokens in them
  uint64_t busy_in_steps() const { return busy_.load(); }  // sequences in them, summed
  // Whether its sequences guess (the options asked and the model's memory
  // allows it), and the guessed tokens decoded and kept so far.
  bool speculates() const { return spec_.on(); }
  uint64_t guesses() const { return guesses_.load(); }  // steps of a sequence with a guess
  uint64_t guessed() const { return guessed_.load(); }
  uint64_t guesses_kept() const { return kept_.load(); }
  // Images whose encode a stop cut short (the request's, or the batch's).
  uint64_t encodes_stopped() const { return encodes_stopped_.load(); }
  // Tokens whose cells the prompt cache keeps in sequence `seq`, and in all.
  size_t cached_tokens(int32_t seq) const;
  uint64_t cached_tokens() const;
  // The saves in host memory: their bytes, a new cap for them (those above
  // it go now), and dropping them all. Safe from any thread.
  uint64_t saved_bytes() const { return cache_->store().bytes(); }
  size_t saved_count() const { return cache_->store().count(); }
  void set_cache_ram(uint64_t cap) { cache_->store().set_cap(cap); }
  void drop_saved() { cache_->store().clear(); }
  Scope& scope() { return scope_; }
  // For looking at its KV cells; decoding on it is the decode thread's alone.
  llama_context* context() { return ctx_.get(); }

 private:
  struct Job;
  void loop() noexcept;
  bool step();  // one batch; false when there was nothing to decode
  // Each image a job's prompt has reached, encoded by the projector and
  // decoded into the job's cells alone (an image's embeddings are no
  // tokens of the shared batch); false: none had.
  bool feed_images();
  void feed_image(Job& j);
  // Throws BadImage for an image the batch cannot decode whole where its
  // projector needs it so (non-causal attention over the image).
  void check_whole_images(const ImagePrompt& prompt) const;
  // The step's batch from the jobs in their slots, into in_batch_; false:
  // none has a token to decode.
  bool fill_batch();
  // After a decode: each job of the step moves on, and those with an output
  // row sample their next token (and the tokens after its guesses, while
  // the model picks what was guessed).
  void advance(Job& j);
  // The guess a job decodes after its next token in the coming step: the
  // n-gram lookup's now, or an ask of the draft model's after the step.
  void guess_next(Job& j);
  void draft_guesses();
  // A prompt progress report for the job's caller, if it wants them.
  void report_progress(Job& j, bool first);
  void admit();
  void retire(Job& job, bool cancelled) noexcept;
  void retire_and_wait(Job& job) noexcept;
  void wake_to_stop() noexcept;  // the decode thread's wake: its loop returns
  static bool abort_poll(void* data);

  Model& model_;
  // Before the batch's scope, and so closed after it: the decode thread,
  // which the batch's scope joins, is its only user.
  std::unique_ptr<Drafter> drafter_;
  Scope scope_;
  ScopedRef<llama_context> ctx_;
  ScopedRef<llama_batch> batch_;
  std::unique_ptr<PromptCache> cache_;  // under mu_; its cells are the decode thread's
  int32_t n_seq_ = 1, n_ctx_seq_ = 0, n_batch_ = 0, n_swa_ = 0;
  Speculation spec_;
  std::function<int32_t(llama_context*, llama_batch)> decode_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<Job*> pending_;
  std::vector<Job*> slots_;  // by sequence id; null: free
  size_t active_ = 0;
  bool stopping_ = false;
  std::atomic<bool> abort_{false};
  std::vector<Job*> in_batch_;  // the decode thread's; read by abort_poll during a decode
  // The decode thread's list of the jobs in their slots, sized once: the
  // thread may not allocate outside a step (it would have no one to tell).
  std::vector<Job*> held_;
  std::vector<Job*> stepped_;  // the last step's jobs, swapped with in_batch_
  std::vector<Drafter::Ask> asks_;  // the step's guesses for the draft model, reserved
  std::atomic<uint64_t> steps_{0}, tokens_{0}, busy_{0}, guesses_{0}, guessed_{0}, kept_{0}, encodes_stopped_{0};
  // On the batch's scope, released before the context it decodes on (it
  // was armed after it); its stack goes with it (core/stack_thread.h).
  ScopedThread thread_;
};

}  // namespace reclaim
