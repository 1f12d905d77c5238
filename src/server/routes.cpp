// The server's endpoints in one table, each added with the same middleware:
// before any handler, the header count, CORS and the API key (a pre-routing
// handler); around each, the end of the read timeout and the error mapping
// to the API's own shape; a request's run (runtime/request_run.h) counts it
// in flight and by outcome. A new endpoint is a line of the table and a
// member function.
#include <httplib.h>

#include <regex>
#include <utility>

#include "core/error.h"
#include "server/anthropic.h"
#include "server/connections.h"
#include "server/http_errors.h"
#include "server/ollama.h"
#include "server/server.h"

namespace reclaim::server {

namespace {

// As many as httplib 0.54 (llama-server's) accepts.
constexpr size_t kMaxHeaders = 100;

}  // namespace

std::shared_ptr<RequestRun> Server::start_run() {
  return std::make_shared<RequestRun>(registry_, stats_, [] { return !Connections::client_gone(); });
}

void Server::in_run(const std::function<void(std::shared_ptr<RequestRun>)>& fn) {
  std::shared_ptr<RequestRun> run = start_run();
  try {
    fn(run);
  } catch (const ClientGone&) {
    run->client_left();  // its wait or its template's render stopped when it left; nobody reads an answer
  } catch (...) {
    run->fail();
    throw;
  }
}

const std::vector<Server::Route>& Server::route_table() {
  static const std::vector<Route> table = {
      // Control and figures (server/control.cpp).
      {"GET", "/health", send_error, &Server::health},
      {"GET", "/v1/models", send_error, &Server::list_models},
      // OpenAI's models.retrieve. The id may hold '/' (a hub id), so the rest
      // of the path is the id.
      {"GET", "/v1/models/(.+)", send_error, &Server::show_model},
      {"GET", "/v1/resources", send_error, &Server::resources},
      // The dashboard's chart: ?since=T (seconds since the epoch).
      {"GET", "/v1/resources/history", send_error, &Server::resources_history},
      {"POST", "/v1/models/load", send_error, &Server::load_model},
      // Pins or unpins without loading (the dashboard's button).
      {"POST", "/v1/models/pin", send_error, &Server::pin_model},
      {"POST", "/v1/models/unload", send_error, &Server::unload_model},
      {"GET", "/metrics", send_error, &Server::metrics},
      // Resumable streams (server/stream_routes.cpp).
      {"GET", "/v1/stream", send_error, &Server::stream_resume},
      {"DELETE", "/v1/stream", send_error, &Server::stream_stop},
      {"POST", "/v1/streams/lookup", send_error, &Server::stream_lookup},
      // llama-server's router's (server/router_routes.cpp).
      {"POST", "/models/load", send_error, &Server::router_load},
      {"POST", "/models/unload", send_error, &Server::router_unload},
      {"POST", "/models", send_error, &Server::router_download},
      {"GET", "/models/sse", send_error, &Server::router_events},
      {"DELETE", "/models", send_error, &Server::router_delete},
      // OpenAI's requests (server/completion.cpp, server/embeddings.cpp).
      {"POST", "/v1/completions", send_error, &Server::completions},
      {"POST", "/v1/chat/completions", send_error, &Server::chat_completions},
      {"POST", "/v1/embeddings", send_error, &Server::embeddings},
      {"POST", "/v1/responses", send_error, &Server::responses},
      // The same without the prefix, as llama-server serves them and as
      // clients whose base URL has no /v1 call them.
      {"GET", "/models", send_error, &Server::list_models},
      {"POST", "/chat/completions", send_error, &Server::chat_completions},
      {"POST", "/embeddings", send_error, &Server::embeddings},
      {"POST", "/responses", send_error, &Server::responses},
      // How many tokens a request's prompt would be (server/prompt_routes.cpp).
      {"POST", "/v1/chat/completions/input_tokens", send_error, &Server::chat_input_tokens},
      {"POST", "/chat/completions/input_tokens", send_error, &Server::chat_input_tokens},
      {"POST", "/v1/responses/input_tokens", send_error, &Server::responses_input_tokens},
      {"POST", "/responses/input_tokens", send_error, &Server::responses_input_tokens},
      // Anthropic's (server/anthropic_routes.cpp), with its error shape.
      {"POST", "/v1/messages", send_anthropic_error, &Server::anthropic_messages},
      {"POST", "/v1/messages/count_tokens", send_anthropic_error, &Server::anthropic_count_tokens},
      // llama-server's own (server/completion.cpp, server/tokenize.cpp,
      // server/props.cpp). Its /completions is its own shape, as /completion.
      {"POST", "/completion", send_error, &Server::native_completion},
      {"POST", "/completions", send_error, &Server::native_completion},
      {"POST", "/infill", send_error, &Server::infill},
      {"POST", "/apply-template", send_error, &Server::apply_template},
      {"POST", "/tokenize", send_error, &Server::tokenize_text},
      {"POST", "/detokenize", send_error, &Server::detokenize_tokens},
      // Reranking (server/rerank.cpp) under each name llama-server answers.
      {"POST", "/rerank", send_error, &Server::rerank_documents},
      {"POST", "/v1/rerank", send_error, &Server::rerank_documents},
      {"POST", "/reranking", send_error, &Server::rerank_documents},
      {"POST", "/v1/reranking", send_error, &Server::rerank_documents},
      {"GET", "/props", send_error, &Server::props},
      {"GET", "/slots", send_error, &Server::slots},
      {"POST", "/slots/([0-9]+)", send_error, &Server::slot_action},
      // Ollama's (server/ollama_routes.cpp), with its {"error": "..."}.
      {"GET", "/api/version", send_ollama_error, &Server::ollama_version},
      {"GET", "/api/tags", send_ollama_error, &Server::ollama_tags},
      {"GET", "/api/ps", send_ollama_error, &Server::ollama_ps},
      {"POST", "/api/show", send_ollama_error, &Server::ollama_show},
      {"POST", "/api/chat", send_ollama_error, &Server::ollama_chat},
      {"POST", "/api/generate", send_ollama_error, &Server::ollama_generate},
      {"POST", "/api/embed", send_ollama_error, &Server::ollama_embed},
      {"POST", "/api/embeddings", send_ollama_error, &Server::ollama_embeddings},
      {"POST", "/api/pull", send_ollama_error, &Server::ollama_pull},
      {"DELETE", "/api/delete", send_ollama_error, &Server::ollama_delete},
      // The dashboard (server/dashboard.cpp).
      {"GET", "/", send_error, &Server::dashboard_index},
      {"GET", "/dashboard/([A-Za-z0-9._-]+)", send_error, &Server::dashboard_file},
  };
  return table;
}

Server::ErrorShape Server::errors_of(const std::string& path) {
  // httplib matches a route's pattern as a whole-path regular expression.
  static const std::vector<std::pair<std::regex, ErrorShape>> patterns = [] {
    std::vector<std::pair<std::regex, ErrorShape>> p;
    for (const Route& r : route_table()) p.emplace_back(std::regex(r.path), r.errors);
    return p;
  }();
  for (const auto& [pattern, errors] : patterns) {
    if (std::regex_match(path, pattern)) return errors;
  }
  return send_error;
}

void Server::add_route(const Route& r) {
  auto handle = [this, r](const httplib::Request& req, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    try {
      (this->*r.handle)(req, res);
    } catch (const std::exception& ex) {
      r.errors(res, to_api_error(ex));
    }
  };
  if (std::string_view(r.method) == "GET") {
    http_->Get(r.path, handle);
    return;
  }
  if (std::string_view(r.method) == "DELETE") {  // a small JSON body, read by httplib (its size limit holds)
    http_->Delete(r.path, handle);
    return;
  }
  // A body is read here rather than by httplib, which reads one sent as a
  // form (curl's --data without a Content-Type header) as form fields, and
  // answers 413 to any over 8 KiB. The body is the body whatever its type
  // says, as llama-server takes it; the size limit (--max-body) holds.
  http_->Post(r.path, [r, handle](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
    if (req.is_multipart_form_data()) {
      Connections::answering();
      r.errors(res, {415, "invalid_request_error", "unsupported_media_type", "the body must be JSON, not multipart form data", 0});
      return;
    }
    std::string body;
    // False when the body is over the limit (httplib sets 413, which the
    // error handler words) or the client went.
    if (!read([&body](const char* data, size_t n) {
          body.append(data, n);
          return true;
        })) {
      return;
    }
    // httplib's own request object for this connection, whose body it left
    // unread for this handler: the handlers read req.body as for any route.
    const_cast<httplib::Request&>(req).body = std::move(body);
    handle(req, res);
  });
}

void Server::routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // httplib 0.11 takes any number of header lines (8 KiB each). The read
    // timeout bounds how long a flood may last; this refuses what came.
    if (req.headers.size() > kMaxHeaders) {
      errors_of(req.path)(res, {431, "invalid_request_error", "request_header_fields_too_large",
                       "the request has " + std::to_string(req.headers.size()) + " header fields; at most " +
                           std::to_string(kMaxHeaders) + " are accepted",
                       0});
      return httplib::Server::HandlerResponse::Handled;
    }
    // CORS (server/cors.h): the page's origin, when a browser sends one.
    const std::string origin = req.get_header_value("Origin");
    const bool origin_ok = cors_.allows(origin, req.get_header_value("Host"));
    if (!origin.empty() && origin_ok) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS") {
      // A preflight: browsers send it without the key. It grants nothing
      // but the asking; the request that follows still needs the key.
      if (!origin.empty() && origin_ok) {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        res.set_header("Access-Control-Max-Age", "600");
      }
      // 200 rather than 204 (both pass a preflight), as llama-server answers.
      res.status = 200;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!origin_ok) {
      // Quoted as printable ASCII: a header may hold any bytes, and JSON
      // text must be UTF-8.
      std::string shown = origin.substr(0, 200);
      for (char& c : shown) {
        if (c < 0x20 || c > 0x7e) c = '?';
      }
      errors_of(req.path)(res, {403, "invalid_request_error", "origin_not_allowed",
                       "a page of '" + shown + "' may not call this server (allow it with --cors-origin)", 0});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options_.api_keys.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    // Anthropic's clients send the key as X-Api-Key; llama-server takes both.
    if (!any_key_given(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key"), options_.api_keys)) {
      // A browser asks for the key as a login's password (any user name).
      res.set_header("WWW-Authenticate", "Basic realm=\"reclaim\", charset=\"UTF-8\"");
      errors_of(req.path)(res, {401, "authentication_error", "invalid_api_key",
                                "missing or wrong API key (Authorization: Bearer KEY, or X-Api-Key: KEY)", 0});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // Only errors without a body of ours: unknown paths, and bodies over the limit.
    if (!res.body.empty()) return;
    if (res.status == 413) {
      errors_of(req.path)(res, {413, "invalid_request_error", "request_too_large",
                                "the request body is larger than the server accepts", 0});
    } else if (res.status == 404) {
      send_error(res, {404, "invalid_request_error", "not_found", "no such endpoint", 0});
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      send_error(res, to_api_error(ex));
    } catch (...) {
      send_error(res, {500, "server_error", "", "unknown error", 0});
    }
  });

  for (const Route& r : route_table()) add_route(r);
  // Vertex AI's paths, named by its variables at start-up. The strings live
  // in options_ as long as the server.
  if (!options_.vertex_predict_route.empty()) {
    for (const Route& r : route_table()) {
      if (options_.vertex_predict_route == r.path) {
        throw Error("AIP_PREDICT_ROUTE '" + options_.vertex_predict_route + "' is one of the server's own paths");
      }
    }
    add_route({"POST", options_.vertex_predict_route.c_str(), send_error, &Server::vertex_predict});
  }
  if (!options_.vertex_health_route.empty()) {
    add_route({"GET", options_.vertex_health_route.c_str(), send_error, &Server::health});
  }
}

}  // namespace reclaim::server
