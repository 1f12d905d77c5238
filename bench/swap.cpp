// bench/swap: reclaim serve against llama.cpp's llama-server (router mode,
// --models-max 1, built from the same pinned source) on the same two models,
// the same threads and the same context a stream. Both servers run at once
// (the idle one takes no CPU); rounds alternate which is measured first, and
// each round prints its ratios and the last line their medians.
//
//   scripts/bench-swap [-a MODEL] [-b MODEL] [--ctx 1024] [-n 64] [--streams 4] [--rounds 3]
//
// What is timed, on each side, over HTTP with a client of its own:
//   swap: from "unload A" (POST, then polling the model list until A reads
//         unloaded, since llama-server's unload is asynchronous) to the first
//         streamed token of B, B loading on demand. Swaps go A→B, B→A, …
//   streams: aggregate completion tokens a second of N concurrent streamed
//         /v1/completions of n tokens each (greedy, distinct prompts), from
//         the first request sent to the last stream's end.
//   B behind A: A streams a long answer (--long tokens); once its first
//         token is out, B is asked for: the time to B's first token, and how
//         many of its tokens A's answer got (all of them: A drained first;
//         fewer: A was cut for B).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/size.h"
#include "core/stats.h"
#include "engine/test_model.h"
#include "bench_models.h"
#include "http_client.h"
#include "streams.h"

extern char** environ;

using namespace reclaim;
using nlohmann::json;
using namespace reclaim::bench;

namespace {

struct Options {
  std::string a, b, reclaim = RECLAIM_BIN, llama_server = RECLAIM_LLAMA_SERVER;
  int ctx = 1024, n = 64, streams = 4, rounds = 3, swaps = 4, threads = 0, long_n = 256;
};

struct Figures {
  double swap_ms = 0;  // median over the round's swaps
  double tps = 0;
  double behind_ms = 0;  // B's first token, asked for while A streams
  int64_t a_tokens = 0;  // A's answer's tokens meanwhile; -1: its stream failed
};

// B asked for while A streams a long answer, A loaded and B not.
void measure_behind(ServerProcess& s, const Options& o, Prompts& prompts, Figures& f) {
  if (s.model_state("b") != "unloaded") {
    http_json(s.port, "POST", s.unload_path, {{"model", "b"}});
    s.wait_state("b", "unloaded");
  }
  stream_completion(s.port, "a", prompts.get("a", "warm up", 4), 4);
  const std::string& long_prompt = prompts.get("a", "a long answer", o.long_n);
  const std::string& b_prompt = prompts.get("b", "asked for meanwhile", 2);
  std::promise<void> started;
  auto a = std::async(std::launch::async, [&] {
    try {
      return stream_completion(s.port, "a", long_prompt, o.long_n, [&] { started.set_value(); });
    } catch (const std::exception&) {
      StreamResult r;
      r.tokens = -1;
      return r;
    }
  });
  if (started.get_future().wait_for(std::chrono::minutes(5)) != std::future_status::ready) {
    throw Error(s.name + ": A's long answer had no token in 5 minutes");
  }
  const StreamResult b = stream_completion(s.port, "b", b_prompt, 2);
  f.behind_ms = b.first_ms;
  f.a_tokens = a.get().tokens;
}

std::string stream_prompt(int i, int round) {
  return "stream " + std::to_string(i) + " of round " + std::to_string(round) + ": tell a story";
}

Figures measure(ServerProcess& s, const Options& o, int round, Prompts& prompts) {
  Figures f;
  // Start from A loaded and used once, B unloaded.
  stream_completion(s.port, "a", prompts.get("a", "warm up", 4), 4);
  if (s.model_state("b") != "unloaded") {
    http_json(s.port, "POST", s.unload_path, {{"model", "b"}});
    s.wait_state("b", "unloaded");
  }
  std::vector<double> swaps;
  std::string from = "a", to = "b";
  for (int k = 0; k < o.swaps; ++k) {
    const std::string& prompt = prompts.get(to, "swap " + std::to_string(k), 2);
    const Clock::time_point t0 = Clock::now();
    http_json(s.port, "POST", s.unload_path, {{"model", from}});
    s.wait_state(from, "unloaded");
    const StreamResult r = stream_completion(s.port, to, prompt, 2);
    swaps.push_back(ms_since(t0) - (r.total_ms - r.first_ms));
    std::swap(from, to);
  }
  f.swap_ms = median(swaps);

  stream_completion(s.port, from, prompts.get(from, "warm up the batch", 4), 4);
  std::vector<std::string> texts;
  for (int i = 0; i < o.streams; ++i) {
    texts.push_back(prompts.get(from, stream_prompt(i, round), o.n));
  }
  std::vector<std::future<StreamResult>> running;
  const Clock::time_point t0 = Clock::now();
  for (const std::string& prompt : texts) {
    running.push_back(std::async(std::launch::async, [&, prompt] { return stream_completion(s.port, from, prompt, o.n); }));
  }
  int64_t tokens = 0;
  for (auto& r : running) tokens += r.get().tokens;
  const double wall = ms_since(t0);
  if (tokens <= 0) throw Error(s.name + " reported no completion tokens (stream_options.include_usage)");
  f.tps = static_cast<double>(tokens) * 1000.0 / wall;
  measure_behind(s, o, prompts, f);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"reclaim serve against llama-server: model swap time and concurrent stream throughput"};
  app.add_option("-a", o.a, "model A (default: the cached 300 MiB bpe test model)");
  app.add_option("-b", o.b, "model B (default: a 300 MiB spm test model, made once in the cache)");
  app.add_option("--ctx", o.ctx, "context of each stream")->capture_default_str();
  app.add_option("-n", o.n, "tokens each stream generates")->capture_default_str();
  app.add_option("--streams", o.streams, "concurrent streams (and --parallel / -np)")->capture_default_str();
  app.add_option("--rounds", o.rounds, "rounds, alternating which server goes first")->capture_default_str();
  app.add_option("--swaps", o.swaps, "swaps a round")->capture_default_str();
  app.add_option("--long", o.long_n, "tokens of A's answer while B is asked for")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "decode threads on both sides (0: all cores)")->capture_default_str();
  app.add_option("--reclaim", o.reclaim, "the reclaim binary")->capture_default_str();
  app.add_option("--llama-server", o.llama_server, "the llama-server binary (scripts/bench-swap builds it)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<ServerProcess*> sides;
  ServerProcess reclaim, llama;
  std::string dir;
  try {
    require_llama_server(o.llama_server, "scripts/bench-swap");
    if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::string a = std::filesystem::absolute(model_or_made(o.a, "bpe", "bench-swap"));
    const std::string b = std::filesystem::absolute(model_or_made(o.b, "spm", "bench-swap"));
    char tmpl[] = "/tmp/bench-swap.XXXXXX";
    if (!::mkdtemp(tmpl)) throw Error(std::string("mkdtemp: ") + std::strerror(errno));
    dir = tmpl;
    std::filesystem::create_directory(dir + "/models");
    std::filesystem::create_symlink(a, dir + "/models/a.gguf");
    std::filesystem::create_symlink(b, dir + "/models/b.gguf");
    const std::string threads = std::to_string(o.threads), ctx = std::to_string(o.ctx), np = std::to_string(o.streams);

    reclaim.name = "reclaim";
    reclaim.port = free_port();
    reclaim.log = dir + "/reclaim.log";
    reclaim.argv = {o.reclaim, "serve", "--port", std::to_string(reclaim.port), "--models-dir", dir + "/models",
                    "--max-loaded", "1", "--parallel", np, "--ctx", ctx, "--threads", threads, "--keep-alive", "-1"};
    reclaim.state = [](const json& m) { return m.value("state", ""); };
    reclaim.unload_path = "/v1/models/unload";

    llama.name = "llama-server";
    llama.port = free_port();
    llama.log = dir + "/llama-server.log";
    // -np explicit: one KV stream a slot (not unified), -c the total of them,
    // as reclaim's sequences of --ctx each.
    llama.argv = {o.llama_server, "--port", std::to_string(llama.port), "--models-dir", dir + "/models",
                  "--models-max", "1", "-np", np, "-c", std::to_string(o.ctx * o.streams), "-t", threads,
                  "--no-webui"};
    llama.state = [](const json& m) {
      const json& s = m.contains("status") ? m["status"] : json::object();
      return s.is_object() ? s.value("value", "") : std::string();
    };
    llama.unload_path = "/models/unload";

    std::printf("models: A %s\n        B %s\nthreads %d, ctx %d a stream, %d streams of %d tokens, %d swaps a round\n",
                a.c_str(), b.c_str(), o.threads, o.ctx, o.streams, o.n, o.swaps);
    reclaim.start();
    sides.push_back(&reclaim);
    llama.start();
    sides.push_back(&llama);

    std::vector<double> swap_ratio, tps_ratio, behind_ratio;
    std::printf("%5s  %12s %12s %7s  %12s %12s %7s  %14s %12s %7s  %s\n", "round", "swap reclaim", "llama-srv",
                "ratio", "tok/s reclaim", "llama-srv", "ratio", "B behind A: rcl", "llama-srv", "ratio",
                "A's tokens meanwhile (reclaim, llama-server)");
    // Every prompt chosen before anything is timed: choosing loads models.
    Prompts prompts(reclaim.port);
    std::string last = "a";
    for (int k = 0; k < o.swaps; ++k) {
      const std::string to = k % 2 ? "a" : "b";
      prompts.get(to, "swap " + std::to_string(k), 2);
      last = to;
    }
    prompts.get("a", "warm up", 4);
    prompts.get(last, "warm up the batch", 4);
    prompts.get("a", "a long answer", o.long_n);
    prompts.get("b", "asked for meanwhile", 2);
    for (int r = 0; r < o.rounds; ++r) {
      for (int i = 0; i < o.streams; ++i) prompts.get(last, stream_prompt(i, r), o.n);
    }
    prompts.freeze();
    for (int r = 0; r < o.rounds; ++r) {
      Figures fr, fl;
      in_turn(r, [&] { fr = measure(reclaim, o, r, prompts); }, [&] { fl = measure(llama, o, r, prompts); });
      swap_ratio.push_back(fr.swap_ms / fl.swap_ms);
      tps_ratio.push_back(fr.tps / fl.tps);
      behind_ratio.push_back(fr.behind_ms / fl.behind_ms);
      std::printf("%5d  %9.0f ms %9.0f ms %6.2fx  %12.1f %12.1f %6.2fx  %11.0f ms %9.0f ms %6.2fx  %lld, %lld of %d\n",
                  r + 1, fr.swap_ms, fl.swap_ms, swap_ratio.back(), fr.tps, fl.tps, tps_ratio.back(), fr.behind_ms,
                  fl.behind_ms, behind_ratio.back(), static_cast<long long>(fr.a_tokens),
                  static_cast<long long>(fl.a_tokens), o.long_n);
      std::fflush(stdout);
    }
    std::printf("median: swap %.2fx of llama-server's time (target <= 0.5x), %d-stream throughput %.2fx of "
                "llama-server's (target >= 1.0x)\n",
                median(swap_ratio), o.streams, median(tps_ratio));
    std::printf("median: B's first token while A streams %.2fx of llama-server's time\n", median(behind_ratio));
    for (ServerProcess* s : sides) s->stop();
    std::filesystem::remove_all(dir);
    return 0;
  } catch (const std::exception& e) {
    for (ServerProcess* s : sides) s->stop();
    std::fprintf(stderr, "bench-swap: %s\n", e.what());
    if (!dir.empty()) std::fprintf(stderr, "bench-swap: logs kept in %s\n", dir.c_str());
    return 1;
  }
}
