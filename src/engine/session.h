// One request's working state on a model: a context, a batch and (per
// generation) a sampler chain, all owned by the session's scope, a child of
// the model's. The scope closes when the session is destroyed, whatever ends
// the request: completion, an error, an exception, cancellation.
//
// Cancellation: the token is polled by llama.cpp's abort callback while a
// graph runs (so a long prompt stops mid-decode) and before each decode step.
#pragma once

#include <cstdint>
#include <string>

#include <llama.h>

#include "core/cancel.h"
#include "core/scope.h"
#include "engine/model.h"
#include "engine/owners.h"

namespace reclaim {

struct SessionOptions {
  int32_t n_ctx = 4096;    // 0: the model's training context
  int32_t n_batch = 512;   // tokens per prompt decode step
  int32_t n_threads = 0;   // 0: all of the model's threads (at most those)
  int32_t n_threads_batch = 0;  // 0: same as n_threads
  // An embedding context: it pools each sequence's outputs into one vector
  // (UNSPECIFIED: the model's own pooling).
  bool embeddings = false;
  enum llama_pooling_type pooling = LLAMA_POOLING_TYPE_UNSPECIFIED;
};

class Session {
 public:
  // `cancel` may be null; if given, it must outlive the session.
  Session(Model& model, const SessionOptions& options, const CancelToken* cancel = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Model& model() { return model_; }
  llama_context* context() const { return ctx_.get(); }
  llama_batch& batch() { return *batch_.get(); }
  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_batch() const { return n_batch_; }
  Scope& scope() { return scope_; }
  const CancelToken* cancel_token() const { return cancel_; }
  bool cancelled() const { return cancel_ && cancel_->cancelled(); }

 private:
  Model& model_;
  Scope scope_;
  const CancelToken* cancel_;
  ScopedRef<llama_context> ctx_;
  ScopedRef<llama_batch> batch_;
  int32_t n_ctx_ = 0, n_batch_ = 0;
};

// All cores of this machine (what n_threads = 0 means).
int32_t default_threads();

// The llama.cpp parameters of a session's context, so that an estimate made
// before a load plans the context that sessions will really make.
// `n_ctx_train`: the model's (0 when not yet known: llama.cpp then uses it
// itself); `max_threads`: the model's pool size. Throws Error on bad options.
llama_context_params session_context_params(const SessionOptions& o, int32_t n_ctx_train, int32_t max_threads);

}  // namespace reclaim
