// A loaded model: the llama_model, its metadata, and the scope that owns it.
// Sessions (requests) open their scopes under the model's, so unloading the
// model closes every session first, then frees the weights (APR's order:
// children before parents).
#pragma once

#include <memory>
#include <string>

#include <llama.h>

#include "core/scope.h"
#include "engine/model_info.h"
#include "engine/owners.h"

namespace reclaim {

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
  // Where sessions of this model open their scopes.
  Scope& scope() { return *scope_; }

  // Closes the scope now: live sessions first, then the model. Using the
  // model afterwards is an error; a second call does nothing.
  void unload() noexcept;
  bool loaded() const { return static_cast<bool>(model_); }

 private:
  std::unique_ptr<Scope> scope_;
  Owned<llama_model> model_;
  ModelInfo info_;
  LoadMode mode_;
};

}  // namespace reclaim
