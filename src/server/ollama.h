// Ollama's API on reclaim's port: /api/chat, /api/generate, /api/embed (and
// the older /api/embeddings), /api/tags, /api/ps, /api/show, /api/version.
// A request is read into reclaim's own (the OpenAI side's), so that it runs
// on the same registry, line, keep-alive and ledger; its reply is written in
// Ollama's shapes, streamed as NDJSON by default as Ollama's is.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/registry.h"
#include "server/answer.h"
#include "server/openai.h"

namespace httplib {
struct Response;
}

namespace reclaim::server {

enum class OllamaEndpoint { chat, generate };

struct OllamaRequest {
  std::string model;
  // No messages or prompt: Ollama's way to load a model (or, with
  // keep_alive 0, to unload it).
  bool load_only = false;
  std::optional<int64_t> keep_alive_ms;
  nlohmann::json openai;           // the request in OpenAI's fields
  bool chat = true;                // rendered by the chat template (all but /api/generate's raw)
  std::vector<std::string> stops;  // options.stop: up to kMaxStops (Ollama takes any number)
  std::optional<bool> think;
  bool predict_given = false;      // options.num_predict was sent
};

// A body's model: "model", or "name" as older clients call it (400 when
// neither is a string).
std::string ollama_model(const nlohmann::json& body);

// Throws ApiException (400) naming the field that is wrong.
OllamaRequest parse_ollama_request(const std::string& body, OllamaEndpoint endpoint);
// The request as reclaim runs it; `defaults`: the model's own default fields
// (OpenAI's names), under the request's and over Ollama's defaults.
CompletionRequest ollama_completion_request(const OllamaRequest& o, const nlohmann::json& defaults);
std::unique_ptr<Answer> ollama_answer(const CompletionRequest& req, OllamaEndpoint endpoint);

struct OllamaEmbedRequest {
  std::string model;
  nlohmann::json input;  // a string or a non-empty array of strings
  bool truncate = true;
  std::optional<int64_t> keep_alive_ms;
};
// /api/embed {"input"}, or the older /api/embeddings {"prompt"} (`legacy`).
OllamaEmbedRequest parse_ollama_embed_request(const std::string& body, bool legacy);

// Ollama's error: {"error": "..."} with the status (and Retry-After).
void send_ollama_error(httplib::Response& res, const ApiError& e);
// RFC 3339 with nanoseconds, in UTC, as Ollama's created_at.
std::string ollama_time(std::chrono::system_clock::time_point t);
// Nanoseconds, as Ollama's durations.
int64_t ollama_ns(std::chrono::steady_clock::duration d);

// GET /api/tags: every model the server can serve.
nlohmann::json ollama_tags(const Registry& registry);
// GET /api/ps: the loaded models, with the ledger's bytes.
nlohmann::json ollama_ps(const Registry& registry);
// POST /api/show {"model"}.
nlohmann::json ollama_show(const Registry& registry, const std::string& model, const std::string& chat_template);
// The version this API answers as (GET /api/version).
inline constexpr const char* kOllamaApiVersion = "0.9.0";

}  // namespace reclaim::server
