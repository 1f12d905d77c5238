// Google Cloud's Vertex AI custom containers (AIP_MODE=PREDICTION): POST
// AIP_PREDICT_ROUTE (/predict by default) takes {"instances": [...]}, each
// the body of one of the server's own POST endpoints with "@requestFormat"
// naming it (the path, or its camel case without /v1: "chatCompletions",
// "embeddings", "apiChat"), and answers {"predictions": [...]}, each that
// endpoint's answer or {"error": ...}, as llama-server does under the same
// variables. Instances run one after another on the request's thread, so
// that each sees the request's connection (a client that leaves ends them).
#include <httplib.h>

#include <cctype>

#include "server/connections.h"
#include "server/http_errors.h"
#include "server/openai.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// As many as llama-server takes in one prediction.
constexpr size_t kMaxInstances = 128;

// "/v1/chat/completions" -> "chatCompletions", as Vertex names formats.
std::string camel_case_of(std::string_view path) {
  if (path.substr(0, 3) == "/v1") path.remove_prefix(3);
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  std::string out;
  bool cap = false;
  for (char c : path) {
    if (c == '/' || c == '-' || c == '_') {
      cap = true;
    } else {
      out += cap ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      cap = false;
    }
  }
  return out;
}

// An instance's own mistake, in the shape every endpoint's errors have.
json instance_error(const std::string& message) { return error_json({.message = message}); }

}  // namespace

const Server::Route* Server::predict_route(const std::string& format) {
  const Route* by_name = nullptr;
  for (const Route& r : route_table()) {
    const std::string_view path = r.path;
    // Only fixed POST paths: a pattern's groups have no name to give.
    if (std::string_view(r.method) != "POST" || path.find('(') != std::string_view::npos) continue;
    if (path == format) return &r;
    if (!by_name && camel_case_of(path) == format) by_name = &r;  // the first wins, as llama-server's
  }
  return by_name;
}

json Server::predict_one(const httplib::Request& req, const json& instance) {
  if (!instance.is_object()) return instance_error("each instance must be a JSON object");
  const auto format = instance.find("@requestFormat");
  if (format == instance.end() || !format->is_string()) {
    return instance_error("each instance must include a string @requestFormat");
  }
  const Route* route = predict_route(format->get<std::string>());
  if (!route) return instance_error("no endpoint answers the @requestFormat '" + format->get<std::string>() + "'");
  json payload = instance;
  payload.erase("@requestFormat");
  // One answer an instance: Ollama's endpoints stream unless told not to.
  const bool ollama = std::string_view(route->path).substr(0, 5) == "/api/";
  if (payload.contains("stream") || ollama) payload["stream"] = false;
  httplib::Request sub;
  sub.method = "POST";
  sub.path = route->path;
  sub.headers = req.headers;
  sub.body = payload.dump();
  httplib::Response out;
  try {
    (this->*route->handle)(sub, out);
  } catch (const std::exception& ex) {
    route->errors(out, to_api_error(ex));
  }
  if (out.content_provider_) {
    // Not expected with "stream": false; its lease goes with the provider.
    if (out.content_provider_resource_releaser_) out.content_provider_resource_releaser_(false);
    return instance_error("the predict route does not stream");
  }
  if (out.body.empty()) return nullptr;
  json answer = json::parse(out.body, nullptr, false);
  return answer.is_discarded() ? json(out.body) : answer;
}

void Server::vertex_predict(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_object(req.body);
  const auto instances = body.find("instances");
  if (instances == body.end() || !instances->is_array()) {
    bad_request("the body must include an array named instances");
  }
  if (instances->size() > kMaxInstances) {
    bad_request("instances holds " + std::to_string(instances->size()) + " items; at most " +
                std::to_string(kMaxInstances) + " are taken");
  }
  json predictions = json::array();
  for (const json& instance : *instances) {
    // Each instance's run stops when the client leaves; the ones after it
    // are not started.
    if (Connections::client_gone()) return;
    predictions.push_back(predict_one(req, instance));
  }
  res.set_content(json{{"predictions", predictions}}.dump(), "application/json");
}

}  // namespace reclaim::server
