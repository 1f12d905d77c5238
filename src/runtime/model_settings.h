// What one model may set for itself (a [models.NAME] table of --config,
// runtime/config_file.h). Each value left unset is the server's, from its
// command line.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace reclaim {

struct ModelSettings {
  std::vector<std::string> aliases;  // more names requests may call it by
  std::optional<int32_t> n_ctx;      // each sequence's context (--ctx)
  std::optional<int32_t> parallel;   // sequences of its batch, and requests at once (--parallel)
  std::optional<int32_t> n_threads;
  std::optional<int32_t> n_gpu_layers;
  std::optional<std::string> pooling;  // an embedding model's (engine/embed.h's names)
  // Speculative decoding (engine/speculation.h): its kind by name
  // (kSpeculationNames) and the most and fewest tokens a step guesses.
  std::optional<std::string> spec_type;
  std::optional<int32_t> draft_max, draft_min;
  std::optional<std::string> draft;  // a draft model's file: draft-simple
  std::optional<std::string> mmproj;  // its image projector's file (engine/projector.h)
  std::optional<std::chrono::milliseconds> keep_alive;
  std::optional<std::string> chat_template;  // a built-in name or template text
  // false: the template rendered by llama.cpp's built-in engine, the one of
  // its names that the template's text resembles (llama-server's --no-jinja).
  std::optional<bool> jinja;
  // The system message a chat that has none gets (Ollama's SYSTEM).
  std::optional<std::string> system;
  bool preload = false;
  // Request fields a request that leaves them out gets (temperature, top_p,
  // max_tokens, stop, ...): an object, checked as a request's are.
  nlohmann::json request_defaults = nlohmann::json::object();

  bool operator==(const ModelSettings&) const = default;
};

// `next` as a model loaded with `loaded` can take it before it loads again:
// `next` with what its weights and its batch were made with kept. The rest
// (aliases, template, keep-alive, defaults) a loaded model takes at once.
inline ModelSettings taken_while_loaded(const ModelSettings& loaded, ModelSettings next) {
  next.n_ctx = loaded.n_ctx;
  next.parallel = loaded.parallel;
  next.n_threads = loaded.n_threads;
  next.n_gpu_layers = loaded.n_gpu_layers;
  next.pooling = loaded.pooling;
  next.spec_type = loaded.spec_type;
  next.draft_max = loaded.draft_max;
  next.draft_min = loaded.draft_min;
  next.draft = loaded.draft;
  next.mmproj = loaded.mmproj;
  return next;
}

// Whether a model loaded with `a` must load again to take `b`.
inline bool needs_reload(const ModelSettings& a, const ModelSettings& b) { return taken_while_loaded(a, b) != b; }

}  // namespace reclaim
