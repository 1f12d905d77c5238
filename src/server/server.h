// `reclaim serve`'s HTTP side: OpenAI-compatible endpoints over the model
// Registry, with the ledger and the process figures on /v1/resources.
//
// Each request is a RequestRun (runtime/request_run.h): it holds a Lease on
// its model for as long as it runs (for a stream, until the last chunk is
// written or the client is gone) and decodes in a sequence of its model's
// batch (engine/batcher.h), whose scope releases what it took when it ends.
//
// Threads: every connection gets one at once, up to max_connections
// (server/worker_pool.h), so /health and the other control paths never wait
// behind completions; completions are bounded by the registry (429 past
// --parallel + --max-queue). A connection must deliver each request within
// read_timeout (server/connections.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/usage.h"
#include "engine/embed.h"
#include "engine/generate.h"
#include "server/answer.h"
#include "server/connections.h"
#include "server/cors.h"
#include "server/history.h"
#include "server/ollama.h"
#include "server/resources.h"
#include "server/router_events.h"
#include "server/stream_sessions.h"
#include "server/metrics.h"
#include "server/worker_pool.h"
#include "runtime/registry.h"
#include "runtime/request_run.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace reclaim::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port
  std::vector<std::string> api_keys;   // any of them is accepted; none: no auth
  // Both or neither: HTTPS with this certificate (PEM, its chain after it)
  // and its private key, as llama-server's --ssl-cert-file/--ssl-key-file.
  std::string tls_cert_file, tls_key_file;
  std::vector<std::string> cors_origins = {"localhost"};  // server/cors.h
  // Bytes; larger bodies get 413. Images come in the body, in base64.
  size_t max_body = 32u << 20;
  std::string chat_template;           // overrides the models' own
  bool jinja = true;                   // a model's `jinja` setting where it has none
  // The model an OpenAI request that names none gets (empty: the server's
  // only model, where it has one; with several, the request must name it).
  std::string default_model;
  // Started without naming its models (-m or --config): they come from a
  // directory or the stores, as llama-server's router's do, and /props
  // without a model answers as that router, however many there are.
  bool router = false;
  // Asked on a request for a name the server does not have: looks for more
  // models (--models-dir again); true if it found some.
  std::function<bool()> rediscover;
  // Where Ollama's POST /api/pull puts models (reclaim pull's store; empty:
  // no pulls), and what makes the server's models include what it pulled
  // or deleted there.
  std::string pulled_store;
  std::function<void()> pulled;
  // A pull's "insecure": plain HTTP to the registry a client names. Off
  // unless the operator allows it: a client would otherwise make the server
  // fetch from any host of its network unchecked.
  bool allow_insecure_pull = false;
  // Google Cloud's Vertex AI (AIP_MODE=PREDICTION): its predict route
  // (AIP_PREDICT_ROUTE, /predict by default; empty: none) and a second path
  // for /health (AIP_HEALTH_ROUTE; empty: none).
  std::string vertex_predict_route, vertex_health_route;
  int http_threads = 4;                // threads that stay; more start as connections come
  int max_connections = 512;           // connections served at once; more wait for a thread
  Millis read_timeout = std::chrono::seconds(10);  // to deliver a whole request (slowloris)
  Millis unload_timeout = std::chrono::seconds(30);  // drain's wait, by default
  // A stream that waits for its model sends an SSE comment this often, so
  // that proxies and clients do not take it for dead.
  Millis stream_keepalive = std::chrono::seconds(5);
  // How long a stream waits for its model before its headers (so that a
  // refusal is a status); then it starts, with a comment every keepalive.
  Millis stream_hold = std::chrono::seconds(30);
  // How long a request's grammar may take to weigh the vocabulary for one
  // token (a 400 grammar_too_costly beyond; docs/safety.md).
  Millis grammar_token_time = std::chrono::seconds(5);
  // The dashboard's chart (server/history.h): a sample this often, this many
  // kept (10 minutes). 0: none.
  Millis history_every = std::chrono::seconds(1);
  size_t history_samples = 600;
};

class Server {
 public:
  Server(ServerOptions options, Registry& registry);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and returns the port (useful with port 0). Throws Error.
  int bind();
  // Serves until stop(); call after bind().
  void run();
  bool running() const;
  // The process figures that /v1/resources reports residues against: taken
  // once the server is listening, so that its own threads and socket count
  // as the baseline.
  void set_baseline(Usage baseline);
  // Stops accepting, waits for the handlers in flight to return. Requests in
  // flight end when their models are unloaded (Registry::unload_all).
  void stop();

 private:
  // The endpoints, each added with the same middleware (server/routes.cpp).
  using ErrorShape = void (*)(httplib::Response&, const ApiError&);
  using Handler = void (Server::*)(const httplib::Request&, httplib::Response&);
  struct Route {
    const char* method;  // "GET" or "POST"
    const char* path;    // httplib's pattern
    ErrorShape errors;   // the API's error shape
    Handler handle;
  };
  static const std::vector<Route>& route_table();
  // The error shape of the API a path belongs to (OpenAI's for a path no
  // route has): for what is refused before routing (a key, an origin, a
  // body over the limit).
  static ErrorShape errors_of(const std::string& path);
  void routes();
  void add_route(const Route& route);
  void shutdown_pool();

  // Control and figures (server/control.cpp).
  void health(const httplib::Request& req, httplib::Response& res);
  void list_models(const httplib::Request& req, httplib::Response& res);
  void show_model(const httplib::Request& req, httplib::Response& res);
  void resources(const httplib::Request& req, httplib::Response& res);
  void resources_history(const httplib::Request& req, httplib::Response& res);
  void load_model(const httplib::Request& req, httplib::Response& res);
  void pin_model(const httplib::Request& req, httplib::Response& res);
  void unload_model(const httplib::Request& req, httplib::Response& res);
  void metrics(const httplib::Request& req, httplib::Response& res);
  // OpenAI's requests (server/completion_calls.cpp, server/embeddings.cpp).
  void completions(const httplib::Request& req, httplib::Response& res);
  // llama-server's /completion: its field names read into OpenAI's request.
  void native_completion(const httplib::Request& req, httplib::Response& res);
  void infill(const httplib::Request& req, httplib::Response& res);
  void chat_completions(const httplib::Request& req, httplib::Response& res);
  void openai_completion(const httplib::Request& req, httplib::Response& res, bool chat);  // either of the two
  void embeddings(const httplib::Request& req, httplib::Response& res);
  // A chat rendered, nothing decoded (server/prompt_routes.cpp).
  void apply_template(const httplib::Request& req, httplib::Response& res);
  void chat_input_tokens(const httplib::Request& req, httplib::Response& res);
  void responses_input_tokens(const httplib::Request& req, httplib::Response& res);
  // OpenAI's Responses API (server/responses_routes.cpp).
  void responses(const httplib::Request& req, httplib::Response& res);
  // Anthropic's Messages API (server/anthropic_routes.cpp).
  void anthropic_messages(const httplib::Request& req, httplib::Response& res);
  void anthropic_count_tokens(const httplib::Request& req, httplib::Response& res);
  // A chat request's prompt as its model's template renders it, and its
  // tokens, with the model held by `run`; nothing decoded.
  std::vector<llama_token> render_only(std::shared_ptr<RequestRun> run, const nlohmann::json& body, std::string& prompt);
  // llama-server's /props and /slots (server/props.cpp); the model is the
  // query's ?model=, or the one a request naming none would get.
  std::string model_of_query(const httplib::Request& req) const;
  void props(const httplib::Request& req, httplib::Response& res);
  void slots(const httplib::Request& req, httplib::Response& res);
  void slot_action(const httplib::Request& req, httplib::Response& res);
  // llama-server's /tokenize and /detokenize (server/tokenize.cpp).
  void tokenize_text(const httplib::Request& req, httplib::Response& res);
  void detokenize_tokens(const httplib::Request& req, httplib::Response& res);
  // Reranking (server/rerank.cpp).
  void rerank_documents(const httplib::Request& req, httplib::Response& res);
  // Vertex AI's predict route (server/vertex.cpp): each instance to the
  // POST endpoint its @requestFormat names.
  void vertex_predict(const httplib::Request& req, httplib::Response& res);
  static const Route* predict_route(const std::string& format);
  nlohmann::json predict_one(const httplib::Request& req, const nlohmann::json& instance);
  // Ollama's (server/ollama_routes.cpp).
  void ollama_version(const httplib::Request& req, httplib::Response& res);
  void ollama_tags(const httplib::Request& req, httplib::Response& res);
  void ollama_ps(const httplib::Request& req, httplib::Response& res);
  void ollama_show(const httplib::Request& req, httplib::Response& res);
  void ollama_chat(const httplib::Request& req, httplib::Response& res);
  void ollama_generate(const httplib::Request& req, httplib::Response& res);
  void ollama_embed(const httplib::Request& req, httplib::Response& res);
  void ollama_embeddings(const httplib::Request& req, httplib::Response& res);
  // Ollama's /api/pull and /api/delete (server/ollama_pull.cpp).
  void ollama_pull(const httplib::Request& req, httplib::Response& res);
  void ollama_delete(const httplib::Request& req, httplib::Response& res);
  // Removes a model reclaim pulled (`name` as the pull read it, served as
  // `served`) once its requests finish, and serves what is left.
  void remove_pulled(const std::string& name, const std::string& served, bool hf_short_names);
  // llama-server's router's model endpoints (server/router_routes.cpp):
  // POST /models/load and /models/unload, which start the change and
  // answer at once; POST /models, a pull in the background; GET
  // /models/sse, the models' states and the pulls as they change; DELETE
  // /models?model=.
  void router_load(const httplib::Request& req, httplib::Response& res);
  void router_unload(const httplib::Request& req, httplib::Response& res);
  void router_download(const httplib::Request& req, httplib::Response& res);
  void router_events(const httplib::Request& req, httplib::Response& res);
  void router_delete(const httplib::Request& req, httplib::Response& res);
  // Resumable streams (server/stream_sessions.h, server/completion.cpp):
  // GET /v1/stream?conv_id=&from=, DELETE /v1/stream?conv_id=, POST
  // /v1/streams/lookup.
  void stream_resume(const httplib::Request& req, httplib::Response& res);
  void stream_stop(const httplib::Request& req, httplib::Response& res);
  void stream_lookup(const httplib::Request& req, httplib::Response& res);
  // A streamed request's session where it names its conversation
  // (X-Conversation-Id), its run from then on wanted while the session is;
  // null where it names none.
  std::shared_ptr<StreamSession> open_stream(const httplib::Request& req, RequestRun& run);
  // A router pull's work, on a pool thread.
  void download_in_background(const std::string& name, bool insecure);
  // GET / and the dashboard's files (server/dashboard.cpp).
  void dashboard_index(const httplib::Request& req, httplib::Response& res);
  void dashboard_file(const httplib::Request& req, httplib::Response& res);

  // A completion as one API reads it: `parse` reads the body, with the
  // model's default fields under what it leaves out; `answer` writes the
  // reply in the API's shapes (server/answer.h).
  struct CompletionCall {
    // The model the body names, read before it is parsed: its settings give
    // the defaults the one parse takes. Empty: none named, or not a string.
    std::string model;
    std::function<CompletionRequest(const nlohmann::json& defaults)> parse;
    std::function<std::unique_ptr<Answer>(const CompletionRequest&)> answer;
  };
  // A request's run (runtime/request_run.h), its client this connection's.
  std::shared_ptr<RequestRun> start_run();
  // What a request's handler does in a run of its own: `fn(run)`. A client
  // that left is counted and answered to nobody; an error is counted and
  // thrown on to the route's middleware, which answers it in the API's
  // shape. The run ends with the handler, or with its stream.
  void in_run(const std::function<void(std::shared_ptr<RequestRun>)>& fn);
  // A stream ends later and holds `run` until then (server/completion.cpp).
  // Throws what fails before the reply begins.
  // `req`'s X-Conversation-Id makes a stream resumable (server/stream_sessions.h).
  void complete(const httplib::Request& req, httplib::Response& res, const CompletionCall& call, std::shared_ptr<RequestRun> run);
  // llama-server's /completion and /infill (`infill` set): n_predict, n_probs
  // and return_tokens read from `body`, which must outlive the call.
  static CompletionCall native_call(nlohmann::json& body, std::optional<InfillInput> infill);
  // The answer to POST /v1/embeddings (server/embeddings.cpp).
  void answer_embeddings(RequestRun& run, const httplib::Request& req, httplib::Response& res);
  // The vectors of `input` (checked by check_embed_input) by `model`, on the
  // registry as a completion is; `truncate`: inputs longer than the model's
  // context are cut to it, not refused.
  EmbedResult embed_input(RequestRun& run, const std::string& model, const nlohmann::json& input,
                          std::optional<int64_t> keep_alive_ms, bool truncate);
  void ollama_completion(const httplib::Request& req, httplib::Response& res, OllamaEndpoint endpoint);
  void ollama_embedding(const httplib::Request& req, httplib::Response& res, bool legacy);
  // Ollama's /api/chat and /api/generate without messages or prompt: load
  // the model, or with keep_alive 0 unload it.
  void ollama_load(RequestRun& run, httplib::Response& res, const std::string& model, std::optional<int64_t> keep_alive_ms,
                   bool chat);
  // The model's own settings; an unknown name looks for new models first.
  ModelSettings settings_of(const std::string& model);
  // The same, or none for a name that is not a model's (the lease then
  // refuses it, after the body's own mistakes are answered).
  ModelSettings settings_if_known(const std::string& model);
  // An OpenAI body's JSON, with the default model where it names none.
  nlohmann::json openai_body(const httplib::Request& req) const;
  nlohmann::json with_default_model(nlohmann::json body) const;
  Baseline baseline();
  HttpStats http_stats() const;
  ServerOptions options_;
  CorsPolicy cors_;
  Millis unload_timeout_;
  Registry& registry_;
  RequestCounts stats_;
  std::mutex baseline_mu_;
  Baseline baseline_;
  Scope scope_{"http"};  // its threads' (before the members that own them)
  std::unique_ptr<Connections> connections_;
  std::unique_ptr<WorkerPool> pool_;
  std::atomic<bool> pool_shut_{false};
  std::unique_ptr<ResourceHistory> history_;
  std::unique_ptr<StreamSessions> sessions_;
  std::unique_ptr<httplib::Server> http_;
  std::mutex pull_mu_;  // one pull or delete at a time
  EventRing downloads_;  // the router's pulls' events (server/router_routes.cpp)
  std::atomic<int> downloads_pending_{0};  // router pulls running or waiting for pull_mu_
  std::atomic<bool> stopping_{false};  // stop() was called: a pull in progress ends
};

// A request's keep_alive in milliseconds, as the registry takes it.
inline std::optional<Millis> requested_keep_alive(std::optional<int64_t> ms) {
  if (!ms) return std::nullopt;
  return Millis(*ms);
}

// Constant-time comparison, for API keys.
bool same_secret(const std::string& a, const std::string& b);
// Whether an Authorization header carries `key`: "Bearer KEY", or a
// browser's "Basic" login whose password is KEY (any user name).
bool key_in_authorization(const std::string& auth, const std::string& key);
// Whether a request's Authorization or X-Api-Key header carries one of
// `keys`. Every key is compared, whichever matched, so the time does not
// tell which.
bool any_key_given(const std::string& authorization, const std::string& x_api_key, const std::vector<std::string>& keys);

}  // namespace reclaim::server
