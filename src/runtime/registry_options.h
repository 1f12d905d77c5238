// How a registry runs: the models it is given (ModelSpec) and the options
// that hold for all of them unless a model's own settings say otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/model.h"
#include "engine/session.h"
#include "engine/speculation.h"
#include "runtime/model_settings.h"
#include "runtime/room.h"
#include "runtime/vetter.h"

namespace reclaim {

struct ModelSpec {
  std::string name;  // what requests call it
  std::string path;
  bool pinned = false;
  ModelSettings settings;  // its own; unset ones are the registry's options
  bool operator==(const ModelSpec&) const = default;
};

using Millis = std::chrono::milliseconds;

struct RegistryOptions {
  int64_t memory_budget = 0;  // bytes for all loaded models; 0: no budget
  // Host memory each model's prompt cache may take for the sequences it
  // saves (--cache-ram; engine/prompt_store.h), within what the budget has
  // left; 0: none.
  int64_t cache_ram = 0;
  Places memory_budget_at;    // bytes for each place named ("host", "vulkan0"): room.h
  int max_loaded = 0;         // 0: no limit
  Millis keep_alive = std::chrono::minutes(5);  // < 0: never unload; 0: right after the last request
  // How long the accelerators stay up once no model holds them; then their
  // runtime state is given back (engine/device_life.h). < 0: never.
  Millis device_idle = std::chrono::minutes(1);
  bool autoload = true;       // a request for an unloaded model loads it
  LoadMode load_mode = LoadMode::mmap;
  int32_t n_gpu_layers = -1;
  std::string pooling;  // every model's pooling (engine/embed.h's names); empty: each file's
  // Every model's speculative decoding, where its settings do not say.
  Speculation speculation;
  int32_t n_threads = 0;
  // A model's requests decode together in one context of this many
  // sequences, each of session.n_ctx (engine/batcher.h). At least 1.
  int32_t parallel = 1;
  // Requests a model runs at once (0: no limit); the next ones wait, up to
  // max_queue of them a model, and beyond that are refused (QueueFull).
  int max_running = 0;
  int max_queue = 32;
  // How long a request may wait for a slot, a load or a swap (QueueTimeout).
  Millis queue_timeout = std::chrono::minutes(5);
  // How long a model chosen to make room lets its requests finish before it
  // cancels them.
  Millis drain_timeout = std::chrono::seconds(30);
  // A busy model that loaded less than this ago keeps admitting requests
  // while others wait: fewer swaps when traffic alternates between models,
  // at the cost of that much more wait for the others. 0: pure turns.
  Millis min_serve{0};
  SessionOptions session;     // the context a request gets; sized into the estimate
  // Vets each file in a child process before its first load (runtime/
  // vetter.h); null: files are trusted, and estimated in this process.
  std::shared_ptr<Vetter> vetter;
  bool log = false;           // a line on stderr for each load and unload (also RECLAIM_LOG=models)
};

}  // namespace reclaim
