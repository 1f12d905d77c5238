#include "engine/session.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace reclaim {

namespace {

bool on_abort_poll(void* data) { return static_cast<const CancelToken*>(data)->cancelled(); }

// Checked before the scope is opened under the model's, which would refuse
// with a logic error.
Scope& open_model_scope(Model& model) {
  if (!model.loaded()) throw Error("model '" + model.info().path + "' is unloaded; it has no sessions any more");
  return model.scope();
}

}  // namespace

int32_t default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int32_t>(n) : 1;
}

llama_context_params session_context_params(const SessionOptions& o, int32_t n_ctx_train, int32_t max_threads) {
  if (o.n_ctx < 0) throw Error("context size must be >= 0 (0: the model's training context)");
  if (o.n_batch <= 0) throw Error("batch size must be > 0");
  llama_context_params cp = llama_context_default_params();
  const int32_t n_ctx = o.n_ctx ? o.n_ctx : n_ctx_train;
  cp.n_ctx = static_cast<uint32_t>(n_ctx);
  cp.n_batch = static_cast<uint32_t>(n_ctx > 0 ? std::min(o.n_batch, n_ctx) : o.n_batch);
  cp.n_ubatch = cp.n_batch;
  cp.n_seq_max = 1;
  // The model's pool has max_threads workers; a session may use fewer.
  cp.n_threads = o.n_threads > 0 ? std::min(o.n_threads, max_threads) : max_threads;
  cp.n_threads_batch = o.n_threads_batch > 0 ? std::min(o.n_threads_batch, max_threads) : cp.n_threads;
  cp.embeddings = o.embeddings;
  cp.pooling_type = o.pooling;
  // A generating context reads one row of logits a step: the last prompt
  // token's, or the token just sampled. Left at its default (n_batch),
  // llama.cpp reserves its compute buffer for logits of every token of a
  // ubatch, as llama-server does not: 75.0 MiB against 29.8 MiB for the
  // 300 MiB spm test model at a batch of 512 (`reclaim serve --verbose`,
  // "compute buffer size"); for the 151,936-token bpe test model that
  // `reclaim serve` serves by default, 926.4 MiB held against 640.4 MiB
  // (POST /v1/models/load {"model": "test"}, its "bytes").
  if (!o.embeddings) {
    cp.n_outputs_max = 1;
    cp.n_outputs_max_per_seq = 1;
  }
  return cp;
}

Session::Session(Model& model, const SessionOptions& o, const CancelToken* cancel)
    : model_(model),
      scope_(open_model_scope(model), next_request_name(),
             ScopeOptions{.release_heap_on_close = true}),
      cancel_(cancel) {
  llama_context_params cp = session_context_params(o, model.info().n_ctx_train, model.n_threads());
  n_batch_ = static_cast<int32_t>(cp.n_batch);
  if (cancel_) {
    cp.abort_callback = on_abort_poll;
    cp.abort_callback_data = const_cast<CancelToken*>(cancel_);
  }
  ContextPlacement where;
  ctx_ = new_context(scope_, model.get(), cp, model.threadpool(), &where);
  model.place_weights(where);
  // llama.cpp may round the context up (to a multiple of its padding).
  n_ctx_ = static_cast<int32_t>(llama_n_ctx(ctx_.get()));
  batch_ = new_batch(scope_, n_batch_, 1);
}

Session::~Session() { scope_.close(); }

}  // namespace reclaim
