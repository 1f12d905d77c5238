// Ollama's POST /api/pull and DELETE /api/delete, on reclaim's own store of
// pulled models (runtime/stores/pull.h): the pull's progress as Ollama
// streams it, one JSON object a line ({"status": "pulling manifest"},
// {"status": "pulling HEX", "digest", "total", "completed"}, ...,
// {"status": "success"}), so that ollama-js's pull() reads it; the model
// served at once after. One pull at a time.
#include <httplib.h>

#include <chrono>
#include <filesystem>

#include "runtime/registry_errors.h"
#include "runtime/stores/model_stores.h"
#include "runtime/stores/pull.h"
#include "server/connections.h"
#include "server/http_errors.h"
#include "server/json_fields.h"
#include "server/ollama.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// Progress as Ollama words it: a layer is "pulling" and its digest's first
// twelve hex digits.
json progress_json(const PullProgress& p) {
  if (p.digest.empty() || p.status == "verifying sha256 digest") return {{"status", p.status}};
  return {{"status", "pulling " + p.digest.substr(7, 12)}, {"digest", p.digest}, {"total", p.total}, {"completed", p.completed}};
}

}  // namespace

void Server::ollama_pull(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_object(req.body);
  const std::string name = ollama_model(body);
  const bool insecure = has_field(body, "insecure") && get_field<bool>(body, "insecure", "true or false");
  const bool stream = !has_field(body, "stream") || get_field<bool>(body, "stream", "true or false");
  if (options_.pulled_store.empty()) {
    throw ApiException(ApiError{501, "server_error", "not_supported", "this server pulls no models", 0});
  }
  if (insecure && !options_.allow_insecure_pull) {
    bad_field("insecure", "insecure pulls (plain HTTP) are off on this server (start it with --allow-insecure-pull)");
  }
  (void)parse_pull_name(name, false);  // a name that is not one is a 400 before any stream
  PullOptions o;
  o.store = options_.pulled_store;
  o.insecure = insecure;
  o.hf_short_names = false;  // Ollama's reading of NS/MODEL, which its clients send
  if (!stream) {
    o.cancelled = [this] { return stopping_.load() || Connections::client_gone(); };
    {
      std::lock_guard lock(pull_mu_);
      (void)pull_model(name, o);
    }
    if (options_.pulled) options_.pulled();
    res.set_content(json{{"status", "success"}}.dump(), "application/json");
    return;
  }
  res.set_chunked_content_provider("application/x-ndjson", [this, name, o](size_t, httplib::DataSink& sink) mutable {
    std::string last_digest;
    auto last = std::chrono::steady_clock::time_point{};
    o.cancelled = [this, &sink] { return stopping_.load() || !sink.is_writable(); };
    auto write = [&sink](const json& j) {
      const std::string line = j.dump() + "\n";
      sink.write(line.data(), line.size());
    };
    o.progress = [&](const PullProgress& p) {
      if (p.status == "success") return;  // said once the server serves the model, below
      // A line a layer at most ten times a second, and its first and last.
      const auto now = std::chrono::steady_clock::now();
      const bool edge = p.digest != last_digest || p.completed >= p.total;
      if (!edge && now - last < std::chrono::milliseconds(100)) return;
      last_digest = p.digest;
      last = now;
      write(progress_json(p));
    };
    try {
      std::lock_guard lock(pull_mu_);
      (void)pull_model(name, o);
      if (options_.pulled) options_.pulled();
      // A client that reads "success" asks for the model next: it is served by then.
      write({{"status", "success"}});
    } catch (const std::exception& e) {
      write({{"error", e.what()}});
    }
    sink.done();
    return true;
  });
}

void Server::ollama_delete(const httplib::Request& req, httplib::Response& res) {
  const std::string name = ollama_model(parse_object(req.body));
  const PullName n = parse_pull_name(name, false);
  const std::string served = stores::ollama_name(n.host, n.ns, n.model, n.tag);
  if (options_.pulled_store.empty() || !std::filesystem::exists(options_.pulled_store + "/manifests/" + n.manifest_path())) {
    throw ApiException(ApiError{404, "not_found_error", "model_not_found",
                                "model '" + name + "' not found (only what reclaim pulled can be deleted)", 0});
  }
  remove_pulled(name, served, false);
  res.status = 200;
}

void Server::remove_pulled(const std::string& name, const std::string& served, bool hf_short_names) {
  // Under the pull lock: a pull in progress may count these blobs as there.
  std::lock_guard lock(pull_mu_);
  try {
    registry_.unload(served, UnloadMode::drain, unload_timeout_);  // its requests finish first
  } catch (const UnknownModel&) {
    // not served (yet): nothing to unload
  }
  (void)delete_pulled(options_.pulled_store, name, hf_short_names);
  if (options_.pulled) options_.pulled();
}

}  // namespace reclaim::server
