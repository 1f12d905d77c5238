// llama-server's router's model endpoints, beside reclaim's own
// /v1/models/load and /v1/models/unload (which wait for the change and
// answer the model's status): POST /models/load and /models/unload start
// the change and answer {"success": true} at once, and a client follows the
// model's `status.value` on GET /models or GET /models/sse. POST /models
// pulls a model (runtime/stores/pull.h) in the background, its progress on
// the events; DELETE /models?model= removes one reclaim pulled.
//
// The background work runs on the HTTP side's worker pool, whose threads
// are on the ledger and joined when the server stops; a pull polls the
// server's stop.
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "runtime/stores/model_stores.h"
#include "runtime/stores/pull.h"
#include "server/http_errors.h"
#include "server/json_fields.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// Router pulls running or waiting for the one before: past it, a 429.
constexpr int kMaxPendingDownloads = 8;

json event(const std::string& model, const char* name, json data = nullptr) {
  json e = {{"model", model}, {"event", name}};
  if (!data.is_null()) e["data"] = std::move(data);
  return e;
}

bool loaded_or_loading(ModelState s) { return s == ModelState::loading || s == ModelState::loaded; }

}  // namespace

void Server::router_load(const httplib::Request& req, httplib::Response& res) {
  const ControlRequest c = parse_control_request(req.body, false);
  (void)settings_of(c.model);  // a file added to --models-dir since; a 404 for a name no model has
  const ModelStatus s = registry_.status(c.model);
  if (loaded_or_loading(s.state)) bad_field("model", "model '" + c.model + "' is already loaded or loading");
  pool_->enqueue([this, name = s.name, pin = c.pin] {
    Wait wait;
    wait.still_wanted = [this] { return !stopping_.load(); };
    try {
      registry_.load(name, pin, wait);
    } catch (const std::exception&) {
      // The model's status says it failed (last_error), as GET /models shows.
    }
  });
  res.set_content(json{{"success", true}}.dump(), "application/json");
}

void Server::router_unload(const httplib::Request& req, httplib::Response& res) {
  const ControlRequest c = parse_control_request(req.body, true);
  const ModelStatus s = registry_.status(c.model);
  if (!loaded_or_loading(s.state)) bad_field("model", "model '" + c.model + "' is not loaded");
  const Millis timeout = c.timeout_ms ? Millis(*c.timeout_ms) : unload_timeout_;
  pool_->enqueue([this, name = s.name, cancel = c.cancel, timeout] {
    try {
      registry_.unload(name, cancel ? UnloadMode::cancel : UnloadMode::drain, timeout);
    } catch (const std::exception&) {
      // Gone from the configuration meanwhile: nothing left to unload.
    }
  });
  res.set_content(json{{"success", true}}.dump(), "application/json");
}

void Server::router_download(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_object(req.body);
  if (!has_field(body, "model") || !body["model"].is_string() || body["model"].get<std::string>().empty()) {
    bad_field("model", "'model' must be a non-empty string: the model to pull (ORG/REPO:QUANT from Hugging Face, NAME:TAG from Ollama's library)");
  }
  const std::string name = body["model"];
  const bool insecure = has_field(body, "insecure") && get_field<bool>(body, "insecure", "true or false");
  if (options_.pulled_store.empty()) {
    throw ApiException(ApiError{501, "server_error", "not_supported", "this server pulls no models", 0});
  }
  if (insecure && !options_.allow_insecure_pull) {
    bad_field("insecure", "insecure pulls (plain HTTP) are off on this server (start it with --allow-insecure-pull)");
  }
  // As `reclaim pull` and llama.cpp's -hf read it: ORG/REPO:QUANT is Hugging Face's.
  const PullName n = parse_pull_name(name, true);
  if (std::filesystem::exists(options_.pulled_store + "/manifests/" + n.manifest_path())) {
    bad_field("model", "model '" + name + "' already exists (DELETE /models?model=" + name + " removes it)");
  }
  if (downloads_pending_.fetch_add(1) >= kMaxPendingDownloads) {
    downloads_pending_.fetch_sub(1);
    throw ApiException(ApiError{429, "rate_limit_error", "too_many_downloads",
                                "already " + std::to_string(kMaxPendingDownloads) + " pulls running or waiting; try again when one ends", 5});
  }
  pool_->enqueue([this, name, insecure] {
    download_in_background(name, insecure);
    downloads_pending_.fetch_sub(1);
  });
  res.set_content(json{{"success", true}}.dump(), "application/json");
}

void Server::download_in_background(const std::string& name, bool insecure) {
  PullOptions o;
  o.store = options_.pulled_store;
  o.insecure = insecure;
  o.cancelled = [this] { return stopping_.load(); };
  // The bytes of each layer so far, as llama-server reports each file's.
  json progress = json::object();
  auto last = std::chrono::steady_clock::time_point{};
  o.progress = [&](const PullProgress& p) {
    if (p.digest.empty()) return;
    progress[p.digest] = {{"done", p.completed}, {"total", p.total}};
    // At most ten a second, and each layer's last.
    const auto now = std::chrono::steady_clock::now();
    if (p.completed < p.total && now - last < std::chrono::milliseconds(100)) return;
    last = now;
    downloads_.publish(event(name, "download_progress", {{"progress", progress}}));
  };
  try {
    std::lock_guard lock(pull_mu_);
    (void)pull_model(name, o);
    if (options_.pulled) options_.pulled();  // served before the client hears it is there
    downloads_.publish(event(name, "download_finished"));
  } catch (const std::exception& e) {
    downloads_.publish(event(name, "download_failed", {{"error", e.what()}}));
  }
}

void Server::router_events(const httplib::Request&, httplib::Response& res) {
  // Each model's state as the listener is taken to know it (from its GET
  // /models): only a change from there is sent.
  std::map<std::string, ModelState> told;
  for (const ModelStatus& s : registry_.list()) told[s.name] = s.state;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, next = downloads_.end(), told = std::move(told)](size_t, httplib::DataSink& sink) mutable {
        auto write = [&sink](const std::string& text) { return sink.write(text.data(), text.size()); };
        auto last_write = std::chrono::steady_clock::now();
        while (!stopping_.load() && sink.is_writable()) {
          std::string out;
          for (const json& e : downloads_.read(next, std::chrono::milliseconds(100))) out += "data: " + e.dump() + "\n\n";
          for (const ModelStatus& s : registry_.list()) {
            auto [it, added] = told.emplace(s.name, s.state);
            if (!added && it->second == s.state) continue;
            it->second = s.state;
            json data = {{"status", model_state_name(s.state)}};
            if (s.state == ModelState::unloaded && !s.last_error.empty()) data["error"] = s.last_error;
            out += "data: " + event(s.name, "status_change", data).dump() + "\n\n";
          }
          const auto now = std::chrono::steady_clock::now();
          // A comment now and then: proxies keep the connection, and a
          // listener that left is found by the write that fails.
          if (out.empty() && now - last_write > std::chrono::seconds(10)) out = ": ping\n\n";
          if (out.empty()) continue;
          if (!write(out)) break;
          last_write = now;
        }
        sink.done();
        return true;
      });
}

void Server::router_delete(const httplib::Request& req, httplib::Response& res) {
  const std::string name = required_query(req, "model", "a non-empty string (DELETE /models?model=NAME)");
  const PullName n = parse_pull_name(name, true);
  if (options_.pulled_store.empty() || !std::filesystem::exists(options_.pulled_store + "/manifests/" + n.manifest_path())) {
    bool served = true;
    try {
      (void)registry_.status(name);
    } catch (const std::exception&) {
      served = false;
    }
    if (served) bad_field("model", "model '" + name + "' is not removable: only what reclaim pulled can be deleted");
    throw ApiException(ApiError{404, "invalid_request_error", "model_not_found", "model '" + name + "' not found", 0});
  }
  remove_pulled(name, stores::ollama_name(n.host, n.ns, n.model, n.tag), true);
  res.set_content(json{{"success", true}}.dump(), "application/json");
}

}  // namespace reclaim::server
