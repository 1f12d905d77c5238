// A loaded model: the llama_model, its metadata, its decode threads, and the
// scope that owns them. Sessions (requests) open their scopes under the
// model's, so unloading the model closes every session first, then joins the
// threads and frees the weights (APR's order: children before parents).
//
// One thread pool a model, shared by its sessions, not one a context: two
// pools on the same cores fight, since ggml's workers spin for a while after
// each graph (measured with bench/generate on 2 cores: prompt speed 0.64x of
// llama-bench with a second idle session's pool, 0.99x with one pool). A
// pool runs one graph at a time, so sessions take decode_mutex() to decode.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <llama.h>

#include "core/scope.h"
#include "engine/device_life.h"
#include "engine/model_info.h"
#include "engine/owners.h"

namespace reclaim {

class Batcher;
struct BatcherOptions;
class Projector;

// The scope name of a request ("request:<n>"), from one counter for every
// session and batch of the process, so that two requests never share a name
// on the ledger.
std::string next_request_name();

class Model {
 public:
  // Loads into a new scope "model:<file name>" under `parent`, or a root
  // scope when there is no parent. Throws Error (LoadAborted when the
  // progress callback stopped it); nothing of a failed load stays.
  explicit Model(const ModelLoad& load, Scope* parent = nullptr);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  llama_model* get() const { return model_.get(); }
  const llama_vocab* vocab() const { return llama_model_get_vocab(model_.get()); }
  const ModelInfo& info() const { return info_; }
  LoadMode mode() const { return mode_; }
  int32_t n_gpu_layers() const { return n_gpu_layers_; }  // as the load asked
  // Where sessions of this model open their scopes.
  Scope& scope() { return *scope_; }
  ggml_threadpool* threadpool() const { return pool_.get(); }  // null with one thread
  int32_t n_threads() const { return n_threads_; }
  // The pooling its load asked for over the file's (engine/embed.h reads both).
  std::optional<enum llama_pooling_type> pooling() const { return pooling_; }
  std::mutex& decode_mutex() { return decode_mu_; }
  // Whether its steps compute on the CPU's cores (not an accelerator's): it
  // takes turns there with the other models (engine/core_turns.h).
  bool computes_on_cpu() const { return cpu_pool_; }
  // Requests then decode together in one context (engine/batcher.h). Once;
  // null until started.
  Batcher& start_batcher(const BatcherOptions& options);
  Batcher* batcher() { return batcher_.get(); }
  // Its image projector (ModelLoad::mmproj), or null: a text-only model.
  Projector* projector() { return projector_.get(); }

  // Splits the model's ledger entry into host and device bytes by where a
  // context of this model says the weights are (llama.cpp tells it only of
  // a context: new_context's `where`). The first call does it; later ones
  // return at once.
  void place_weights(const ContextPlacement& where);

  // Closes the scope now: live sessions first, then the model. Using the
  // model afterwards is an error; a second call does nothing.
  void unload() noexcept;
  bool loaded() const { return static_cast<bool>(model_); }

 private:
  DeviceHold device_;  // first in, last out: the device stays up while anything of the model lives
  std::unique_ptr<Scope> scope_;
  ScopedRef<llama_model> model_;
  ScopedRef<ggml_threadpool> pool_;
  // Before the batch: its scope is older, so closing the model's closes the
  // batch (and joins the thread that encodes images) first.
  std::unique_ptr<Projector> projector_;
  std::unique_ptr<Batcher> batcher_;
  ModelInfo info_;
  LoadMode mode_;
  int32_t n_gpu_layers_ = -1;
  int32_t n_threads_ = 1;
  std::optional<enum llama_pooling_type> pooling_;
  bool cpu_pool_ = false;  // counted among the pools that take turns
  uint64_t entry_bytes_ = 0;
  std::mutex decode_mu_;
  std::mutex placed_mu_;
  bool placed_ = false;
};

}  // namespace reclaim
