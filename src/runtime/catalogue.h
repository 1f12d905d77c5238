// The models a registry knows: each one's entry, found by its name or an
// alias, and the settings it loads with, its own over the registry's
// options. A reloaded configuration is applied here (reconfigure), and an
// entry removed from it is dropped once nothing holds it (sweep). Used under
// the registry's lock.
#pragma once

#include <list>
#include <optional>
#include <string>
#include <vector>

#include "engine/batcher.h"
#include "engine/session.h"
#include "runtime/line.h"
#include "runtime/model_entry.h"
#include "runtime/registry_options.h"
#include "runtime/vetter.h"

namespace reclaim {

struct Reconfigured {
  int added = 0, changed = 0, removed = 0;
};

class Catalogue {
 public:
  // Throws Error where the models are not a valid set (validate).
  Catalogue(const RegistryOptions& options, std::vector<ModelSpec> models);

  // A model name: printable, no backslash, and no empty, '.' or '..' part
  // between slashes (BadModelName).
  static void check_name(const std::string& name);
  // Names and aliases valid and given once; each one's context possible.
  void validate(const std::vector<ModelSpec>& models) const;

  // By name, then by alias; never a retired entry (UnknownModel).
  ModelEntry& find(const std::string& name);
  const ModelEntry& find(const std::string& name) const;
  std::list<ModelEntry>& entries() { return entries_; }  // stable addresses: leases point into it
  const std::list<ModelEntry>& entries() const { return entries_; }

  // The models as a reloaded configuration has them (Registry::reconfigure
  // says what each change does). Validates first, changing nothing on a
  // throw.
  Reconfigured reconfigure(std::vector<ModelSpec> models);
  // Drops the retired entries nothing holds: out of memory, no request on
  // them or waiting, and no place in `line`.
  void sweep(const Line& line);

  // The settings a model loads and runs with.
  BatcherOptions batching_of(const ModelEntry& e) const;
  Millis keep_alive_of(const ModelEntry& e) const;
  int max_running_of(const ModelEntry& e) const;
  // The context a load plans for, in the estimate and the vetting.
  llama_context_params context_params(const ModelEntry& e) const;
  VetRequest vet_request(const ModelEntry& e) const;
  // Its draft model's, when it has one (engine/drafter.h).
  std::optional<VetRequest> draft_vet_request(const ModelEntry& e) const;

 private:
  const RegistryOptions& options_;
  std::list<ModelEntry> entries_;
};

}  // namespace reclaim
