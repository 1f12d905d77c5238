// A model's image projector (its "mmproj" file): llama.cpp's mtmd context
// over the text model, in a scope of its own under the model's
// ("model:NAME/mmproj"). Its weights and the compute buffer that mtmd's
// warm-up reserves at load are one ledger entry, split into host and device
// bytes where the projector runs on an accelerator, and freed when the
// model's scope closes, before the text model it reads.
#pragma once

#include <cstdint>
#include <string>

#include "core/scope.h"
#include "engine/owners.h"

struct mtmd_context;
struct mtmd_context_params;

namespace reclaim {

class Model;
struct MemoryEstimate;

class Projector {
 public:
  // Throws InvalidModelFile naming `path` when mtmd refuses it (not a
  // projector, or one of another width than the model's).
  Projector(Model& model, const std::string& path);
  Projector(const Projector&) = delete;
  Projector& operator=(const Projector&) = delete;

  mtmd_context* get() const { return ctx_.get(); }
  uint64_t bytes() const { return bytes_; }

 private:
  Scope scope_;
  ScopedRef<mtmd_context> ctx_;
  uint64_t bytes_ = 0;
};

// How reclaim loads a projector beside a model of `n_gpu_layers`: on the
// accelerator with it where it has one, quiet, and warmed up at load (its
// compute buffer reserved on a dummy image then, not at a first request).
mtmd_context_params projector_params(int32_t n_gpu_layers, int32_t n_threads);

// Adds what the projector at `path` would take beside a model loaded with
// `n_gpu_layers` to `e`: its weights and the compute buffer its warm-up
// reserves, by place (llama.cpp's simulated load of it, mtmd_get_memory_
// usage, which llama-server's fit uses too). Not counted: the heap of its
// graph scheduler's tables, which llama.cpp allocates and never touches
// (ggml_backend_sched_new's context buffer, 160 MiB for mtmd's 8,192 nodes).
// Throws InvalidModelFile naming `path` where it cannot be read.
void add_projector_estimate(MemoryEstimate& e, const std::string& path, int32_t n_gpu_layers);

}  // namespace reclaim
