#include "engine/model.h"

#include <atomic>

#include "engine/batcher.h"
#include "engine/session.h"

namespace reclaim {

namespace {

std::atomic<uint64_t> g_next_request{1};

std::string scope_name(const ModelLoad& load) {
  if (!load.name.empty()) return "model:" + load.name;
  size_t slash = load.path.find_last_of('/');
  return "model:" + (slash == std::string::npos ? load.path : load.path.substr(slash + 1));
}

}  // namespace

std::string next_request_name() { return "request:" + std::to_string(g_next_request.fetch_add(1)); }

Model::Model(const ModelLoad& load, Scope* parent) : mode_(load.mode) {
  const ScopeOptions opts{.release_heap_on_close = true};
  scope_ = parent ? std::make_unique<Scope>(*parent, scope_name(load), opts)
                  : std::make_unique<Scope>(scope_name(load), opts);
  // If the load throws, scope_'s destructor closes whatever it got.
  model_ = load_model(*scope_, load);
  n_threads_ = load.n_threads > 0 ? load.n_threads : default_threads();
  if (n_threads_ > 1) pool_ = new_threadpool(*scope_, n_threads_);
  info_ = model_info(model_.get(), load.path);
  info_.load_mode = load_mode_name(load.mode);
}

Model::~Model() { unload(); }

Batcher& Model::start_batcher(const BatcherOptions& options) {
  if (!loaded()) throw Error("model '" + info_.path + "' is unloaded");
  if (batcher_) throw Error("model '" + info_.path + "' already batches its requests");
  batcher_ = std::make_unique<Batcher>(*this, options);
  return *batcher_;
}

void Model::unload() noexcept {
  if (!scope_) return;
  // The batch's scope is a child of the model's: its requests end
  // (cancelled), then its thread is joined, then its context freed, all by
  // that scope's own cleanups.
  scope_->close();
  model_ = {};
  pool_ = {};
}

}  // namespace reclaim
