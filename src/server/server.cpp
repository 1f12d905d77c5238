#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "engine/batcher.h"
#include "engine/chat.h"
#include "engine/generate.h"
#include "engine/generation.h"
#include "server/openai.h"
#include "server/metrics.h"
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

namespace {

std::atomic<uint64_t> g_next_id{1};

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  res.set_content(error_json(e).dump(), "application/json");
}

// Maps what the registry and the engine throw to OpenAI's error statuses.
ApiError to_api_error(const std::exception& ex) {
  if (auto* a = dynamic_cast<const ApiException*>(&ex)) return a->error();
  const std::string m = ex.what();
  if (dynamic_cast<const BadModelName*>(&ex)) return {400, "invalid_request_error", "invalid_model", m, 0};
  if (dynamic_cast<const UnknownModel*>(&ex)) return {404, "invalid_request_error", "model_not_found", m, 0};
  if (dynamic_cast<const NoRoom*>(&ex)) return {503, "server_error", "insufficient_memory", m, 10};
  if (dynamic_cast<const NotLoaded*>(&ex)) return {503, "server_error", "model_not_loaded", m, 5};
  if (dynamic_cast<const QueueFull*>(&ex)) return {429, "rate_limit_error", "queue_full", m, 1};
  if (dynamic_cast<const ContextOverflow*>(&ex)) return {400, "invalid_request_error", "context_length_exceeded", m, 0};
  if (dynamic_cast<const LoadAborted*>(&ex)) return {503, "server_error", "load_aborted", m, 5};
  if (dynamic_cast<const InvalidModelFile*>(&ex)) return {422, "invalid_request_error", "invalid_model_file", m, 0};
  if (dynamic_cast<const NoTokenizer*>(&ex)) return {400, "invalid_request_error", "model_has_no_tokenizer", m, 0};
  if (dynamic_cast<const BadPrompt*>(&ex)) return {400, "invalid_request_error", "invalid_prompt", m, 0};
  return {500, "server_error", "", m, 0};
}

template <class F>
void guarded(httplib::Response& res, F&& f) {
  try {
    f();
  } catch (const std::exception& ex) {
    send_error(res, to_api_error(ex));
  }
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

// What a request needs while it runs; shared with the stream's provider so
// that the lease lives until the last chunk is written.
struct Running {
  CompletionRequest req;
  Lease lease;
  SessionOptions session;
  std::string id;
  int64_t created = 0;
};

// Tokenizes the prompt once (generate then takes the tokens) and checks it
// against the vocabulary and the context, as the engine would, before
// anything is sent, so that a stream never starts for a request that cannot
// run (BadPrompt and ContextOverflow are 400s).
void prepare_prompt(Running& run) {
  GenerateRequest& g = run.req.generate;
  const int32_t n_ctx = run.session.n_ctx > 0 ? run.session.n_ctx : run.lease.model().info().n_ctx_train;
  g.prompt_tokens = prompt_tokens(run.lease.model().vocab(), g, n_ctx);
}

// On the model's batch when it batches, else on a session of its own.
GenerateResult run_generation(Running& run, const GenerateHooks& hooks, const CancelToken& cancel) {
  Model& model = run.lease.model();
  if (Batcher* batcher = model.batcher()) return batcher->generate(run.req.generate, hooks, &cancel);
  Session session(model, run.session, &cancel);
  return generate(session, run.req.generate, hooks);
}

}  // namespace

Server::Server(ServerOptions options, Registry& registry)
    : options_(std::move(options)), unload_timeout_(options_.unload_timeout), registry_(registry),
      http_(std::make_unique<httplib::Server>()) {
  // The workers start here, not when listening starts, so that they are in
  // the baseline that residues are counted from. httplib deletes the queue
  // it is given when it stops; it gets a forwarder to this pool.
  pool_ = std::make_unique<httplib::ThreadPool>(static_cast<size_t>(options_.http_threads));
  struct Forward : httplib::TaskQueue {
    explicit Forward(Server& s) : server(s) {}
    void enqueue(std::function<void()> fn) override { server.pool_->enqueue(std::move(fn)); }
    void shutdown() override { server.shutdown_pool(); }
    Server& server;
  };
  http_->new_task_queue = [this] { return new Forward(*this); };
  http_->set_payload_max_length(options_.max_body);
  routes();
}

Server::~Server() {
  http_.reset();
  shutdown_pool();  // when it never listened
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
  std::lock_guard lock(baseline_mu_);
  baseline_ = std::move(baseline);
}

void Server::stop() { http_->stop(); }

void Server::routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) != 0 || !same_secret(auth.substr(prefix.size()), options_.api_key)) {
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
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_json(registry_).dump(), "application/json");
  });
  s.Get("/v1/resources", [this](const httplib::Request&, httplib::Response& res) {
    Usage baseline;
    {
      std::lock_guard lock(baseline_mu_);
      baseline = baseline_;
    }
    res.set_content(resources_json(registry_, baseline).dump(), "application/json");
  });
  s.Post("/v1/models/load", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      json j = parse_object(req.body);
      if (!j.contains("model") || !j["model"].is_string()) bad_request("'model' must be a string");
      const bool pin = j.value("pin", false);
      registry_.load(j["model"].get<std::string>(), pin);
      res.set_content(model_json(registry_.status(j["model"].get<std::string>())).dump(), "application/json");
    });
  });
  s.Post("/v1/models/unload", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      json j = parse_object(req.body);
      if (!j.contains("model") || !j["model"].is_string()) bad_request("'model' must be a string");
      const std::string mode = j.value("mode", "drain");
      if (mode != "drain" && mode != "cancel") bad_request("'mode' must be \"drain\" or \"cancel\"");
      Millis timeout = unload_timeout_;
      if (j.contains("timeout")) timeout = Millis(parse_duration_ms(j["timeout"], "timeout"));
      registry_.unload(j["model"].get<std::string>(), mode == "cancel" ? UnloadMode::cancel : UnloadMode::drain, timeout);
      res.set_content(model_json(registry_.status(j["model"].get<std::string>())).dump(), "application/json");
    });
  });
  auto completion = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      ++stats_.in_flight;
      bool streaming = false;
      try {
        streaming = complete(req, res, chat);
      } catch (const std::exception& ex) {
        ++stats_.error;
        send_error(res, to_api_error(ex));
      }
      // A stream is counted out when its response is released.
      if (!streaming) --stats_.in_flight;
    };
  };
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Usage baseline;
    {
      std::lock_guard lock(baseline_mu_);
      baseline = baseline_;
    }
    res.set_content(metrics_text(registry_, baseline, stats_), "text/plain; version=0.0.4");
  });
  s.Post("/v1/completions", completion(false));
  s.Post("/v1/chat/completions", completion(true));
}

bool Server::complete(const httplib::Request& http_req, httplib::Response& res, bool chat) {
  auto run = std::make_shared<Running>();
  run->req = parse_completion_request(http_req.body, chat);
  const Millis keep_alive = run->req.keep_alive_ms ? Millis(*run->req.keep_alive_ms) : Millis(-2);
  run->lease = registry_.acquire(run->req.model, keep_alive);
  run->session = registry_.options().session;
  run->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(g_next_id.fetch_add(1));
  run->created = unix_now();
  GenerateRequest& g = run->req.generate;
  // Its replies would be empty, and llama.cpp asserts on any text it is given.
  if (!has_tokenizer(run->lease.model().vocab())) {
    throw NoTokenizer("model '" + run->req.model + "' has no tokenizer (llama.cpp's no_vocab): it reads and writes token ids "
                      "only, and this endpoint answers in text");
  }
  if (chat) {
    try {
      g.prompt = apply_chat_template(run->lease.model(), run->req.messages, options_.chat_template);
    } catch (const Error& e) {
      bad_request(e.what(), "no_chat_template");
    }
  } else {
    g.prompt = run->req.prompt;
  }
  try {
    validate(g.sampling);
  } catch (const Error& e) {
    bad_request(e.what());
  }
  prepare_prompt(*run);

  if (!run->req.stream) {
    CancelToken cancel;
    cancel.link(&run->lease.cancel_token());
    const GenerateResult r = run_generation(*run, {}, cancel);
    stats_.prompt_tokens += static_cast<uint64_t>(r.timings.prompt_tokens);
    stats_.completion_tokens += static_cast<uint64_t>(r.timings.generated_tokens);
    if (r.finish == FinishReason::cancelled) {
      ++stats_.cancelled;
      send_error(res, {503, "server_error", "cancelled", "the request was cancelled: its model is being unloaded", 5});
      return false;
    }
    ++stats_.ok;
    res.set_content(completion_json(run->req, r, run->id, run->created).dump(), "application/json");
    return false;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [run, stats = &stats_](size_t, httplib::DataSink& sink) {
        CancelToken cancel;
        cancel.link(&run->lease.cancel_token());
        bool first = true;
        auto write = [&](const std::string& data) {
          if (cancel.cancelled()) return;
          // A failed write means the client is gone: the request stops
          // before its next decode step.
          if (!sink.write(data.data(), data.size())) cancel.cancel(CancelReason::client_gone);
        };
        GenerateHooks hooks;
        hooks.on_text = [&](std::string_view text) {
          write(sse(chunk_json(run->req, std::string(text), nullptr, run->id, run->created, first)));
          first = false;
        };
        GenerateResult r;
        try {
          r = run_generation(*run, hooks, cancel);
        } catch (const std::exception& ex) {
          ++stats->error;
          write(sse(error_json(to_api_error(ex))));
          sink.done();
          return true;
        }
        stats->prompt_tokens += static_cast<uint64_t>(r.timings.prompt_tokens);
        stats->completion_tokens += static_cast<uint64_t>(r.timings.generated_tokens);
        if (r.finish == FinishReason::cancelled && r.cancel_reason == CancelReason::client_gone) {
          ++stats->client_gone;
          return false;
        }
        ++(r.finish == FinishReason::cancelled ? stats->cancelled : stats->ok);
        write(sse(chunk_json(run->req, "", openai_finish_reason(r.finish), run->id, run->created, first)));
        if (run->req.include_usage) {
          json u = chunk_json(run->req, "", nullptr, run->id, run->created, false);
          u["choices"] = json::array();
          u["usage"] = usage_json(r);
          write(sse(u));
        }
        write("data: [DONE]\n\n");
        sink.done();
        return true;
      },
      // The lease goes with the response, whether or not the stream ran.
      [run, stats = &stats_](bool) mutable {
        run->lease.release();
        --stats->in_flight;
      });
  return true;
}

}  // namespace reclaim::server
