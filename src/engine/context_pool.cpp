#include "engine/context_pool.h"

#include <algorithm>

#include "core/heap.h"

namespace reclaim {

ContextPool::ContextPool(Scope& model_scope, int capacity)
    : scope_(model_scope, "pool", ScopeOptions{.release_heap_on_close = true}), capacity_(std::max(0, capacity)) {}

bool ContextPool::matches(const Entry& e, const llama_context_params& p) {
  return !e.in_use && e.n_ctx == p.n_ctx && e.n_batch == p.n_batch && e.n_ubatch == p.n_ubatch &&
         e.n_threads == p.n_threads && e.n_threads_batch == p.n_threads_batch;
}

Owned<llama_context> ContextPool::lease(Scope& request, llama_model* model, const llama_context_params& params,
                                        ggml_threadpool* pool) {
  llama_context* ctx = nullptr;
  {
    std::lock_guard lock(mu_);
    for (Entry& e : entries_) {
      if (matches(e, params)) {
        e.in_use = true;
        ctx = e.ctx.get();
        break;
      }
    }
  }
  if (!ctx) {
    bool room;
    {
      std::lock_guard lock(mu_);
      room = static_cast<int>(entries_.size()) < capacity_;
    }
    if (!room) return new_context(request, model, params, pool);
    // Created outside the lock: it takes milliseconds and may throw.
    Owned<llama_context> made = new_context(scope_, model, params, pool);
    std::lock_guard lock(mu_);
    entries_.push_back({made, params.n_ctx, params.n_batch, params.n_ubatch, params.n_threads, params.n_threads_batch, true});
    ctx = made.get();
  }
  // The request's own cancel token (or none) replaces the previous one's.
  llama_set_abort_callback(ctx, params.abort_callback, params.abort_callback_data);
  try {
    CleanupId id = request.add(Kind::context, "pooled n_ctx=" + std::to_string(params.n_ctx), 0,
                               [this, ctx] { give_back(ctx); });
    return {ctx, &request, id};
  } catch (...) {
    give_back(ctx);
    throw;
  }
}

void ContextPool::give_back(llama_context* ctx) noexcept {
  // No request may be stopped by a token it no longer owns.
  llama_set_abort_callback(ctx, nullptr, nullptr);
  llama_memory_clear(llama_get_memory(ctx), false);
  std::lock_guard lock(mu_);
  for (Entry& e : entries_) {
    if (e.ctx.get() == ctx) e.in_use = false;
  }
}

size_t ContextPool::release_idle() {
  std::vector<Owned<llama_context>> idle;
  {
    std::lock_guard lock(mu_);
    auto keep = std::stable_partition(entries_.begin(), entries_.end(), [](const Entry& e) { return e.in_use; });
    for (auto it = keep; it != entries_.end(); ++it) idle.push_back(it->ctx);
    entries_.erase(keep, entries_.end());
  }
  for (Owned<llama_context>& c : idle) c.release();
  // The scope trims on close only; after an early release the heap is trimmed here.
  if (!idle.empty()) release_free_heap();
  return idle.size();
}

size_t ContextPool::pooled() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

size_t ContextPool::idle() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.in_use; }));
}

}  // namespace reclaim
