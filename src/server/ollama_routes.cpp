// Ollama's endpoints on the server's port. Requests run as the OpenAI
// side's do (server/completion.cpp, server/embeddings.cpp), on the same
// registry; errors are Ollama's {"error": "..."}.
#include <httplib.h>

#include "server/connections.h"
#include "server/http_errors.h"
#include "server/ollama.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

void Server::ollama_load(RequestRun& run, httplib::Response& res, const std::string& model,
                         std::optional<int64_t> keep_alive_ms, bool chat) {
  json j = {{"model", model}, {"created_at", ollama_time(std::chrono::system_clock::now())}};
  if (chat) {
    j["message"] = {{"role", "assistant"}, {"content", ""}};
  } else {
    j["response"] = "";
  }
  j["done"] = true;
  if (keep_alive_ms && *keep_alive_ms == 0) {
    // Ollama's keep_alive 0: unloaded now (its requests in flight first,
    // as an unload's drain lets them).
    registry_.unload(model, UnloadMode::drain, unload_timeout_);
    j["done_reason"] = "unload";
  } else {
    (void)settings_of(model);  // a file added to --models-dir since
    // Held and let go with the run: loaded, with this keep-alive from now.
    run.hold(model, requested_keep_alive(keep_alive_ms));
    j["done_reason"] = "load";
  }
  run.succeed();
  res.set_content(j.dump(), "application/json");
}

void Server::ollama_version(const httplib::Request&, httplib::Response& res) {
  res.set_content(json{{"version", kOllamaApiVersion}}.dump(), "application/json");
}

void Server::ollama_tags(const httplib::Request&, httplib::Response& res) {
  res.set_content(reclaim::server::ollama_tags(registry_).dump(), "application/json");
}

void Server::ollama_ps(const httplib::Request&, httplib::Response& res) {
  res.set_content(reclaim::server::ollama_ps(registry_).dump(), "application/json");
}

void Server::ollama_show(const httplib::Request& req, httplib::Response& res) {
  const std::string model = ollama_model(parse_object(req.body));
  const ModelSettings settings = settings_of(model);
  res.set_content(reclaim::server::ollama_show(registry_, model, settings.chat_template.value_or(options_.chat_template)).dump(),
                  "application/json");
}

void Server::ollama_chat(const httplib::Request& req, httplib::Response& res) {
  ollama_completion(req, res, OllamaEndpoint::chat);
}

void Server::ollama_generate(const httplib::Request& req, httplib::Response& res) {
  ollama_completion(req, res, OllamaEndpoint::generate);
}

void Server::ollama_completion(const httplib::Request& req, httplib::Response& res, OllamaEndpoint endpoint) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const OllamaRequest o = parse_ollama_request(req.body, endpoint);
    if (o.load_only) {
      ollama_load(*run, res, o.model, o.keep_alive_ms, endpoint == OllamaEndpoint::chat);
      return;
    }
    complete(req, res, {o.model, [&o](const json& defaults) { return ollama_completion_request(o, defaults); },
                   [endpoint](const CompletionRequest& r) { return ollama_answer(r, endpoint); }},
             std::move(run));
  });
}

void Server::ollama_embed(const httplib::Request& req, httplib::Response& res) { ollama_embedding(req, res, false); }

void Server::ollama_embeddings(const httplib::Request& req, httplib::Response& res) { ollama_embedding(req, res, true); }

void Server::ollama_embedding(const httplib::Request& req, httplib::Response& res, bool legacy) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const Steady::time_point start = Steady::now();
    const OllamaEmbedRequest o = parse_ollama_embed_request(req.body, legacy);
    const EmbedResult r = embed_input(*run, o.model, o.input, o.keep_alive_ms, o.truncate);
    const json j = legacy ? json{{"embedding", r.vectors.at(0)}}
                          : json{{"model", o.model},
                                 {"embeddings", r.vectors},
                                 {"total_duration", ollama_ns(Steady::now() - start)},
                                 {"prompt_eval_count", r.prompt_tokens}};
    res.set_content(j.dump(), "application/json");
  });
}

}  // namespace reclaim::server
