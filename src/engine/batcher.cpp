#include "engine/batcher.h"

#include <algorithm>
#include <exception>
#include <optional>

#include "core/defer.h"
#include "core/heap.h"
#include "engine/batcher_job.h"
#include "engine/core_turns.h"
#include "engine/generation.h"
#include "engine/image_prompt.h"
#include "engine/llama_runtime.h"
#include "engine/model.h"
#include "engine/projector.h"

namespace reclaim {

llama_context_params batch_context_params(const BatcherOptions& o, int32_t n_ctx_train, int32_t max_threads) {
  if (o.n_seq < 1 || o.n_seq > 256) throw Error("parallel requests must be 1..256 (llama.cpp's sequence limit)");
  llama_context_params cp = session_context_params(o.session, n_ctx_train, max_threads);
  // Every sequence's next token has to fit one step's batch.
  if (static_cast<int32_t>(cp.n_batch) < o.n_seq) {
    throw Error("batch size " + std::to_string(cp.n_batch) + " is smaller than the " + std::to_string(o.n_seq) +
                " parallel requests");
  }
  cp.n_ctx *= static_cast<uint32_t>(o.n_seq);
  cp.n_seq_max = static_cast<uint32_t>(o.n_seq);
  // One row of logits a sequence a step (session_context_params says why),
  // and one for each token it guesses.
  if (o.speculation.on()) validate(o.speculation);
  const int32_t rows = 1 + (o.speculation.on() ? o.speculation.draft_max : 0);
  if (!cp.embeddings) {
    cp.n_outputs_max = static_cast<uint32_t>(o.n_seq * rows);
    cp.n_outputs_max_per_seq = static_cast<uint32_t>(rows);
  }
  cp.kv_unified = false;
  return cp;
}

namespace {

// llama.cpp sizes a context's output buffer for n_seq_max rows of logits and
// grows it, never to shrink, at the first step that has more: with guesses,
// at a moment no one chose, and outside the context's ledger entry (the
// audit's serve-draft found +2 MiB of anon after a later wave on the bpe test
// model, whose rows are 151,936 floats). One step as wide as any to come,
// decoded as the context is made, sizes it with the context.
void reserve_output_rows(llama_context* ctx, const llama_context_params& cp, int32_t rows_per_seq) {
  const auto total = static_cast<int32_t>(primed_output_rows(cp));
  if (total <= static_cast<int32_t>(cp.n_seq_max)) return;
  const auto n_seq = static_cast<int32_t>(cp.n_seq_max);
  const int32_t per_seq = std::min(rows_per_seq, static_cast<int32_t>(cp.n_ctx / cp.n_seq_max));
  llama_batch b = llama_batch_init(total, 0, 1);
  if (!b.token) throw Error("cannot allocate a batch of " + std::to_string(total) + " tokens");
  Defer free_batch([&] { llama_batch_free(b); });
  for (int32_t s = 0; s < n_seq && b.n_tokens < total; ++s) {
    for (int32_t k = 0; k < per_seq && b.n_tokens < total; ++k) batch_add(b, 0, k, s, true);
  }
  const int32_t rc = llama_decode(ctx, b);
  llama_memory_clear(llama_get_memory(ctx), true);
  if (rc != 0) throw Error("llama_decode failed (code " + std::to_string(rc) + ") sizing the batch's output rows");
}

}  // namespace

Batcher::Batcher(Model& model, const BatcherOptions& o)
    : model_(model),
      drafter_(o.speculation.kind == Speculation::Kind::draft && can_speculate(model.get())
                   ? std::make_unique<Drafter>(model, o.speculation.draft, o.n_seq,
                                               o.session.n_ctx > 0 ? o.session.n_ctx : model.info().n_ctx_train,
                                               o.session.n_batch)
                   : nullptr),
      scope_(model.scope(), "batch", ScopeOptions{.release_heap_on_close = true}),
      n_seq_(o.n_seq),
      spec_(can_speculate(model.get()) ? o.speculation : Speculation{}),
      decode_(o.decode ? o.decode : llama_decode) {
  BatcherOptions shaped = o;
  shaped.speculation = spec_;
  llama_context_params cp = batch_context_params(shaped, model.info().n_ctx_train, model.n_threads());
  cp.abort_callback = abort_poll;
  cp.abort_callback_data = this;
  ContextPlacement where;
  const int32_t rows = 1 + (spec_.on() ? spec_.draft_max : 0);
  ctx_ = new_context(scope_, model.get(), cp, model.threadpool(), &where,
                     [&cp, rows](llama_context* c) { reserve_output_rows(c, cp, rows); });
  model.place_weights(where);
  n_ctx_seq_ = static_cast<int32_t>(llama_n_ctx_seq(ctx_.get()));
  n_batch_ = static_cast<int32_t>(cp.n_batch);
  n_swa_ = llama_model_n_swa(model.get());
  cache_ = std::make_unique<PromptCache>(model.scope(), scope_, ctx_.id(), where, n_seq_, llama_n_ctx(ctx_.get()),
                                         o.cache_ram);
  batch_ = new_batch(scope_, n_batch_, 1);
  slots_.assign(static_cast<size_t>(n_seq_), nullptr);
  in_batch_.reserve(static_cast<size_t>(n_seq_));
  held_.reserve(static_cast<size_t>(n_seq_));
  stepped_.reserve(static_cast<size_t>(n_seq_));
  asks_.reserve(static_cast<size_t>(n_seq_));
  // An unload stops the draft's decodes as it stops the batch's.
  if (drafter_) llama_set_abort_callback(drafter_->context(), abort_poll, this);
  // Armed after the context, so it is released first: the thread is joined
  // before the context it decodes on is freed. An unload reaches it by
  // closing the model's scope, which closes this one.
  thread_.start(scope_, "batch decode thread", [this] { loop(); }, [this] { wake_to_stop(); });
}

Batcher::~Batcher() { scope_.close(); }

void Batcher::stop() noexcept { thread_.stop(); }

void Batcher::wake_to_stop() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  abort_ = true;
  work_cv_.notify_all();
}

size_t Batcher::active() const {
  std::lock_guard lock(mu_);
  return active_;
}

std::vector<bool> Batcher::in_use() const {
  std::lock_guard lock(mu_);
  std::vector<bool> used;
  for (const Job* j : slots_) used.push_back(j != nullptr);
  return used;
}

size_t Batcher::cached_tokens(int32_t seq) const { return cache_->tokens(seq); }

uint64_t Batcher::cached_tokens() const { return cache_->cells(); }

size_t Batcher::waiting() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

bool Batcher::abort_poll(void* data) {
  // Runs on ggml's threads while the decode thread waits in llama_decode, so
  // in_batch_ does not change under it. A step stops early only when none of
  // its requests wants it any more: the others' tokens are in it too.
  auto* self = static_cast<Batcher*>(data);
  if (self->abort_.load()) return true;
  if (self->in_batch_.empty()) return false;
  for (const Job* j : self->in_batch_) {
    if (!j->stopped()) return false;
  }
  return true;
}

GenerateResult Batcher::generate(const GenerateRequest& req, const GenerateHooks& hooks, const CancelToken* cancel) {
  GenerateResult r;
  Scope request(scope_, next_request_name());
  // Before the job: the decode thread reads its images' runs until it lets
  // go of the job.
  std::optional<ImagePrompt> with_images;
  Job job;
  job.scope = &request;
  job.cache_prompt = req.cache_prompt;
  const ImagePrompt* images = req.image_prompt.get();
  if (!images && !req.images.empty()) {
    const Projector* projector = model_.projector();
    if (!projector) throw BadImage("this model takes no images: it has no projector (its mmproj)");
    if (!req.prompt_tokens.empty()) throw BadPrompt("a prompt with images is text, not token ids");
    if (!has_tokenizer(model_.vocab())) throw NoTokenizer("this model has no tokenizer: it reads token ids only");
    images = &with_images.emplace(request, *projector, req.prompt, req.images, req.add_special);
  }
  if (!images) {
    job.prompt = prompt_tokens(model_.vocab(), req, n_ctx_seq_);
  } else {
    job.prompt = images->tokens();
    check_context_fits(static_cast<int32_t>(job.prompt.size()), req.max_tokens, n_ctx_seq_);
    check_whole_images(*images);
    job.images = &images->images();
    // Under M-RoPE the cells' positions are not the tokens' indices, which
    // the prompt cache's prefixes count in.
    if (!images->positions_are_indices()) job.cache_prompt = false;
  }
  Generation gen(request, model_.vocab(), req, job.prompt, n_ctx_seq_, r);
  gen.stop_when([&job] { return job.stopped(); });
  job.gen = &gen;
  job.result = &r;
  job.cancel = cancel;
  job.wants_progress = static_cast<bool>(hooks.on_prompt_progress);
  job.wants_timings = static_cast<bool>(hooks.on_timings);
  // After the sampler, so it runs before the chain is freed.
  Scope::Slot seq = request.reserve(Kind::context, "sequence");
  {
    // Checked where the job is queued, so that none is queued after the
    // decode thread has gone.
    std::lock_guard lock(mu_);
    if (stopping_) throw Error("the model is being unloaded; it takes no more requests");
    pending_.push_back(&job);
  }
  seq.arm(0, [this, &job] { retire_and_wait(job); });
  // Whichever way this returns, the decode thread lets go of the job before
  // the job, and the sampler chain it samples with, leave the stack.
  Defer leave([&] { request.close(); });
  work_cv_.notify_one();

  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<PromptProgress> progress;
  Timings live;
  int32_t seen = 0;  // tokens the hooks were told of
  for (;;) {
    bool done;
    int32_t generated;
    {
      std::unique_lock lock(mu_);
      auto ready = [&] {
        return job.done || !job.out.empty() || !job.out_logprobs.empty() || !job.progress.empty() ||
               (hooks.on_tokens && job.generated != seen);
      };
      if (hooks.tick) {
        job.cv.wait_for(lock, kTickInterval, ready);
      } else {
        job.cv.wait(lock, ready);
      }
      text.swap(job.out);
      logprobs.swap(job.out_logprobs);
      progress.swap(job.progress);
      live = job.live;
      done = job.done;
      generated = job.generated;
    }
    for (const PromptProgress& p : progress) hooks.on_prompt_progress(p);
    progress.clear();
    if (!logprobs.empty()) {
      if (hooks.on_logprobs) hooks.on_logprobs(std::move(logprobs));
      logprobs.clear();
    }
    if (!text.empty()) {
      if (hooks.on_timings) hooks.on_timings(live);
      if (hooks.on_text) hooks.on_text(text);
      r.text += text;
      text.clear();
    }
    if (generated != seen) {
      seen = generated;
      if (hooks.on_tokens) hooks.on_tokens(generated);
    }
    if (done) break;
    if (hooks.tick) hooks.tick();
  }
  std::move(leave).invoke();
  if (job.error) std::rethrow_exception(job.error);
  return r;
}

void Batcher::retire_and_wait(Job& job) noexcept {
  std::unique_lock lock(mu_);
  if (job.done) return;
  auto it = std::find(pending_.begin(), pending_.end(), &job);
  if (it != pending_.end()) {
    // Never got a sequence: nothing of it is in the context.
    pending_.erase(it);
    job.done = true;
    return;
  }
  job.abandoned = true;
  work_cv_.notify_all();
  job.cv.wait(lock, [&] { return job.done; });
}

void Batcher::admit() {
  for (;;) {
    Job* j;
    PromptCache::Pick p;
    {
      std::lock_guard lock(mu_);
      if (stopping_ || pending_.empty() || active_ >= slots_.size()) return;
      j = pending_.front();
      p = cache_->pick(j->prompt, j->cache_prompt, [&](size_t s) { return slots_[s] != nullptr; });
      if (p.seq < 0) return;
      pending_.pop_front();
      j->seq = p.seq;
      slots_[static_cast<size_t>(p.seq)] = j;
      ++active_;
    }
    // Outside the lock: a save and a restore copy a conversation's cells (tens
    // of MiB for a long one), and the callers' streams, /health's counts and
    // new requests need the lock meanwhile. Only this thread uses the cache
    // and the job's decode fields; a caller that leaves meanwhile finds the job
    // in its sequence and waits for its retirement.
    try {
      const int32_t kept = cache_->take(ctx_.get(), p, j->prompt, j->cache_prompt, n_swa_);
      j->n_past = j->n_fed = kept;
      j->cached = kept;
      // The cache never keeps part of an image: those before `kept` are whole.
      if (j->images) {
        while (j->next_image < j->images->size() && (*j->images)[j->next_image].start < kept) ++j->next_image;
      }
      j->result->timings.cached_tokens = kept;
      j->began = std::chrono::steady_clock::now();
      report_progress(*j, true);
    } catch (...) {
      j->error = std::current_exception();
      retire(*j, false);
    }
  }
}

void Batcher::retire(Job& job, bool cancelled) noexcept {
  {
    // A request that ended well leaves its cells to the prompt cache; any
    // other's go now, since a failed or cut step may have left them half
    // written, and so do all when the batch stops.
    std::lock_guard lock(mu_);
    bool kept = false;
    if (!cancelled && !job.error && job.cache_prompt && job.generating() && !stopping_) {
      try {
        kept = cache_->keep(job.seq, job.prompt, job.result->tokens, job.n_past);
      } catch (...) {
        // No memory for the list of its tokens: the cells cannot be matched.
      }
    }
    if (!kept) {
      cache_->drop(ctx_.get(), job.seq);
      if (drafter_) drafter_->forget(job.seq);
    }
  }
  if (cancelled) {
    job.result->finish = FinishReason::cancelled;
    job.result->cancel_reason = job.cancel && job.cancel->cancelled() ? job.cancel->reason() : CancelReason::caller;
  }
  std::string rest;
  try {
    rest = job.gen->finish();
  } catch (...) {
    if (!job.error) job.error = std::current_exception();
  }
  bool idle = false;
  {
    std::lock_guard lock(mu_);
    slots_[static_cast<size_t>(job.seq)] = nullptr;
    --active_;
    // Not when stopping: the unload that stops the batch gives the heap
    // back once, after everything.
    idle = active_ == 0 && pending_.empty() && !stopping_;
  }
  // The batch went idle: what its steps freed goes back to the OS before the
  // last request is answered, so that a loaded model idles at the size of
  // its buffers. Measured on the Vulkan variant (lavapipe), where a step's
  // driver allocations come and go on the heap: +1.4 MiB of touched free
  // heap between requests without it (reclaim audit --scenario serve).
  if (idle) release_free_heap();
  std::lock_guard lock(mu_);
  try {
    job.out += rest;
  } catch (...) {
    // Out of memory for the last piece of text: the request fails with it.
    if (!job.error) job.error = std::current_exception();
  }
  job.done = true;
  // Under the lock: once it is released the caller may return and free the job.
  job.cv.notify_one();
}

void Batcher::loop() noexcept {
  for (;;) {
    held_.clear();
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !pending_.empty() || active_ > 0; });
      if (stopping_) break;
    }
    admit();
    {
      std::lock_guard lock(mu_);
      for (Job* j : slots_) {
        if (j) held_.push_back(j);
      }
    }
    for (Job* j : held_) {
      if (j->stopped()) retire(*j, true);
    }
    try {
      step();
    } catch (...) {
      // Not one request's fault (that is caught per request): all in the
      // step fail. A step that failed before any request was in it fails
      // every request holding a sequence: left there, they would make the
      // same step fail again, forever (memory exhausted, found by
      // tests/fault_injection_test.cpp).
      if (in_batch_.empty()) {
        std::lock_guard lock(mu_);
        for (Job* j : slots_) {
          if (j) in_batch_.push_back(j);
        }
      }
      for (Job* j : in_batch_) {
        j->error = std::current_exception();
        retire(*j, false);
      }
      in_batch_.clear();
    }
  }
  // Stopping: whatever still runs or waits ends as cancelled.
  held_.clear();
  {
    std::lock_guard lock(mu_);
    for (Job* j : slots_) {
      if (j) held_.push_back(j);
    }
  }
  for (Job* j : held_) retire(*j, true);
  std::lock_guard lock(mu_);
  for (Job* j : pending_) {
    j->result->finish = FinishReason::cancelled;
    j->result->cancel_reason = CancelReason::caller;
    j->done = true;
    j->cv.notify_one();
  }
  pending_.clear();
}

bool Batcher::fill_batch() {
  llama_batch& b = *batch_.get();
  b.n_tokens = 0;
  in_batch_.clear();
  auto add = [&b](llama_token t, int32_t pos, int32_t seq, bool logits) { batch_add(b, t, pos, seq, logits); };
  std::vector<Job*>& live = held_;  // reserved: no allocation here
  live.clear();
  {
    std::lock_guard lock(mu_);
    for (Job* j : slots_) {
      if (j) live.push_back(j);
    }
  }
  // Generating requests first, one token each and their guesses, so that a
  // long prompt coming in does not hold up the streams; prompts fill the
  // rest of the batch.
  int32_t to_come = 0;  // generating requests not yet in the batch
  for (Job* j : live) to_come += j->generating();
  for (Job* j : live) {
    if (!j->generating()) continue;
    --to_come;
    j->row = b.n_tokens;
    add(j->next, j->n_past, j->seq, true);
    // As much of its guess as leaves room for the others' next tokens.
    j->n_guess = std::min(static_cast<int32_t>(j->guess.size()), n_batch_ - b.n_tokens - to_come);
    if (j->n_guess < std::max(1, spec_.draft_min)) j->n_guess = 0;
    for (int32_t k = 0; k < j->n_guess; ++k) add(j->guess[static_cast<size_t>(k)], j->n_past + 1 + k, j->seq, true);
    j->n_in_step = 1 + j->n_guess;
    in_batch_.push_back(j);
  }
  for (Job* j : live) {
    if (j->generating()) continue;
    const int32_t room = n_batch_ - b.n_tokens;
    if (room <= 0) break;
    const auto n_prompt = static_cast<int32_t>(j->prompt.size());
    // Up to its next image, which is decoded alone (feed_image).
    const int32_t end = j->images && j->next_image < j->images->size() ? (*j->images)[j->next_image].start : n_prompt;
    const int32_t n = std::min(room, end - j->n_fed);
    if (n <= 0) continue;
    const bool last = j->n_fed + n == n_prompt;
    for (int32_t k = 0; k < n; ++k) add(j->prompt[static_cast<size_t>(j->n_fed + k)], j->n_past + k, j->seq, last && k == n - 1);
    j->row = last ? b.n_tokens - 1 : -1;
    j->n_in_step = n;
    in_batch_.push_back(j);
  }
  return b.n_tokens > 0;
}

bool Batcher::step() {
  const bool fed = feed_images();
  if (!fill_batch()) return fed;
  llama_batch& b = *batch_.get();
  // The step's decodes, its sampling and its draft's guesses in one turn.
  const StepTurn turn(model_);
  const int32_t rc = decode_(ctx_.get(), b);
  steps_.fetch_add(1);
  tokens_.fetch_add(static_cast<uint64_t>(b.n_tokens));
  busy_.fetch_add(in_batch_.size());
  // Swapped with a reserved twin, so that both keep room for n_seq jobs.
  std::vector<Job*>& stepped = stepped_;
  stepped.clear();
  stepped.swap(in_batch_);
  if (rc == 2) return true;  // aborted: every request in it is stopping; the next turn retires them
  if (rc != 0) {
    const Error e("llama_decode failed (code " + std::to_string(rc) + ") at a batch of " +
                  std::to_string(b.n_tokens) + " tokens of " + std::to_string(stepped.size()) + " requests");
    for (Job* j : stepped) {
      j->error = std::make_exception_ptr(e);
      retire(*j, false);
    }
    return true;
  }
  for (Job* j : stepped) advance(*j);
  draft_guesses();
  return true;
}

void Batcher::advance(Job& j) {
  const bool was_prompt = !j.generating();
  const int32_t written = j.n_past + j.n_in_step;  // this step's cells end here
  // A guess's cell counts once the model has picked the guessed token.
  j.n_past += was_prompt ? j.n_in_step : 1;
  if (was_prompt) {
    j.n_fed += j.n_in_step;
    if (j.generating()) j.gen->prompt_done();
    report_progress(j, false);
  }
  if (j.row < 0) return;
  try {
    if (spec_.on() && !j.images) {
      if (was_prompt) {
        j.history = j.prompt;
      } else {
        j.history.push_back(j.next);
      }
    }
    // The rows in order, as one-token steps would sample them: each pick
    // goes through the request's chain (its penalties and grammar see every
    // token), and the rows after a pick that differs from the guess read
    // tokens the request will never have.
    std::string text;
    llama_token t = -1;
    bool end = false;
    int32_t kept = 0;
    for (int32_t i = 0;; ++i) {
      t = j.gen->sample(ctx_.get(), j.row + i);
      end = j.gen->accept(t, j.n_past, n_ctx_seq_ - j.extra_cells, text);
      if (end || i == j.n_guess || t != j.guess[static_cast<size_t>(i)]) break;
      ++j.n_past;
      ++kept;
      j.history.push_back(t);
    }
    if (j.n_guess > 0) {
      guesses_.fetch_add(1);
      guessed_.fetch_add(static_cast<uint64_t>(j.n_guess));
      kept_.fetch_add(static_cast<uint64_t>(kept));
      j.result->timings.draft_tokens += j.n_guess;
      j.result->timings.draft_accepted += kept;
      j.pace.judged(j.n_guess, kept, spec_.draft_max);
    }
    // The refused guesses' cells go before anything reads the sequence (the
    // prompt cache keeps exactly n_past cells of an ended request).
    if (j.n_past < written && !llama_memory_seq_rm(llama_get_memory(ctx_.get()), j.seq, j.n_past, -1)) {
      throw Error("llama.cpp could not drop the cells of refused guesses from sequence " + std::to_string(j.seq));
    }
    std::vector<TokenLogprob> logprobs = j.gen->take_logprobs();
    {
      std::lock_guard lock(mu_);
      j.out += text;
      for (TokenLogprob& lp : logprobs) j.out_logprobs.push_back(std::move(lp));
      if (j.wants_timings) j.live = j.gen->timings_now();
      j.generated = static_cast<int32_t>(j.result->tokens.size());
      j.cv.notify_one();
    }
    if (end) {
      retire(j, false);
    } else {
      j.next = t;
      guess_next(j);
    }
  } catch (const Generation::Stopped&) {
    retire(j, true);
  } catch (...) {
    j.error = std::current_exception();
    retire(j, false);
  }
}

void Batcher::report_progress(Job& j, bool first) {
  if (!j.wants_progress) return;
  const auto now = std::chrono::steady_clock::now();
  const PromptProgress p{static_cast<int32_t>(j.prompt.size()), j.cached, j.n_fed,
                         first ? 0.0 : std::chrono::duration<double, std::milli>(now - j.began).count()};
  std::lock_guard lock(mu_);
  j.progress.push_back(p);
  j.cv.notify_one();
}

}  // namespace reclaim
