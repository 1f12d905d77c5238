// `reclaim serve`: the registry and the HTTP server, and an orderly end on
// SIGTERM/SIGINT: stop accepting, let requests finish up to
// --shutdown-timeout, cancel the rest, unload every model, print the final
// ledger (it must be empty) and exit 0.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <chrono>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/model_sources.h"
#include "core/dir_watch.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "core/scoped_thread.h"
#include "core/size.h"
#include "engine/chat.h"
#include "engine/devices.h"
#include "engine/embed.h"
#include "engine/llama_runtime.h"
#include "engine/test_model.h"
#include "runtime/registry.h"
#include "runtime/stores/pull.h"
#include "server/openai.h"
#include "server/server.h"

namespace reclaim::cli {

namespace {

// A budget for a place that is not here would never count anything: said at
// start-up, with the places there are.
void check_budget_places(const MemoryBudget& budget) {
  const std::vector<std::string> here = places_here();
  for (const auto& [place, bytes] : budget.at) {
    if (std::find(here.begin(), here.end(), place) != here.end()) continue;
    std::string list;
    for (const std::string& h : here) list += (list.empty() ? "" : ", ") + h;
    throw Error("--memory-budget names '" + place + "', which is not here (places: " + list + ")");
  }
}

struct Args {
  std::vector<std::string> models, pins, preload, cors_origins, models_from;
  std::string ollama_models, hf_cache, lmstudio_models;
  std::string config;
  std::vector<std::string> api_keys;
  std::string models_dir, host = "127.0.0.1", api_key_file, ssl_cert_file, ssl_key_file, memory_budget = "0", keep_alive = "5m",
              device_idle = "1m";
  std::string cache_ram = "2GiB";
  std::string pooling;
  std::string spec_type = "none";
  std::string draft;
  std::string mmproj;
  Speculation speculation;
  std::string unload_timeout = "30s", shutdown_timeout = "30s", chat_template, load_mode = "mmap", vet_timeout = "10m";
  std::string default_model;
  std::string queue_timeout = "5m", read_timeout = "10s", stream_keepalive = "5s", stream_hold = "30s", min_serve = "0",
              grammar_token_time = "5s";
  int port = 8080, max_loaded = 0, ctx = 4096, threads = 0, gpu_layers = -1, parallel = 1, batch = 512, max_queue = 32;
  int max_connections = 512;
  bool no_autoload = false, no_jinja = false, verbose = false, trust_models = false, allow_insecure_pull = false;
};

Millis duration(const std::string& text, const std::string& flag) {
  try {
    return Millis(server::parse_duration_ms(nlohmann::json(text), flag));
  } catch (const server::ApiException& e) {
    throw Error(std::string("--") + e.what());
  }
}

// SIGHUP: the config file and the folder again. A mistake keeps the
// settings before, and says so in one line. A model with `preload` that is
// not loaded (new, or preload newly set) is loaded, as at start-up; one that
// waits to reload with new settings is loaded again by the requests that
// wait for it, or by the next one.
void reload(ModelSources& sources, Registry& registry) {
  try {
    const Registry::Reconfigured r = sources.reload(registry);
    std::fprintf(stderr, "reclaim: SIGHUP: reloaded: %d models added, %d changed, %d removed\n", r.added, r.changed,
                 r.removed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reclaim: SIGHUP: kept the settings before: %s\n", e.what());
    return;
  }
  for (const ModelSpec& m : sources.all()) {
    if (!m.settings.preload) continue;
    try {
      if (registry.status(m.name).state != ModelState::unloaded) continue;
      registry.load(m.name);
      std::fprintf(stderr, "reclaim: SIGHUP: preloaded '%s'\n", m.name.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "reclaim: SIGHUP: preload '%s': %s\n", m.name.c_str(), e.what());
    }
  }
}

// Serves until SIGTERM or SIGINT, then stops: the registry, the HTTP
// server and their threads are gone when this returns.
void serve_until_stopped(RegistryOptions opts, ModelSources& sources, server::ServerOptions so,
                         const std::vector<std::string>& preload, const sigset_t& signals, const std::string& models_dir,
                         Millis shutdown_timeout) {
  Registry registry(std::move(opts), sources.all());
  if (!so.default_model.empty()) {
    try {
      (void)registry.settings(so.default_model);
    } catch (const std::exception& e) {
      throw Error("--default-model " + so.default_model + ": " + e.what());
    }
  }
  // Only a folder or a store can hold models the server has not seen yet.
  // (A server of one model and neither answers any name with it.)
  if (sources.can_grow()) so.rediscover = [&sources, &registry] { return sources.rescan(registry); };
  so.pulled_store = pulled_store_root();
  // A pull reads the pulled store from then on, where it was not read.
  so.pulled = [&sources, &registry, root = so.pulled_store] {
    sources.include({StoreKind::pulled, root});
    (void)sources.rescan(registry);
  };
  server::Server http(so, registry);
  const int port = http.bind();
  // The accept loop's thread, on the ledger. Whatever fails from here on,
  // the scope's close stops the HTTP side and joins it, after what was
  // armed later (the signals and the folder's watch).
  ScopedThread accept_loop;  // before the scope, which stops it, and so destroyed after it
  Scope serving("serve");
  accept_loop.start(serving, "accept loop", [&] { http.run(); }, [&] { http.stop(); });
  // Signals, and the folder's files as they come and go; before the baseline.
  SignalsAndFolder events(serving, signals, models_dir);
  // The HTTP side starts its worker threads when it starts listening.
  while (!http.running()) std::this_thread::yield();
  // The chat library's log (a queue of 512 lines of 256 bytes, kept till
  // the exit) is made now, before the baseline, rather than by the first chat.
  quiet_common_log();
  // The server's own threads took stacks from the cache that start-up
  // filled; fill it again so that a model's workers find stacks there.
  warm_thread_stack_cache();
  release_free_heap();
  http.set_baseline(Usage::capture());
  // After the baseline, which a vetting child's pipes would be in. The first
  // request for a model then finds its file's verdict ready.
  registry.vet_in_background();
  for (const std::string& name : preload) {
    try {
      registry.load(name);
    } catch (const std::exception& e) {
      throw Error("--preload " + name + ": " + e.what());
    }
  }
  std::printf("reclaim: listening on %s://%s:%d (%zu models)\n", so.tls_cert_file.empty() ? "http" : "https", so.host.c_str(), port,
              registry.list().size());
  std::fflush(stdout);

  int sig = 0;
  for (;;) {
    sig = events.wait();
    if (sig == 0) {
      (void)sources.rescan(registry);  // a file came or went: says so in one line
    } else if (sig == SIGHUP) {
      reload(sources, registry);
    } else {
      break;
    }
  }
  std::fprintf(stderr, "reclaim: %s: stopping; requests in flight have %lld ms to finish\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
               static_cast<long long>(shutdown_timeout.count()));
  // Requests end as their models unload (drained up to the timeout, then
  // cancelled); the HTTP side returns once their handlers have.
  registry.stop_admitting();
  std::thread stopper([&] { http.stop(); });
  registry.unload_all(UnloadMode::drain, shutdown_timeout);
  stopper.join();
  serving.close();
}

// The stores --models-from names (a root flag names its store too), each
// at its own root or its tool's default place; with no model named any
// way, every store at its default place, so that a first `reclaim serve`
// serves the models the machine has.
SourceArgs source_args(const Args& a) {
  SourceArgs s;
  s.models = a.models;
  s.draft = a.draft;
  s.mmproj = a.mmproj;
  s.models_dir = a.models_dir;
  s.config = a.config;
  s.pins = a.pins;
  std::vector<std::string> names;
  for (const std::string& list : a.models_from) {
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      const std::string name = list.substr(at, comma - at);
      if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
      at = comma + 1;
    }
  }
  const std::pair<const char*, const std::string*> roots[] = {
      {"ollama", &a.ollama_models}, {"hf", &a.hf_cache}, {"lmstudio", &a.lmstudio_models}};
  for (const auto& [name, root] : roots) {
    if (!root->empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  const bool named_any = !a.models.empty() || !a.models_dir.empty() || !a.config.empty() || !names.empty();
  if (!named_any) names = {"pulled", "ollama", "hf", "lmstudio"};
  for (const std::string& name : names) {
    Store st{store_kind(name), ""};
    for (const auto& [n, root] : roots) {
      if (name == n) st.root = *root;
    }
    if (st.root.empty()) st.root = default_store_root(st.kind);
    s.stores.push_back(st);
  }
  return s;
}

RegistryOptions registry_options(const Args& a) {
  RegistryOptions opts;
  {
    const MemoryBudget budget = parse_memory_budget(a.memory_budget);
    check_budget_places(budget);
    opts.memory_budget = budget.total;
    opts.memory_budget_at = budget.at;
  }
  try {
    opts.cache_ram = parse_size(a.cache_ram);
  } catch (const std::exception& e) {
    throw Error("--cache-ram: " + std::string(e.what()));
  }
  opts.max_loaded = a.max_loaded;
  opts.keep_alive = duration(a.keep_alive, "keep-alive");
  opts.device_idle = a.device_idle == "never" ? Millis(-1) : duration(a.device_idle, "device-idle");
  opts.autoload = !a.no_autoload;
  opts.load_mode = load_mode_from_name(a.load_mode);
  opts.n_threads = a.threads;
  opts.n_gpu_layers = a.gpu_layers;
  opts.pooling = a.pooling;
  opts.speculation = a.speculation;
  speculation_from_name(a.spec_type, opts.speculation.kind);  // checked by its option
  if (!a.draft.empty() && a.models.empty()) {
    throw Error("--draft is the draft model of the -m models, and none is named (a --config model has its own 'draft')");
  }
  if (!a.mmproj.empty() && a.models.empty()) {
    throw Error("--mmproj is the image projector of the -m models, and none is named (a --config model has its own "
                "'mmproj'; in --models-dir one lies beside its model)");
  }
  if (opts.speculation.kind == Speculation::Kind::draft && a.draft.empty()) {
    throw Error("--spec-type draft-simple needs --draft FILE (a draft model for the -m models)");
  }
  // The draft is the -m models' own setting (model_sources.h); others guess
  // only where their own settings say.
  if (opts.speculation.kind == Speculation::Kind::draft) opts.speculation.kind = Speculation::Kind::none;
  if (opts.speculation.draft_min > opts.speculation.draft_max) {
    throw Error("--draft-min (" + std::to_string(opts.speculation.draft_min) + ") is above --draft-max (" +
                std::to_string(opts.speculation.draft_max) + ")");
  }
  opts.parallel = a.parallel;
  opts.max_running = a.parallel;
  opts.max_queue = a.max_queue;
  opts.queue_timeout = duration(a.queue_timeout, "queue-timeout");
  opts.drain_timeout = duration(a.unload_timeout, "unload-timeout");
  opts.min_serve = std::max(Millis(0), duration(a.min_serve, "min-serve"));
  opts.log = true;
  opts.session.n_ctx = a.ctx;
  opts.session.n_batch = a.batch;
  if (!a.trust_models) {
    // This program is its own vetting child (main.cpp): a file that makes
    // llama.cpp abort ends that child, not the server.
    VetterOptions vo;
    vo.program = Vetter::this_program();
    vo.timeout = duration(a.vet_timeout, "vet-timeout");
    vo.log = true;
    opts.vetter = std::make_shared<Vetter>(std::move(vo));
  }
  return opts;
}

// The keys in a file, one a line; blank lines and lines that start with #
// are not keys.
std::vector<std::string> read_api_keys_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("--api-key-file '" + path + "' cannot be read: " + std::strerror(errno));
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t last = line.find_last_not_of(" \t\r");
    if (keys.size() >= 4096 || last - first + 1 > 4096) {
      throw Error("--api-key-file '" + path + "':" + std::to_string(n) + ": more than 4,096 keys, or a key of more than 4,096 bytes");
    }
    keys.push_back(line.substr(first, last - first + 1));
  }
  if (keys.empty()) throw Error("--api-key-file '" + path + "' has no key");
  return keys;
}

// A variable's value with a leading '/', or empty where it is unset.
std::string route_from_env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return "";
  return *v == '/' ? std::string(v) : "/" + std::string(v);
}

// Google Cloud's Vertex AI starts a custom container with AIP_MODE=PREDICTION
// and names its port and routes in AIP_* variables, which llama-server
// honours too.
void vertex_options(server::ServerOptions& so) {
  const char* mode = std::getenv("AIP_MODE");
  if (!mode || std::string_view(mode) != "PREDICTION") return;
  so.vertex_predict_route = route_from_env("AIP_PREDICT_ROUTE");
  if (so.vertex_predict_route.empty()) so.vertex_predict_route = "/predict";
  so.vertex_health_route = route_from_env("AIP_HEALTH_ROUTE");
  if (const char* port = std::getenv("AIP_HTTP_PORT"); port && *port) {
    int p = 0;
    const std::string_view text(port);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), p);
    if (ec != std::errc() || end != text.data() + text.size() || p <= 0 || p > 65535) {
      throw Error(std::string("AIP_HTTP_PORT '") + port + "' is not a port");
    }
    if (p != so.port) std::fprintf(stderr, "reclaim: AIP_HTTP_PORT %d instead of --port %d\n", p, so.port);
    so.port = p;
  }
}

server::ServerOptions server_options(const Args& a) {
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  for (const std::string& key : a.api_keys) {
    if (key.empty()) throw Error("--api-key: a key cannot be empty");
    so.api_keys.push_back(key);
  }
  if (!a.cors_origins.empty()) so.cors_origins = a.cors_origins;
  for (const std::string& o : so.cors_origins) server::check_cors_origin(o);
  if (!a.api_key_file.empty()) {
    for (std::string& key : read_api_keys_file(a.api_key_file)) so.api_keys.push_back(std::move(key));
  }
  so.tls_cert_file = a.ssl_cert_file;
  so.tls_key_file = a.ssl_key_file;
  so.chat_template = a.chat_template;
  so.jinja = !a.no_jinja;
  so.default_model = a.default_model;
  so.router = a.models.empty() && a.config.empty();
  so.unload_timeout = duration(a.unload_timeout, "unload-timeout");
  so.max_connections = a.max_connections;
  so.read_timeout = duration(a.read_timeout, "read-timeout");
  so.stream_keepalive = duration(a.stream_keepalive, "stream-keepalive");
  so.stream_hold = duration(a.stream_hold, "stream-hold");
  so.grammar_token_time = duration(a.grammar_token_time, "grammar-token-time");
  so.allow_insecure_pull = a.allow_insecure_pull;
  vertex_options(so);
  return so;
}

// What the ledger still holds once everything with threads or models is
// gone, said on stderr; 1 if anything but an accelerator's runtime state.
int report_ledger_at_exit() {
  // The HTTP threads, the reaper and the vetter are on the ledger while
  // they live. An accelerator's runtime state still up (not idle long enough
  // to be released) goes with the runtime, after this: said apart.
  LedgerTotals left;
  std::vector<LedgerEntry> leftover;
  for (LedgerEntry& e : Ledger::process().entries()) {
    if (e.kind == Kind::device_state) {
      std::fprintf(stderr, "reclaim: device runtime state, up at exit and released with the runtime: %s (%s)\n",
                   format_bytes(static_cast<int64_t>(e.all_bytes())).c_str(), e.label.c_str());
      continue;
    }
    ++left.count;
    left.bytes += e.all_bytes();
    leftover.push_back(std::move(e));
  }
  std::fprintf(stderr, "reclaim: stopped; ledger: %llu entries, %s\n", static_cast<unsigned long long>(left.count),
               format_bytes(static_cast<int64_t>(left.bytes)).c_str());
  for (const LedgerEntry& e : leftover) {
    std::fprintf(stderr, "reclaim:   left: %s %s '%s' %s\n", std::string(kind_name(e.kind)).c_str(), e.owner.c_str(),
                 e.label.c_str(), format_bytes(static_cast<int64_t>(e.bytes)).c_str());
  }
  return left.count == 0 ? 0 : 1;
}

int serve(const Args& a) {
  // Signals go to one thread that waits for them, so the handler is not
  // limited to async-signal-safe calls. Blocked before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // a reload, not a stop
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  RuntimeOptions ro;
  ro.verbose = a.verbose;
  Runtime runtime(ro);
  RegistryOptions opts = registry_options(a);
  const server::ServerOptions so = server_options(a);
  const Millis shutdown_timeout = duration(a.shutdown_timeout, "shutdown-timeout");
  ModelSources sources(source_args(a));
  if (sources.empty_at_start()) {
    std::fprintf(stderr, "reclaim: no model given (-m, --models-dir, --config, --models-from) and none in Ollama's store, "
                         "the Hugging Face cache or LM Studio's folder: serving the random-weight test model as 'test'; "
                         "its output is noise (reclaim pull NAME fetches a model)\n");
  }
  std::vector<std::string> preload = a.preload;
  for (const ModelSpec& m : sources.all()) {
    if (m.settings.preload && std::find(preload.begin(), preload.end(), m.name) == preload.end()) preload.push_back(m.name);
  }
  serve_until_stopped(std::move(opts), sources, so, preload, stop_signals, a.models_dir, shutdown_timeout);
  return report_ledger_at_exit();
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server over many models, loaded and unloaded at run time");
  auto a = std::make_shared<Args>();
  sub->add_option("-m,--model", a->models, "PATH[:ALIAS] (repeatable); the alias defaults to the file name")->take_all();
  sub->add_option("--models-dir", a->models_dir, "serve every .gguf in this folder, named by file");
  sub->add_option("--models-from", a->models_from,
                  "serve the models other tools keep, where they lie: ollama (Ollama's store), hf (the Hugging Face "
                  "cache, where llama.cpp's -hf downloads), lmstudio, and pulled (reclaim pull's); comma-separated "
                  "or repeated. With no model named any way, all four at their default places")
      ->take_all();
  sub->add_option("--ollama-models", a->ollama_models, "Ollama's store (default: $OLLAMA_MODELS, ~/.ollama/models)");
  sub->add_option("--hf-cache", a->hf_cache,
                  "the Hugging Face hub cache (default: $LLAMA_CACHE, $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)");
  sub->add_flag("--allow-insecure-pull", a->allow_insecure_pull,
                "let POST /api/pull fetch over plain HTTP where a client asks (\"insecure\": true): a registry mirror "
                "on your own network");
  sub->add_option("--lmstudio-models", a->lmstudio_models, "LM Studio's models folder (default: ~/.lmstudio/models)");
  sub->add_option("--config", a->config,
                  "a TOML file of models and each one's own settings (path, aliases, ctx, parallel, threads, "
                  "gpu_layers, chat_template, keep_alive, pin, preload, defaults); the flags are their defaults");
  sub->add_option("--host", a->host)->capture_default_str();
  sub->add_option("--port", a->port, "port (0: any free one, printed)")->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--keep-alive", a->keep_alive, "unload a model this long after its last request (0: at once, -1: never)")
      ->capture_default_str();
  sub->add_option("--device-idle", a->device_idle,
                  "give the accelerator's runtime state back (its driver context, pipelines, threads) once no "
                  "model has used it this long (0: at once; never, -1: keep it)")
      ->capture_default_str();
  sub->add_option("--memory-budget", a->memory_budget,
                  "memory for all loaded models: 8GiB in all, or one budget a place, host=16GiB,vulkan0=2GiB "
                  "(0: no budget)")
      ->capture_default_str();
  sub->add_option("--cache-ram", a->cache_ram,
                  "host memory each model's prompt cache may take for conversations whose sequence another took "
                  "(llama-server's --cache-ram), within what --memory-budget leaves; 0: none")
      ->capture_default_str();
  sub->add_option("--max-loaded", a->max_loaded, "models loaded at once at most (0: no limit)")->capture_default_str();
  sub->add_flag("--no-autoload", a->no_autoload, "refuse requests for unloaded models (400 model_not_loaded) instead of loading them");
  sub->add_option("--pin", a->pins, "never evict or expire this model (repeatable)")->take_all();
  sub->add_option("--preload", a->preload, "load this model at start-up (repeatable)")->take_all();
  sub->add_option("--unload-timeout", a->unload_timeout, "how long a drain waits before it cancels")->capture_default_str();
  sub->add_option("--shutdown-timeout", a->shutdown_timeout, "how long requests may run after SIGTERM")->capture_default_str();
  sub->add_option("--api-key", a->api_keys,
                  "require Authorization: Bearer KEY (or X-Api-Key: KEY) on every endpoint but /health; repeatable, "
                  "any of the keys is accepted")
      ->take_all();
  sub->add_option("--api-key-file", a->api_key_file, "read API keys from this file, one a line (# starts a comment line)");
  sub->add_option("--ssl-cert-file", a->ssl_cert_file, "serve HTTPS with this PEM certificate (its chain after it)");
  sub->add_option("--ssl-key-file", a->ssl_key_file, "the certificate's PEM private key");
  sub->add_option("--cors-origin", a->cors_origins,
                  "a web page's origin that may call the server from a browser (repeatable): scheme://host[:port], "
                  "'localhost' (any port of localhost, 127.0.0.1, [::1]; the default) or '*'; others are refused (403)")
      ->take_all();
  sub->add_option("--chat-template", a->chat_template, "chat template for every model (a built-in name or template text)");
  sub->add_flag("--no-jinja", a->no_jinja,
                "render each template with llama.cpp's built-in engine (the built-in template its text resembles; no tools), "
                "as llama-server's --no-jinja; a model's `jinja` setting wins");
  sub->add_option("--default-model", a->default_model,
                  "the model an OpenAI request that names none gets (without it: the only model, where there is one)");
  sub->add_option("--ctx", a->ctx, "context size of each request")->capture_default_str()->check(CLI::Range(16, 1 << 24));
  sub->add_option("--batch", a->batch, "prompt tokens per decode step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--threads", a->threads, "decode threads a model (0: all cores)")->capture_default_str();
  sub->add_option("--pooling", a->pooling, std::string("how embeddings pool each model's outputs, over what its file says: ") + kPoolingNames)
      ->check(CLI::Validator(
          [](const std::string& v) { return pooling_from_name(v) ? std::string() : std::string("must be ") + kPoolingNames; },
          "POOLING"));
  sub->add_option("--spec-type", a->spec_type,
                  std::string("speculative decoding: ngram-simple guesses the tokens after each one from what followed "
                              "its last n-gram in the sequence (llama-server's), none decodes a token a step: ") +
                      kSpeculationNames)
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& v) {
            Speculation::Kind k;
            return speculation_from_name(v, k) ? std::string() : std::string("must be ") + kSpeculationNames;
          },
          "TYPE"));
  sub->add_option("--mmproj", a->mmproj,
                  "the -m models' image projector (a vision model's mmproj GGUF, loaded by llama.cpp's mtmd): "
                  "their chats take images");
  sub->add_option("--draft,--model-draft", a->draft,
                  "a draft model of the same vocabulary for the -m models: its greedy picks are their guesses (draft-simple)");
  sub->add_option("--draft-max,--spec-draft-n-max", a->speculation.draft_max, "the most tokens a step guesses")
      ->capture_default_str()->check(CLI::Range(1, kMaxDraft));
  sub->add_option("--draft-min,--spec-draft-n-min", a->speculation.draft_min, "the fewest tokens worth guessing (a shorter guess is not decoded)")
      ->capture_default_str()->check(CLI::Range(0, kMaxDraft));
  sub->add_option("--spec-ngram-size-n,--spec-ngram-simple-size-n", a->speculation.ngram_n,
                  "ngram-simple: the tokens matched, the one just sampled last")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  sub->add_option("--spec-ngram-size-m,--spec-ngram-simple-size-m", a->speculation.ngram_m,
                  "ngram-simple: the most tokens after the match it proposes")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  sub->add_option("--gpu-layers", a->gpu_layers, "layers of each model on the accelerator (-1: all, where there is one; 0: none)")
      ->capture_default_str()->check(CLI::Range(-1, 100000));
  sub->add_option("--parallel", a->parallel, "requests a model decodes together, each in a sequence of --ctx tokens of one context")->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--max-queue", a->max_queue, "requests that may wait for a model beyond --parallel (more: 429)")
      ->capture_default_str()->check(CLI::Range(0, 100000));
  sub->add_option("--queue-timeout", a->queue_timeout, "how long a request may wait for a slot, a load or a swap (then 503)")
      ->capture_default_str();
  sub->add_option("--min-serve", a->min_serve,
                  "how long a busy model keeps admitting requests after its load while others wait for room")
      ->capture_default_str();
  sub->add_option("--max-connections", a->max_connections, "connections served at once (each has a thread while open)")
      ->capture_default_str()->check(CLI::Range(8, 65536));
  sub->add_option("--read-timeout", a->read_timeout, "how long a connection may take to send a whole request, or stay idle")
      ->capture_default_str();
  sub->add_option("--grammar-token-time", a->grammar_token_time,
                  "how long a request's grammar may take to weigh the vocabulary for one token (a 400 beyond)")
      ->capture_default_str();
  sub->add_option("--stream-hold", a->stream_hold,
                  "how long a stream waits for its model before it starts, so that what is wrong with the request is an "
                  "HTTP status; after it, the stream starts and waits on with comments")
      ->capture_default_str();
  sub->add_option("--stream-keepalive", a->stream_keepalive, "how often a stream waiting for its model sends an SSE comment")
      ->capture_default_str();
  sub->add_option("--load-mode", a->load_mode, "mmap, none, mlock or mmap-mlock")->capture_default_str();
  sub->add_flag("--verbose", a->verbose, "pass llama.cpp's log through to stderr");
  sub->add_flag("--trust-models", a->trust_models,
                "load model files without vetting them in a child process first (a damaged file can then end the server)");
  sub->add_option("--vet-timeout", a->vet_timeout, "how long the vetting of one model file may take")->capture_default_str();
  return [a] { return serve(*a); };
}

}  // namespace reclaim::cli
