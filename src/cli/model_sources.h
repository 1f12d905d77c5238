// Where `reclaim serve`'s models come from: -m flags, --models-dir, the
// --config file, and the stores of other tools (--models-from: Ollama's,
// the Hugging Face cache, LM Studio's; runtime/stores/model_stores.h). The
// file, the folder and the stores are read again on SIGHUP; the folder and
// the stores also on a request for a name the server does not have, when
// they changed since they were last read (a stamp of their folders).
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/registry.h"
#include "runtime/stores/model_stores.h"

namespace reclaim::cli {

struct SourceArgs {
  std::vector<std::string> models;  // -m PATH[:ALIAS]
  std::string draft;                // --draft FILE: the draft model of those
  std::string mmproj;               // --mmproj FILE: their image projector
  std::string models_dir, config;
  std::vector<std::string> pins;
  std::vector<Store> stores;  // in the order named: an earlier one's name wins
};

// -m PATH[:ALIAS]... The alias defaults to the file name without .gguf. It
// is all after the first ".gguf:", so that it may hold colons (qwen2.5:7b)
// and the folders a colon; a file not named .gguf takes its alias after the
// last colon that no '/' follows.
// `draft`, when not empty, is each one's draft model (speculative decoding);
// `mmproj` each one's image projector.
std::vector<ModelSpec> models_from_flags(const std::vector<std::string>& models, const std::string& draft = "",
                                         const std::string& mmproj = "");

// --models-dir's models: each .gguf in it named by its file, with
// "mmproj-FILE" beside it as its projector; and each folder in it that holds
// one model (a split one's first part) named by the folder, with the
// "mmproj*.gguf" there as its projector (llama-server's router's layout).
// Projector files are no models.
std::vector<ModelSpec> models_in_folder(const std::string& dir);

// A store's models as the registry takes them: Ollama's params as request
// defaults (stop, temperature, top_p, top_k, min_p, seed, repeat_penalty,
// presence_penalty, frequency_penalty; num_predict as max_tokens, num_ctx
// as the context), its system text as the default system message. What a
// request would refuse is left out, with a line in `skipped`.
ModelSpec store_model_spec(const StoreModel& m, StoreKind kind, std::vector<std::string>& skipped);

class ModelSources {
 public:
  explicit ModelSources(SourceArgs a);

  std::vector<ModelSpec> all() const;
  bool empty_at_start() const { return empty_at_start_; }
  // Whether a folder or a store may gain models while the server runs.
  bool can_grow() const;
  // A store read from now on too (the pulled store, once a pull put models
  // there), unless it is read already; either way the next rescan reads
  // the stores at once, whenever the last one did (a pull or a delete has
  // just changed it).
  void include(const Store& store);

  // SIGHUP: the file, the folder and the stores again. Throws, keeping the
  // settings before, where one is wrong or the registry refuses the new set.
  Registry::Reconfigured reload(Registry& registry);
  // A request for an unknown name, or a file that came or went in the
  // folder: what changed, again; true if it found more.
  bool rescan(Registry& registry);

 private:
  struct Read {
    std::vector<ModelSpec> folder, config, stores;
    std::string folder_stamp, stores_stamp;
  };
  // The folder and the stores, and the file unless `config` is given.
  Read read_changing(const std::vector<ModelSpec>* config) const;
  std::vector<ModelSpec> all_locked(const Read& r) const;
  std::string stores_stamp() const;

  const SourceArgs a_;
  mutable std::mutex mu_;
  std::vector<Store> stores_;  // a_.stores, and those included since
  const std::vector<ModelSpec> flags_;
  Read now_;
  std::chrono::steady_clock::time_point stores_checked_;  // when their stamp was last taken
  bool empty_at_start_ = false;
};

}  // namespace reclaim::cli
