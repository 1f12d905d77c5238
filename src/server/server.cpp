#include "server/server.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/ledger.h"
#include "server/accepted.h"
#include "server/http_errors.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/resources.h"

namespace reclaim::server {

using nlohmann::json;

bool same_secret(const std::string& a, const std::string& b) {
  // Every byte is compared whatever the earlier ones were, so the time does
  // not tell how much of a guess was right.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

bool key_in_authorization(const std::string& auth, const std::string& key) {
  const std::string bearer = "Bearer ", basic = "Basic ";
  if (auth.rfind(bearer, 0) == 0) return same_secret(auth.substr(bearer.size()), key);
  if (auth.rfind(basic, 0) != 0) return false;
  // A browser's login (the dashboard): any user name, the key as password.
  const std::string encoded = auth.substr(basic.size());
  if (encoded.empty() || encoded.size() % 4 != 0 || encoded.size() > 4096) return false;
  std::string decoded(encoded.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                reinterpret_cast<const unsigned char*>(encoded.data()), static_cast<int>(encoded.size()));
  if (n < 0) return false;
  // EVP_DecodeBlock counts the padding's bytes as zeros.
  size_t size = static_cast<size_t>(n);
  for (size_t i = encoded.size(); i > 0 && encoded[i - 1] == '='; --i) --size;
  decoded.resize(size);
  const size_t colon = decoded.find(':');
  return colon != std::string::npos && same_secret(decoded.substr(colon + 1), key);
}

namespace {

// As many as httplib 0.54 (llama-server's) accepts.
constexpr size_t kMaxHeaders = 100;

template <class F>
void guarded(httplib::Response& res, F&& f) {
  try {
    f();
  } catch (const std::exception& ex) {
    send_error(res, to_api_error(ex));
  }
}

}  // namespace

Server::Server(ServerOptions options, Registry& registry)
    : options_(std::move(options)), cors_(options_.cors_origins), unload_timeout_(options_.unload_timeout), registry_(registry),
      http_(std::make_unique<httplib::Server>()) {
  // The threads that stay start here, not when listening starts, so that
  // they are in the baseline that residues are counted from. httplib deletes
  // the queue it is given when it stops; it gets a forwarder to this pool.
  connections_ = std::make_unique<Connections>(scope_, options_.read_timeout);
  pool_ = std::make_unique<WorkerPool>(scope_, static_cast<size_t>(options_.http_threads),
                                       static_cast<size_t>(std::max(options_.max_connections, options_.http_threads)));
  struct Forward : httplib::TaskQueue {
    explicit Forward(Server& s) : server(s) {}
    // On the thread that accepted the connection, right after accept().
    void enqueue(std::function<void()> fn) override {
      const int socket = take_accepted_socket();
      Connections* conns = server.connections_.get();
      server.pool_->enqueue([conns, socket, fn = std::move(fn)] { conns->serve(socket, fn); });
    }
    void shutdown() override { server.shutdown_pool(); }
    Server& server;
  };
  http_->new_task_queue = [this] { return new Forward(*this); };
  history_ = std::make_unique<ResourceHistory>(scope_, registry_, options_.history_every, options_.history_samples);
  http_->set_payload_max_length(options_.max_body);
  // The end of each answer (a stream's included): the connection's next
  // request must come within the read timeout.
  http_->set_logger([](const httplib::Request&, const httplib::Response&) { Connections::answered(); });
  routes();
}

Server::~Server() {
  http_.reset();
  shutdown_pool();  // when it never listened
  connections_.reset();
}

HttpStats Server::http_stats() const {
  HttpStats h;
  h.threads = pool_->threads();
  h.busy = pool_->busy();
  h.queued = pool_->queued();
  h.peak = pool_->peak();
  h.connections = connections_->open();
  h.cut = connections_->cut();
  return h;
}

void Server::shutdown_pool() {
  // ThreadPool::shutdown joins its threads, which can be done once.
  if (!pool_shut_.exchange(true)) pool_->shutdown();
}

int Server::bind() {
  int port = options_.port;
  errno = 0;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
  } else if (!http_->bind_to_port(options_.host, port)) {
    port = -1;
  }
  // httplib returns no reason; bind(2)'s errno is the last one it set.
  if (port <= 0) {
    const int e = errno;
    throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                (e != 0 ? std::string(": ") + std::strerror(e) : std::string()));
  }
  return port;
}

void Server::run() { http_->listen_after_bind(); }

bool Server::running() const { return http_->is_running(); }

void Server::set_baseline(Usage baseline) {
  const LedgerTotals ledger = Ledger::process().totals();
  std::lock_guard lock(baseline_mu_);
  baseline_.usage = std::move(baseline);
  baseline_.ledger_count = ledger.count;
  baseline_.ledger_bytes = ledger.bytes;
}

void Server::stop() { http_->stop(); }

std::shared_ptr<RequestRun> Server::start_run() {
  return std::make_shared<RequestRun>(registry_, stats_, [] { return !Connections::client_gone(); });
}

void Server::in_run(httplib::Response& res, ErrorShape send,
                    const std::function<void(std::shared_ptr<RequestRun>)>& fn) {
  std::shared_ptr<RequestRun> run = start_run();
  try {
    fn(run);
  } catch (const ClientGone&) {
    run->client_left();  // its wait or its template's render stopped when it left; nobody reads an answer
  } catch (const std::exception& ex) {
    run->fail();
    send(res, to_api_error(ex));
  }
}

void Server::routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // httplib 0.11 takes any number of header lines (8 KiB each). The read
    // timeout bounds how long a flood may last; this refuses what came.
    if (req.headers.size() > kMaxHeaders) {
      send_error(res, {431, "invalid_request_error", "request_header_fields_too_large",
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
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!origin_ok) {
      // Quoted as printable ASCII: a header may hold any bytes, and JSON
      // text must be UTF-8.
      std::string shown = origin.substr(0, 200);
      for (char& c : shown) {
        if (c < 0x20 || c > 0x7e) c = '?';
      }
      send_error(res, {403, "invalid_request_error", "origin_not_allowed",
                       "a page of '" + shown + "' may not call this server (allow it with --cors-origin)", 0});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (!key_in_authorization(req.get_header_value("Authorization"), options_.api_key)) {
      // A browser asks for the key as a login's password (any user name).
      res.set_header("WWW-Authenticate", "Basic realm=\"reclaim\", charset=\"UTF-8\"");
      send_error(res, {401, "invalid_request_error", "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)", 0});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    // Only errors without a body of ours: unknown paths, and bodies over the limit.
    if (!res.body.empty()) return;
    if (res.status == 413) {
      send_error(res, {413, "invalid_request_error", "request_too_large", "the request body is larger than the server accepts", 0});
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

  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    res.set_content(models_json(registry_).dump(), "application/json");
  });
  // OpenAI's models.retrieve. The id may hold '/' (a hub id), so the rest of
  // the path is the id; an unknown one is OpenAI's 404.
  s.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    guarded(res, [&] { res.set_content(model_json(registry_.status(req.matches[1])).dump(), "application/json"); });
  });
  s.Get("/v1/resources", [this](const httplib::Request&, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    Baseline baseline;
    {
      std::lock_guard lock(baseline_mu_);
      baseline = baseline_;
    }
    res.set_content(resources_json(registry_, baseline, connections_->fds()).dump(), "application/json");
  });
  // The dashboard's chart: ?since=T (seconds since the epoch) for what came after T.
  s.Get("/v1/resources/history", [this](const httplib::Request& req, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
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
  });
  s.Post("/v1/models/load", [this](const httplib::Request& req, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    guarded(res, [&] {
      const ControlRequest c = parse_control_request(req.body, false);
      (void)settings_of(c.model);  // a file added to --models-dir since
      Wait wait;
      wait.still_wanted = [] { return !Connections::client_gone(); };
      registry_.load(c.model, c.pin, wait);
      res.set_content(model_json(registry_.status(c.model)).dump(), "application/json");
    });
  });
  // Pins or unpins without loading (the dashboard's button).
  s.Post("/v1/models/pin", [this](const httplib::Request& req, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    guarded(res, [&] {
      const ControlRequest c = parse_pin_request(req.body);
      (void)settings_of(c.model);  // a file added to --models-dir since
      registry_.set_pinned(c.model, c.pin);
      res.set_content(model_json(registry_.status(c.model)).dump(), "application/json");
    });
  });
  s.Post("/v1/models/unload", [this](const httplib::Request& req, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    guarded(res, [&] {
      const ControlRequest c = parse_control_request(req.body, true);
      const Millis timeout = c.timeout_ms ? Millis(*c.timeout_ms) : unload_timeout_;
      registry_.unload(c.model, c.cancel ? UnloadMode::cancel : UnloadMode::drain, timeout);
      res.set_content(model_json(registry_.status(c.model)).dump(), "application/json");
    });
  });
  auto completion = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      Connections::answering();  // the request is whole: the read timeout no longer runs
      in_run(res, send_error, [&](std::shared_ptr<RequestRun> run) {
        const std::string& body = req.body;
        complete(res, {[&body, chat](const json& defaults) { return parse_completion_request(body, chat, defaults); },
                       openai_answer},
                 std::move(run));
      });
    };
  };
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    Usage baseline;
    {
      std::lock_guard lock(baseline_mu_);
      baseline = baseline_.usage;
    }
    res.set_content(metrics_text(registry_, baseline, stats_, http_stats()), "text/plain; version=0.0.4");
  });
  s.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    Connections::answering();  // the request is whole: the read timeout no longer runs
    in_run(res, send_error, [&](std::shared_ptr<RequestRun> run) { embeddings(*run, req, res); });
  });
  s.Post("/v1/completions", completion(false));
  s.Post("/v1/chat/completions", completion(true));
  ollama_routes();
  dashboard_routes();
}

}  // namespace reclaim::server
