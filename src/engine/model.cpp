#include "engine/model.h"

#include <atomic>

#include "engine/batcher.h"
#include "engine/core_turns.h"
#include "engine/projector.h"
#include "engine/devices.h"
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

Model::Model(const ModelLoad& load, Scope* parent) : device_(hold_devices()), mode_(load.mode) {
  const ScopeOptions opts{.release_heap_on_close = true};
  scope_ = parent ? std::make_unique<Scope>(*parent, scope_name(load), opts)
                  : std::make_unique<Scope>(scope_name(load), opts);
  // If the load throws, scope_'s destructor closes whatever it got.
  model_ = load_model(*scope_, load, &entry_bytes_);
  n_threads_ = load.n_threads > 0 ? load.n_threads : default_threads();
  n_gpu_layers_ = load.n_gpu_layers;
  pooling_ = load.pooling;
  if (!load.mmproj.empty()) projector_ = std::make_unique<Projector>(*this, load.mmproj);
  // With its layers on an accelerator the CPU's part of a step is small (the
  // token embeddings), and workers that spin after it take the cores from
  // the device's own threads (lavapipe's, a CUDA driver's): they sleep at
  // once there.
  const bool on_device = load.n_gpu_layers != 0 && !accelerator_devices().empty();
  if (n_threads_ > 1) pool_ = new_threadpool(*scope_, n_threads_, on_device ? 0 : 50);
  if (pool_ && !on_device) {
    cpu_pool_ = true;
    core_pool_born();
  }
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

void Model::place_weights(const ContextPlacement& where) {
  std::lock_guard lock(placed_mu_);
  if (placed_ || !model_ || !where.known) return;
  placed_ = true;
  const uint64_t device = where.model.device_total();
  if (device > 0) scope_->place(model_.id(), entry_bytes_ > device ? entry_bytes_ - device : 0, where.model.devices);
}

void Model::unload() noexcept {
  if (!scope_) return;
  // The batch's scope is a child of the model's: its requests end
  // (cancelled), then its thread is joined, then its context freed, all by
  // that scope's own cleanups.
  scope_->close();
  model_ = {};
  pool_ = {};
  if (cpu_pool_) {
    cpu_pool_ = false;
    core_pool_gone();
  }
  device_.reset();
}

}  // namespace reclaim
