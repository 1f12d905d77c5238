// The endpoints that control the models and report on the server: health,
// the models and their load, pin and unload, the ledger and the figures,
// Prometheus' metrics. They answer at once: none waits behind a completion
// (server/worker_pool.h).
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "server/http_errors.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/resources.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

void Server::health(const httplib::Request&, httplib::Response& res) {
  res.set_content(R"({"status":"ok"})", "application/json");
}

void Server::list_models(const httplib::Request&, httplib::Response& res) {
  res.set_content(models_json(registry_).dump(), "application/json");
}

void Server::show_model(const httplib::Request& req, httplib::Response& res) {
  res.set_content(model_json(registry_.status(req.matches[1])).dump(), "application/json");
}

Baseline Server::baseline() {
  std::lock_guard lock(baseline_mu_);
  return baseline_;
}

void Server::resources(const httplib::Request&, httplib::Response& res) {
  res.set_content(resources_json(registry_, baseline(), connections_->fds()).dump(), "application/json");
}

void Server::resources_history(const httplib::Request& req, httplib::Response& res) {
  double since = 0;
  if (req.has_param("since")) {
    const std::string v = req.get_param_value("since");
    char* end = nullptr;
    since = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(since)) {
      send_error(res, {400, "invalid_request_error", "invalid_since", "'since' must be seconds since the epoch, e.g. 1764870000.5", 0});
      return;
    }
  }
  res.set_content(history_->since(since).dump(), "application/json");
}

void Server::load_model(const httplib::Request& req, httplib::Response& res) {
  const ControlRequest c = parse_control_request(req.body, false);
  (void)settings_of(c.model);  // a file added to --models-dir since
  Wait wait;
  wait.still_wanted = [] { return !Connections::client_gone(); };
  registry_.load(c.model, c.pin, wait);
  res.set_content(model_json(registry_.status(c.model)).dump(), "application/json");
}

void Server::pin_model(const httplib::Request& req, httplib::Response& res) {
  const ControlRequest c = parse_pin_request(req.body);
  (void)settings_of(c.model);  // a file added to --models-dir since
  registry_.set_pinned(c.model, c.pin);
  res.set_content(model_json(registry_.status(c.model)).dump(), "application/json");
}

void Server::unload_model(const httplib::Request& req, httplib::Response& res) {
  const ControlRequest c = parse_control_request(req.body, true);
  const Millis timeout = c.timeout_ms ? Millis(*c.timeout_ms) : unload_timeout_;
  registry_.unload(c.model, c.cancel ? UnloadMode::cancel : UnloadMode::drain, timeout);
  res.set_content(model_json(registry_.status(c.model)).dump(), "application/json");
}

namespace {

// When the process started, in Unix seconds: set as it starts (a static's
// initialisation), for the header llama-server sends with its metrics.
const int64_t kProcessStart =
    std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();

}  // namespace

void Server::metrics(const httplib::Request&, httplib::Response& res) {
  res.set_header("Process-Start-Time-Unix", std::to_string(kProcessStart));
  res.set_content(metrics_text(registry_, baseline().usage, stats_, http_stats()), "text/plain; version=0.0.4");
}

}  // namespace reclaim::server
