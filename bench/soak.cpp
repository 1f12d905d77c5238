// bench/soak: a bounded mixed load on `reclaim serve`, watched from outside.
//
//   build/bin/bench-soak [--requests 10000] [--clients 8] [--ctx 512] [--parallel 2] [--seed 1]
//                        [--checkpoint 1000] [--serve=--min-serve=2s]...
//
// Four test models (make-test-model: two spm, a bpe one with fill-in-the-
// middle tokens, a bpe reranker) are served from one folder under a
// --memory-budget that holds two of them, so requests for the others swap.
// Text requests go 65% to a, 20% to b (bpe) and 15% to c. Clients draw each
// request at random (bench/soak_requests.cpp):
//   28% a streamed completion (its time to first token is measured);
//   10% a stream dropped at a random point, from before its headers to its
//       fourth event;
//   14% a completion not streamed;
//    2% a cancel-unload of a random model (requests on it end as cancelled);
//   12% a bad body, to /v1/completions or another API (each must be a 4xx);
//    4% a control read (/health, /v1/models, /metrics, /v1/resources);
//    4% a resumable stream (X-Conversation-Id) left after its first event,
//       read again whole from /v1/stream, then deleted;
//   26% the other APIs, streamed or not where they stream: chat (with a JSON
//       schema half the time), Anthropic's Messages, OpenAI's Responses,
//       Ollama's chat and generate, embeddings, tokenize and detokenize, a
//       grammar, /infill on b, /v1/rerank on the reranker.
// It prints the outcomes by cause (expected: ok, dropped, cancelled by an
// unload, refused as bad; anything else is unexpected), p50 and p99 time to
// first token, the RssAnon slope in KiB per 1,000 requests, and the fds,
// threads and maps of the process at the start and after the load, all
// models unloaded. The slope is a least-squares fit over RssAnon read from
// /proc/PID/status at a checkpoint every --checkpoint requests, where the
// clients pause and every model is unloaded: during the load RssAnon swings
// by the KV caches of the models loaded, which would drown a leak. It is not
// a test: it exits 0 and says "unexpected: N".
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include <CLI/CLI.hpp>

#include "core/size.h"
#include "core/stats.h"
#include "engine/test_model.h"
#include "http_client.h"
#include "soak_requests.h"

using namespace reclaim;
using namespace reclaim::bench;

namespace {

struct Options {
  int requests = 10000, clients = 8, ctx = 512, parallel = 2, checkpoint = 1000;
  unsigned seed = 1;
  std::string reclaim = RECLAIM_BIN, dir;
  std::vector<std::string> serve_args;  // more, for the measured server
};

// The process as /proc shows it.
struct Outside {
  int64_t anon_kib = 0, threads = 0, fds = 0, maps = 0;
  static Outside of(pid_t pid) {
    Outside o;
    const std::string base = "/proc/" + std::to_string(pid);
    std::ifstream status(base + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("RssAnon:", 0) == 0) o.anon_kib = std::stoll(line.substr(8));
      if (line.rfind("Threads:", 0) == 0) o.threads = std::stoll(line.substr(8));
    }
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(base + "/fd", ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      ++o.fds;
    }
    std::ifstream maps(base + "/maps");
    for (std::string line; std::getline(maps, line);) ++o.maps;
    return o;
  }
};

const char* kModels[] = {kTextModels[0], kTextModels[1], kTextModels[2], kReranker};

// Least squares slope of y over x.
double slope(const std::vector<std::pair<double, double>>& xy) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double n = static_cast<double>(xy.size());
  const double d = n * sxx - sx * sx;
  return xy.size() < 2 || d == 0 ? 0 : (n * sxy - sx * sy) / d;
}

ServerProcess serve(const Options& o, const std::string& log, const std::vector<std::string>& extra) {
  ServerProcess s;
  s.name = "reclaim serve";
  s.port = free_port();
  s.log = log;
  s.argv = {o.reclaim, "serve", "--port", std::to_string(s.port), "--models-dir", o.dir, "--ctx", std::to_string(o.ctx),
            "--parallel", std::to_string(o.parallel), "--max-queue", "256", "--keep-alive", "30s", "--batch", "64"};
  s.argv.insert(s.argv.end(), extra.begin(), extra.end());
  s.state = [](const json& m) { return m.value("state", ""); };
  s.start();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-soak: a bounded mixed load on reclaim serve, watched from /proc"};
  Options o;
  app.add_option("--requests", o.requests)->capture_default_str()->check(CLI::Range(100, 10000000));
  app.add_option("--clients", o.clients)->capture_default_str()->check(CLI::Range(1, 512));
  app.add_option("--ctx", o.ctx)->capture_default_str()->check(CLI::Range(128, 1 << 20));
  app.add_option("--parallel", o.parallel)->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint, "requests between two samples, taken with every model unloaded")
      ->capture_default_str()->check(CLI::Range(10, 10000000));
  app.add_option("--reclaim", o.reclaim, "the reclaim binary")->capture_default_str();
  app.add_option("--serve", o.serve_args, "an argument for the measured reclaim serve (repeatable), e.g. --serve=--min-serve=2s");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::string work = std::filesystem::temp_directory_path() / ("reclaim-soak." + std::to_string(::getpid()));
    std::filesystem::create_directories(work + "/models");
    o.dir = work + "/models";
    struct Made {
      const char* name;
      const char* vocab;
      int embd;
      bool fim = false, reranker = false;
    };
    for (const Made& m : {Made{"a", "spm", 128}, Made{"b", "bpe", 64, true}, Made{"c", "spm", 64},
                          Made{kReranker, "bpe", 64, false, true}}) {
      TestModelSpec spec;
      spec.vocab = m.vocab;
      spec.n_embd = m.embd;
      spec.n_layer = 2;
      spec.n_ctx_train = 4096;
      spec.fim = m.fim;
      spec.reranker = m.reranker;
      make_test_model(spec, o.dir + "/" + m.name + ".gguf");
    }
    // The budget: the two largest estimates and a little, so that the third swaps.
    std::vector<int64_t> estimates;
    {
      ServerProcess probe = serve(o, work + "/probe.log", {});
      for (const char* m : kModels) {
        http_json(probe.port, "POST", "/v1/models/load", {{"model", m}});
        const json list = http_json(probe.port, "GET", "/v1/models");
        for (const json& e : list["data"]) {
          if (e["id"] == m) estimates.push_back(e["estimate"].get<int64_t>());
        }
      }
      probe.stop();
    }
    std::sort(estimates.rbegin(), estimates.rend());
    const int64_t budget = estimates.at(0) + estimates.at(1) + estimates.at(2) / 4;
    std::vector<std::string> measured = {"--memory-budget", std::to_string(budget)};
    measured.insert(measured.end(), o.serve_args.begin(), o.serve_args.end());
    ServerProcess s = serve(o, work + "/serve.log", measured);
    const Outside before = Outside::of(s.pid);

    Tally tally;
    std::vector<std::pair<double, double>> samples;  // (requests done, RssAnon KiB) at each checkpoint
    // Quiescent: every model unloaded, connections closed, threads ended (bounded).
    auto settle = [&] {
      for (const char* m : kModels) http_json(s.port, "POST", "/v1/models/unload", {{"model", m}});
      Outside now = Outside::of(s.pid);
      for (int i = 0; i < 200 && (now.threads > before.threads || now.fds > before.fds); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        now = Outside::of(s.pid);
      }
      return now;
    };
    std::atomic<int> next{0};
    const Clock::time_point t0 = Clock::now();
    for (int done = 0; done < o.requests;) {
      const int until = std::min(o.requests, done + o.checkpoint);
      std::vector<std::thread> clients;
      for (int c = 0; c < o.clients; ++c) {
        clients.emplace_back([&, c] {
          std::mt19937 rng(o.seed * 7919u + static_cast<unsigned>(c) * 131u + static_cast<unsigned>(done));
          for (int i; (i = next.fetch_add(1)) < until;) one_request(s.port, i, rng, tally);
        });
      }
      for (std::thread& t : clients) t.join();
      next = until;
      done = until;
      const Outside at = settle();
      samples.emplace_back(done, static_cast<double>(at.anon_kib));
      std::fprintf(stderr, "bench-soak: %d requests, RssAnon %lld KiB with no model loaded\n", done,
                   static_cast<long long>(at.anon_kib));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const Outside after = settle();
    const json metrics_models = http_json(s.port, "GET", "/v1/models");
    s.stop();

    std::printf("bench-soak: %d requests from %d clients in %.1f s (%.0f a second), budget %s for models of",
                o.requests, o.clients, seconds, o.requests / seconds, format_bytes(budget).c_str());
    for (int64_t e : estimates) std::printf(" %s", format_bytes(e).c_str());
    std::printf("\n");
    int loads = 0;
    for (const json& m : metrics_models["data"]) loads += m.value("loads", 0);
    std::printf("loads: %d (swaps and reloads after cancel-unloads)\n", loads);
    tally.print();
    // The first checkpoint is the warm-up (allocator arenas, first loads).
    const std::vector<std::pair<double, double>> fit(samples.begin() + (samples.size() > 2 ? 1 : 0), samples.end());
    std::printf("RssAnon slope: %+.2f KiB per 1,000 requests (least squares over %zu checkpoints after the first,\n"
                "  each with every model unloaded; RssAnon at them:",
                slope(fit) * 1000, fit.size());
    for (const auto& [n, kib] : samples) std::printf(" %.0f", kib);
    std::printf(" KiB)\n");
    std::printf("%-10s %10s %10s\n", "", "start", "after");
    std::printf("%-10s %10lld %10lld\n", "anon KiB", static_cast<long long>(before.anon_kib), static_cast<long long>(after.anon_kib));
    std::printf("%-10s %10lld %10lld\n", "fds", static_cast<long long>(before.fds), static_cast<long long>(after.fds));
    std::printf("%-10s %10lld %10lld\n", "threads", static_cast<long long>(before.threads), static_cast<long long>(after.threads));
    std::printf("%-10s %10lld %10lld\n", "maps", static_cast<long long>(before.maps), static_cast<long long>(after.maps));
    std::printf("unexpected: %lld\n", static_cast<long long>(tally.unexpected()));
    std::filesystem::remove_all(work);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-soak: %s\n", e.what());
    return 1;
  }
  return 0;
}
