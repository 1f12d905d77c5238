// Typed owners for llama.cpp objects. Each constructor acquires the object
// into a Scope (reserve, acquire, arm), so no llama object exists that is not
// on the ledger, and each is freed by the one cleanup written here for its
// type (as llamafile's cleanup_llama_* and llama-cpp.h's deleters do).
#pragma once

#include <llama.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/scope.h"
#include "engine/placement.h"

namespace reclaim {

// A reference to an object that a Scope owns: not its owner. Copyable, as a
// pointer is; the scope frees the object on close, or earlier through
// release() (which any copy may call once).
template <class T>
class ScopedRef {
 public:
  ScopedRef() = default;
  ScopedRef(T* ptr, Scope* scope, CleanupId id) : ptr_(ptr), scope_(scope), id_(id) {}
  T* get() const { return ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  CleanupId id() const { return id_; }
  // Frees now; the scope will not free it again.
  void release() {
    if (scope_ && id_) scope_->release(id_);
    ptr_ = nullptr;
    id_ = 0;
  }

 private:
  T* ptr_ = nullptr;
  Scope* scope_ = nullptr;
  CleanupId id_ = 0;
};

enum class LoadMode { mmap, none, mlock, mmap_mlock };
LoadMode load_mode_from_name(const std::string& name);  // throws Error
const char* load_mode_name(LoadMode mode);
// Whether the weights stay in a mapping of the file (mmap, mmap-mlock).
inline bool maps_file(LoadMode mode) { return mode == LoadMode::mmap || mode == LoadMode::mmap_mlock; }

struct ModelLoad {
  std::string path;
  std::string name;  // the model's scope is "model:<name>" (default: the file's name)
  LoadMode mode = LoadMode::mmap;
  int32_t n_gpu_layers = -1;  // all layers on the accelerator, when there is one
  int32_t n_threads = 0;      // the model's decode threads (0: all cores)
  // How embeddings pool the model's outputs, over what the file says
  // (llama-server's --pooling); unset: the file's, or mean.
  std::optional<enum llama_pooling_type> pooling;
  // The model's image projector (engine/projector.h), loaded after it; empty:
  // none, and the model takes text only.
  std::string mmproj;
  // Called with 0..1; returning false aborts the load.
  std::function<bool(float)> progress;
};

// The load was stopped by its progress callback; nothing of it is left.
class LoadAborted : public Error {
 public:
  using Error::Error;
};

// A model file that cannot be served: damaged, or not what it says it is.
// The message names the file and what is wrong with it.
class InvalidModelFile : public Error {
 public:
  using Error::Error;
};

// Checks that `path` is a readable GGUF file before llama.cpp sees it, so that
// the error names the real problem: missing or unreadable (Error), or not
// GGUF, too short (InvalidModelFile).
void check_model_file(const std::string& path);

// llama_model_load_from_file with the blocks it makes in an arena of their
// own (core/arena.h), so that freeing the model gives them back whole.
llama_model* load_in_arena(const std::string& path, const llama_model_params& params);

// The rows of logits a context has from its creation: llama.cpp makes n_seq_max
// and grows them at the first step with more; a context allowed more a step
// (n_outputs_max, as a batch that guesses is) is primed to them by its
// maker (engine/batcher.cpp), and an estimate counts them (model_info.cpp).
inline int64_t primed_output_rows(const llama_context_params& p) {
  const int64_t allowed = p.n_outputs_max == 0 ? 0 : std::min(p.n_outputs_max, p.n_batch);
  return std::max<int64_t>(p.n_seq_max, allowed);
}

// A file's name without its folders: the label of its ledger entry.
std::string base_name(const std::string& path);

// `bytes`, when given, gets what the model's ledger entry holds.
ScopedRef<llama_model> load_model(Scope& scope, const ModelLoad& load, uint64_t* bytes = nullptr);
// A pool of `n_threads` worker threads (ggml's), joined when it is freed.
// `poll`: how long idle workers spin for the next graph before they sleep
// (ggml's 0..100; 50 is its default).
ScopedRef<ggml_threadpool> new_threadpool(Scope& scope, int32_t n_threads, uint32_t poll = 50);
// `pool`: the threads the context decodes on, owned by the caller's scope;
// null: the context gets a pool of its own, registered before it in `scope`.
// The context's ledger entry is split by where its buffers are; `where`,
// when given, gets that breakdown, with the model's weights (Model::
// place_weights).
// `prime`, when given, runs on the new context before its bytes are taken:
// what it makes the context allocate is the context's too.
ScopedRef<llama_context> new_context(Scope& scope, llama_model* model, const llama_context_params& params,
                                 ggml_threadpool* pool = nullptr, ContextPlacement* where = nullptr,
                                 const std::function<void(llama_context*)>& prime = {});
ScopedRef<llama_batch> new_batch(Scope& scope, int32_t n_tokens, int32_t n_seq_max);
// Appends a token of one sequence to a batch made with room for it.
inline void batch_add(llama_batch& b, llama_token t, llama_pos pos, llama_seq_id seq, bool logits) {
  const int32_t i = b.n_tokens++;
  b.token[i] = t;
  b.pos[i] = pos;
  b.n_seq_id[i] = 1;
  b.seq_id[i][0] = seq;
  b.logits[i] = logits;
}
ScopedRef<llama_sampler> new_sampler_chain(Scope& scope, std::string label);
// A GBNF grammar's sampler; lazy: it constrains only from the first
// trigger (a pattern matched in the text generated, or a token) on. Throws
// Error when llama.cpp does not take the grammar.
ScopedRef<llama_sampler> new_grammar(Scope& scope, const llama_vocab* vocab, const std::string& gbnf, bool lazy,
                                 const std::vector<std::string>& trigger_patterns,
                                 const std::vector<llama_token>& trigger_tokens);

}  // namespace reclaim
