// llama-server's /props and /slots: what a client that was written for
// llama-server reads of the model behind it (its context, its slots, its
// sampling defaults), from the registry's settings and status. Neither loads
// a model: a query must not take gigabytes.
#include <httplib.h>

#include "engine/build_info.h"
#include "engine/sampling.h"
#include "server/http_errors.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// What a request that sets nothing gets: reclaim's defaults, under the
// model's own (its settings' request defaults), in llama-server's names.
json generation_params(const ModelSettings& settings) {
  const SamplingParams d;
  json p = {{"temperature", d.temperature},
            {"top_k", d.top_k},
            {"top_p", d.top_p},
            {"min_p", d.min_p},
            {"repeat_penalty", d.repeat_penalty},
            {"repeat_last_n", d.repeat_last_n},
            {"presence_penalty", d.presence_penalty},
            {"frequency_penalty", d.frequency_penalty},
            {"seed", d.seed},
            {"n_predict", -1}};
  for (const auto& [key, value] : settings.request_defaults.items()) p[key] = value;
  if (settings.request_defaults.contains("max_tokens")) p["n_predict"] = settings.request_defaults["max_tokens"];
  return p;
}

}  // namespace

std::string Server::model_of_query(const httplib::Request& req) const {
  json named = json::object();
  if (req.has_param("model")) named["model"] = req.get_param_value("model");
  named = with_default_model(std::move(named));
  return named.contains("model") ? named["model"].get<std::string>() : std::string();
}

void Server::props(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.has_param("model") || !options_.router ? model_of_query(req) : std::string();
  const RegistryOptions& o = registry_.options();
  if (name.empty()) {
    // A server of several models, or of models it found itself, answers as
    // llama-server's router does.
    res.set_content(json{{"role", "router"},
                         {"max_instances", o.max_loaded},
                         {"models_autoload", o.autoload},
                         {"model_alias", "reclaim"},
                         {"model_path", "none"},
                         {"default_generation_settings", {{"params", json::object()}, {"n_ctx", 0}}},
                         {"build_info", llama_build()}}
                        .dump(),
                    "application/json");
    return;
  }
  const ModelSettings settings = settings_of(name);
  const BatcherOptions batch = registry_.batching(name);
  const ModelStatus s = registry_.status(name);
  json props = {{"default_generation_settings", {{"n_ctx", batch.session.n_ctx}, {"params", generation_params(settings)}}},
                {"total_slots", batch.n_seq},
                {"model_alias", s.name},
                {"model_path", s.path},
                {"modalities", {{"vision", !s.mmproj.empty()}, {"video", false}, {"audio", false}}},
                {"endpoint_slots", true},
                {"endpoint_props", false},
                {"endpoint_metrics", true},
                // llama-server's sleeping is a model unloaded to save memory,
                // which is what reclaim's keep-alive does.
                {"is_sleeping", s.state != ModelState::loaded},
                {"build_info", llama_build()}};
  res.set_content(props.dump(), "application/json");
}

void Server::slots(const httplib::Request& req, httplib::Response& res) {
  const std::string named = model_of_query(req);
  // A file added to --models-dir since is found; an unknown name is a 404
  // (but on a server of one model and no folder, which answers any name).
  if (!named.empty()) settings_of(named);
  const std::vector<std::string> names = named.empty() ? registry_.names() : std::vector<std::string>{named};
  json list = json::array();
  for (const std::string& name : names) {
    const BatcherOptions batch = registry_.batching(name);
    const ModelStatus s = registry_.status(name);
    for (int id = 0; id < batch.n_seq; ++id) {
      const bool busy = static_cast<size_t>(id) < s.sequences_in_use.size() && s.sequences_in_use[static_cast<size_t>(id)];
      list.push_back({{"id", id},
                      {"model", s.name},
                      {"n_ctx", batch.session.n_ctx},
                      {"is_processing", busy},
                      {"speculative", batch.speculation.on()}});
    }
  }
  res.set_content(list.dump(), "application/json");
}

void Server::slot_action(const httplib::Request&, httplib::Response& res) {
  // A slot's cells saved to a file would be memory and files outside the
  // ledger; the prompt cache keeps conversations in host memory instead.
  send_error(res, {501, "not_supported_error", "not_supported",
                   "saving, restoring and erasing a slot is not supported: reclaim's prompt cache keeps conversations "
                   "(--cache-ram)",
                   0});
}

}  // namespace reclaim::server
