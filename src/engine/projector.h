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

namespace reclaim {

class Model;

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

}  // namespace reclaim
