// Contexts kept warm between a model's requests. Creating a context allocates
// its KV cache and compute buffers; once the request's scope gives that heap
// back, the next request faults every page in again (a 155 MiB compute
// buffer for a 151,936-token vocab at n_ubatch 256: +0.5 s a request on this
// machine, `reclaim audit --scenario generate`). A pooled context is not
// freed at the end of a request but handed back here.
//
// Nothing is hidden by it: each pooled context is on the ledger under
// "model:<name>/pool", its lease under the request that holds it, and the
// pool is a child scope of the model's, so unloading the model frees it
// (after the requests, which are newer children and close first).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include <llama.h>

#include "core/scope.h"
#include "engine/owners.h"

namespace reclaim {

class ContextPool {
 public:
  // `capacity`: at most this many pooled contexts; requests beyond it get
  // contexts of their own, freed with them.
  ContextPool(Scope& model_scope, int capacity);
  ContextPool(const ContextPool&) = delete;
  ContextPool& operator=(const ContextPool&) = delete;

  // A context for `params` leased to `request`: an idle pooled one when one
  // matches, a new pooled one while there is room, else one owned by the
  // request. The lease (a cleanup in `request`) hands it back.
  Owned<llama_context> lease(Scope& request, llama_model* model, const llama_context_params& params,
                             ggml_threadpool* pool);

  // Frees the idle contexts now (memory pressure, keep-alive expiry).
  size_t release_idle();
  size_t pooled() const;
  size_t idle() const;
  int capacity() const { return capacity_; }

 private:
  struct Entry {
    Owned<llama_context> ctx;
    uint32_t n_ctx = 0, n_batch = 0, n_ubatch = 0;
    int32_t n_threads = 0, n_threads_batch = 0;
    bool in_use = false;
  };
  static bool matches(const Entry& e, const llama_context_params& p);
  void give_back(llama_context* ctx) noexcept;

  Scope scope_;
  const int capacity_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace reclaim
