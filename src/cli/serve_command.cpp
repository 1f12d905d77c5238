// `reclaim serve`: the registry and the HTTP server, and an orderly end on
// SIGTERM/SIGINT: stop accepting, let requests finish up to
// --shutdown-timeout, cancel the rest, unload every model, print the final
// ledger (it must be empty) and exit 0.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "core/size.h"
#include "engine/devices.h"
#include "engine/runtime.h"
#include "engine/test_model.h"
#include "runtime/registry.h"
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
  std::vector<std::string> models, pins, preload;
  std::string config;
  std::string models_dir, host = "127.0.0.1", api_key, api_key_file, memory_budget = "0", keep_alive = "5m";
  std::string cache_ram = "2GiB";
  std::string unload_timeout = "30s", shutdown_timeout = "30s", chat_template, load_mode = "mmap", vet_timeout = "10m";
  std::string queue_timeout = "5m", read_timeout = "10s", stream_keepalive = "5s", min_serve = "0";
  int port = 8080, max_loaded = 0, ctx = 4096, threads = 0, gpu_layers = -1, parallel = 1, batch = 512, max_queue = 32;
  int max_connections = 512;
  bool no_autoload = false, verbose = false, trust_models = false;
};

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Millis duration(const std::string& text, const std::string& flag) {
  try {
    return Millis(server::parse_duration_ms(nlohmann::json(text), flag));
  } catch (const server::ApiException& e) {
    throw Error(std::string("--") + e.what());
  }
}

std::vector<ModelSpec> model_specs(const Args& a) {
  std::vector<ModelSpec> out;
  for (const std::string& m : a.models) {
    // PATH[:ALIAS]; the alias defaults to the file name without .gguf.
    // The alias is all after the first ".gguf:", so that it may hold colons
    // (qwen2.5:7b) and the folders a colon; a file not named .gguf takes
    // its alias after the last colon that no '/' follows.
    std::string path = m, alias;
    if (const size_t at = m.find(".gguf:"); at != std::string::npos) {
      path = m.substr(0, at + 5);
      alias = m.substr(at + 6);
    } else if (const size_t colon = m.rfind(':');
               colon != std::string::npos && m.find('/', colon) == std::string::npos && !is_file(m)) {
      path = m.substr(0, colon);
      alias = m.substr(colon + 1);
    }
    check_model_file(path);
    if (alias.empty()) {
      alias = path.substr(path.find_last_of('/') + 1);
      if (alias.size() > 5 && alias.substr(alias.size() - 5) == ".gguf") alias.resize(alias.size() - 5);
    }
    out.push_back({alias, path, false});
  }
  if (!a.models_dir.empty()) {
    DIR* d = ::opendir(a.models_dir.c_str());
    if (!d) throw Error("--models-dir '" + a.models_dir + "' cannot be read: " + std::strerror(errno));
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".gguf") names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) out.push_back({n.substr(0, n.size() - 5), a.models_dir + "/" + n, false});
  }
  if (!a.config.empty()) {
    for (ModelSpec& m : read_serve_config(a.config).models) {
      try {
        check_model_file(m.path);
      } catch (const std::exception& e) {
        throw Error(a.config + ": models." + m.name + ".path: " + e.what());
      }
      out.push_back(std::move(m));
    }
  }
  if (out.empty()) {
    const std::string p = default_test_model();
    std::fprintf(stderr, "reclaim: no model given (-m, --models-dir): serving the random-weight test model as 'test'; its output is noise\n");
    out.push_back({"test", p, false});
  }
  for (const std::string& pin : a.pins) {
    auto it = std::find_if(out.begin(), out.end(), [&](const ModelSpec& s) { return s.name == pin; });
    if (it == out.end()) throw Error("--pin " + pin + ": no model of that name");
    it->pinned = true;
  }
  return out;
}

// Serves until SIGTERM or SIGINT, then stops: the registry, the HTTP
// server and their threads are gone when this returns.
void serve_until_stopped(RegistryOptions opts, std::vector<ModelSpec> specs, const server::ServerOptions& so,
                         const std::vector<std::string>& preload, const sigset_t& stop_signals, Millis shutdown_timeout) {
  Registry registry(std::move(opts), std::move(specs));
  server::Server http(so, registry);
  const int port = http.bind();
  // The accept loop's thread, on the ledger. Whatever fails from here on,
  // the scope's close stops the HTTP side before the thread is destroyed (a
  // joinable std::thread would end the process).
  std::thread server_thread;  // before the scope, which joins it, and so destroyed after it
  Scope serving("serve");
  Scope::Slot accept_slot = serving.reserve(Kind::thread, "accept loop");
  server_thread = std::thread([&] { http.run(); });
  accept_slot.arm(0, [&] {
    http.stop();
    server_thread.join();
  });
  // The HTTP side starts its worker threads when it starts listening.
  while (!http.running()) std::this_thread::yield();
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
  std::printf("reclaim: listening on http://%s:%d (%zu models)\n", so.host.c_str(), port, registry.list().size());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "reclaim: %s: stopping; requests in flight have %lld ms to finish\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
               static_cast<long long>(shutdown_timeout.count()));
  // Requests end as their models unload (drained up to the timeout, then
  // cancelled); the HTTP side returns once their handlers have.
  std::thread stopper([&] { http.stop(); });
  registry.unload_all(UnloadMode::drain, shutdown_timeout);
  stopper.join();
  serving.close();
}

int serve(const Args& a) {
  // Signals go to one thread that waits for them, so the handler is not
  // limited to async-signal-safe calls. Blocked before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  RuntimeOptions ro;
  ro.verbose = a.verbose;
  Runtime runtime(ro);
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
  opts.autoload = !a.no_autoload;
  opts.load_mode = load_mode_from_name(a.load_mode);
  opts.n_threads = a.threads;
  opts.n_gpu_layers = a.gpu_layers;
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
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_key = a.api_key;
  if (!a.api_key_file.empty()) {
    std::FILE* f = std::fopen(a.api_key_file.c_str(), "r");
    if (!f) throw Error("--api-key-file '" + a.api_key_file + "' cannot be read: " + std::strerror(errno));
    char buf[512] = {};
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    so.api_key.assign(buf, n);
    while (!so.api_key.empty() && (so.api_key.back() == '\n' || so.api_key.back() == '\r')) so.api_key.pop_back();
    if (so.api_key.empty()) throw Error("--api-key-file '" + a.api_key_file + "' is empty");
  }
  so.chat_template = a.chat_template;
  so.unload_timeout = duration(a.unload_timeout, "unload-timeout");
  so.max_connections = a.max_connections;
  so.read_timeout = duration(a.read_timeout, "read-timeout");
  so.stream_keepalive = duration(a.stream_keepalive, "stream-keepalive");
  const Millis shutdown_timeout = duration(a.shutdown_timeout, "shutdown-timeout");

  std::vector<ModelSpec> specs = model_specs(a);
  std::vector<std::string> preload = a.preload;
  for (const ModelSpec& m : specs) {
    if (m.settings.preload && std::find(preload.begin(), preload.end(), m.name) == preload.end()) preload.push_back(m.name);
  }
  serve_until_stopped(std::move(opts), std::move(specs), so, preload, stop_signals, shutdown_timeout);
  // Read once everything with threads or models is gone: the HTTP threads,
  // the reaper and the vetter are on the ledger while they live. An
  // accelerator's runtime state goes only with the process: said apart.
  LedgerTotals left;
  std::vector<LedgerEntry> leftover;
  for (LedgerEntry& e : Ledger::process().entries()) {
    if (e.kind == Kind::device_state) {
      std::fprintf(stderr, "reclaim: device runtime state, freed at exit: %s (%s)\n",
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

}  // namespace

Command add_serve(CLI::App& app) {
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server over many models, loaded and unloaded at run time");
  auto a = std::make_shared<Args>();
  sub->add_option("-m,--model", a->models, "PATH[:ALIAS] (repeatable); the alias defaults to the file name")->take_all();
  sub->add_option("--models-dir", a->models_dir, "serve every .gguf in this folder, named by file");
  sub->add_option("--config", a->config,
                  "a TOML file of models and each one's own settings (path, aliases, ctx, parallel, threads, "
                  "gpu_layers, chat_template, keep_alive, pin, preload, defaults); the flags are their defaults");
  sub->add_option("--host", a->host)->capture_default_str();
  sub->add_option("--port", a->port, "port (0: any free one, printed)")->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--keep-alive", a->keep_alive, "unload a model this long after its last request (0: at once, -1: never)")
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
  sub->add_flag("--no-autoload", a->no_autoload, "refuse requests for unloaded models instead of loading them");
  sub->add_option("--pin", a->pins, "never evict or expire this model (repeatable)")->take_all();
  sub->add_option("--preload", a->preload, "load this model at start-up (repeatable)")->take_all();
  sub->add_option("--unload-timeout", a->unload_timeout, "how long a drain waits before it cancels")->capture_default_str();
  sub->add_option("--shutdown-timeout", a->shutdown_timeout, "how long requests may run after SIGTERM")->capture_default_str();
  sub->add_option("--api-key", a->api_key, "require Authorization: Bearer KEY on every endpoint but /health");
  sub->add_option("--api-key-file", a->api_key_file, "read the API key from this file");
  sub->add_option("--chat-template", a->chat_template, "chat template for every model (a built-in name or template text)");
  sub->add_option("--ctx", a->ctx, "context size of each request")->capture_default_str()->check(CLI::Range(16, 1 << 24));
  sub->add_option("--batch", a->batch, "prompt tokens per decode step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--threads", a->threads, "decode threads a model (0: all cores)")->capture_default_str();
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
