// bench/chat: a multi-turn chat on reclaim serve and on llama.cpp's
// llama-server (built from the same pinned source, its prompt cache on as by
// default), the same model, chat template, threads and context: the time to
// the first token of each turn, side by side, and their ratio. Each turn
// sends the whole conversation so far and a new user message of about 120
// words, as a chat client does.
//
//   scripts/bench-chat [-m MODEL] [--turns 8] [--words 120] [-t 2] [--ctx 4096] [--rounds 1] [--whole 3]
//
// Then the whole conversation once more on each, nothing cached, --whole
// times: each server's own time to decode it, which is the speed of the
// decode without the prompt caches.
//
// The assistant's turns in the history are fixed text, so that both servers
// see the same prompts whatever each generated. Each user message is chosen
// once, before anything is timed, on reclaim with "cache_prompt": false (so
// the choice leaves no cache behind), among variants whose reply is clean
// text: llama-server fails a request whose reply is not valid UTF-8 (HTTP
// 500, llama.cpp issue #27543), which a random-weight model's bytes can be.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/stats.h"
#include "bench_models.h"
#include "http_client.h"

using namespace reclaim;
using nlohmann::json;
using namespace reclaim::bench;

namespace {

struct Options {
  std::string model, reclaim = RECLAIM_BIN, llama_server = RECLAIM_LLAMA_SERVER;
  int turns = 8, words = 120, threads = 2, ctx = 4096, n = 4, rounds = 1, whole = 3;
};

const char* const kWords[] = {"river", "stone", "memory", "north", "winter", "bridge", "lantern", "harbor",
                              "valley", "signal", "copper", "meadow", "engine", "thread", "window", "garden",
                              "silver", "market", "shadow", "forest", "letter", "island", "candle", "orchard"};

std::string user_message(int turn, int variant, int words) {
  std::string s = "Turn " + std::to_string(turn + 1) + (variant ? " (" + std::to_string(variant) + ")" : "") + ":";
  for (int i = 0; i < words; ++i) {
    s += ' ';
    s += kWords[static_cast<size_t>(turn * 7 + i * 5 + variant * 3) % std::size(kWords)];
  }
  return s + "?";
}

std::string assistant_message(int turn) {
  return "Here is what I know about turn " + std::to_string(turn + 1) +
         ": the river runs north past the stone bridge, the lanterns of the harbor light the valley, and the "
         "market opens when winter ends.";
}

json request(const json& messages, int n, bool stream) {
  json r = {{"model", "chat"}, {"messages", messages}, {"max_tokens", n}, {"temperature", 0}, {"stream", stream}};
  if (stream) r["stream_options"] = {{"include_usage", true}};
  return r;
}

struct Turn {
  double first_ms = -1;
  int64_t cached = -1;  // prompt tokens the server says it took from its cache
  double prompt_ms = -1;  // the server's own time to decode the rest of the prompt
  int64_t prompt_n = -1;  // and how many tokens that was
};

// One streamed turn: the time to its first content, and the cached count
// from its usage (reclaim) or its timings (llama-server).
Turn stream_turn(int port, const json& messages, int n) {
  Turn t;
  const Clock::time_point t0 = Clock::now();
  std::string all;
  const int status = post_sse(port, "/v1/chat/completions", request(messages, n, true).dump(), [&](const json& j) {
    if (t.first_ms < 0 && j.contains("choices") && !j["choices"].empty()) {
      const json& d = j["choices"][0].value("delta", json::object());
      if (d.contains("content") && d["content"].is_string() && !d["content"].get<std::string>().empty()) t.first_ms = ms_since(t0);
    }
    if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("prompt_tokens_details")) {
      t.cached = j["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t{-1});
    }
    if (j.contains("timings") && j["timings"].is_object()) {
      t.cached = j["timings"].value("cache_n", t.cached);
      t.prompt_ms = j["timings"].value("prompt_ms", t.prompt_ms);
      t.prompt_n = j["timings"].value("prompt_n", t.prompt_n);
    }
  }, all);
  if (status != 200) throw Error("turn -> " + std::to_string(status) + ": " + all.substr(0, 300));
  if (t.first_ms < 0) throw Error("the turn's stream had no content: " + all.substr(0, 300));
  return t;
}

// The conversation, its user messages chosen so that every reply is clean.
std::vector<std::string> choose_messages(int port, const Options& o) {
  std::vector<std::string> chosen;
  json messages = json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}}});
  for (int turn = 0; turn < o.turns; ++turn) {
    bool found = false;
    for (int v = 0; v < 64 && !found; ++v) {
      json m = messages;
      m.push_back({{"role", "user"}, {"content", user_message(turn, v, o.words)}});
      json q = request(m, o.n, false);
      q["cache_prompt"] = false;
      const json r = http_json(port, "POST", "/v1/chat/completions", q);
      const std::string text = r["choices"][0]["message"].value("content", "");
      if (text.empty() || text.find("\xEF\xBF\xBD") != std::string::npos) continue;
      chosen.push_back(user_message(turn, v, o.words));
      found = true;
    }
    if (!found) throw Error("no variant of turn " + std::to_string(turn + 1) + "'s message gives a clean reply");
    messages.push_back({{"role", "user"}, {"content", chosen.back()}});
    messages.push_back({{"role", "assistant"}, {"content", assistant_message(turn)}});
  }
  return chosen;
}

std::vector<Turn> converse(int port, const Options& o, const std::vector<std::string>& users, int round) {
  // A first request of other text, so that turn 1 is not the server's first.
  json warm = json::array({{{"role", "user"}, {"content", "Warm up " + std::to_string(round) + "."}}});
  (void)stream_turn(port, warm, o.n);
  std::vector<Turn> out;
  json messages = json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}}});
  for (int turn = 0; turn < o.turns; ++turn) {
    messages.push_back({{"role", "user"}, {"content", users[static_cast<size_t>(turn)]}});
    out.push_back(stream_turn(port, messages, o.n));
    messages.push_back({{"role", "assistant"}, {"content", assistant_message(turn)}});
  }
  return out;
}

// The whole conversation, nothing cached ("cache_prompt": false), `times`
// times: the server's own time to decode it, the median. This is the decode
// alone, without either prompt cache.
double whole_prompt_ms(int port, const Options& o, const std::vector<std::string>& users, int times) {
  json messages = json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}}});
  for (int turn = 0; turn < o.turns; ++turn) {
    messages.push_back({{"role", "user"}, {"content", users[static_cast<size_t>(turn)]}});
    if (turn + 1 < o.turns) messages.push_back({{"role", "assistant"}, {"content", assistant_message(turn)}});
  }
  json q = request(messages, 1, false);
  q["cache_prompt"] = false;
  std::vector<double> ms;
  for (int i = 0; i < times; ++i) {
    const json r = http_json(port, "POST", "/v1/chat/completions", q);
    ms.push_back(r.at("timings").at("prompt_ms").get<double>());
  }
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"a multi-turn chat on reclaim serve and llama-server: time to first token per turn"};
  app.add_option("-m,--model", o.model, "the model (default: a 300 MiB spm test model, made once in the cache)");
  app.add_option("--turns", o.turns, "turns of the conversation")->capture_default_str();
  app.add_option("--words", o.words, "words in each user message")->capture_default_str();
  app.add_option("-n", o.n, "tokens each reply generates")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads on both sides")->capture_default_str();
  app.add_option("--ctx", o.ctx, "context on both sides")->capture_default_str();
  app.add_option("--rounds", o.rounds, "conversations, alternating which server goes first")->capture_default_str();
  app.add_option("--whole", o.whole, "times the whole conversation is decoded uncached on each side (0: none)")->capture_default_str();
  app.add_option("--reclaim", o.reclaim, "the reclaim binary")->capture_default_str();
  app.add_option("--llama-server", o.llama_server, "the llama-server binary (scripts/bench-chat builds it)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<ServerProcess*> sides;
  ServerProcess reclaim, llama;
  std::string dir;
  try {
    require_llama_server(o.llama_server, "scripts/bench-chat");
    const std::string model = std::filesystem::absolute(model_or_made(o.model, "spm", "bench-chat"));
    char tmpl[] = "/tmp/bench-chat.XXXXXX";
    if (!::mkdtemp(tmpl)) throw Error("mkdtemp failed");
    dir = tmpl;
    const std::string threads = std::to_string(o.threads), ctx = std::to_string(o.ctx);
    reclaim.name = "reclaim";
    reclaim.port = free_port();
    reclaim.log = dir + "/reclaim.log";
    reclaim.argv = {o.reclaim, "serve", "--port", std::to_string(reclaim.port), "-m", model + ":chat", "--preload", "chat",
                    "--parallel", "1", "--ctx", ctx, "--threads", threads, "--keep-alive", "-1",
                    "--chat-template", "chatml"};
    llama.name = "llama-server";
    llama.port = free_port();
    llama.log = dir + "/llama-server.log";
    llama.argv = {o.llama_server, "--port", std::to_string(llama.port), "-m", model, "--alias", "chat", "-np", "1",
                  "-c", ctx, "-t", threads, "--chat-template", "chatml", "--no-webui"};
    std::printf("model %s\n%d turns of %d words, %d threads, ctx %d, %d tokens a reply\n", model.c_str(), o.turns, o.words,
                o.threads, o.ctx, o.n);
    reclaim.start();
    sides.push_back(&reclaim);
    llama.start();
    sides.push_back(&llama);
    const std::vector<std::string> users = choose_messages(reclaim.port, o);

    std::vector<std::vector<double>> ratios(static_cast<size_t>(o.turns));
    for (int r = 0; r < o.rounds; ++r) {
      std::vector<Turn> tr, tl;
      in_turn(r, [&] { tr = converse(reclaim.port, o, users, r); }, [&] { tl = converse(llama.port, o, users, r); });
      // "prompt": each server's own time to decode what was not cached.
      std::printf("round %d\n%5s  %12s %8s %6s %8s  %12s %8s %6s %8s  %7s\n", r + 1, "turn", "reclaim ms", "prompt",
                  "new", "cached", "llama-srv ms", "prompt", "new", "cached", "ratio");
      for (int t = 0; t < o.turns; ++t) {
        const Turn& a = tr[static_cast<size_t>(t)];
        const Turn& b = tl[static_cast<size_t>(t)];
        ratios[static_cast<size_t>(t)].push_back(a.first_ms / b.first_ms);
        std::printf("%5d  %12.0f %8.0f %6lld %8lld  %12.0f %8.0f %6lld %8lld  %6.2fx\n", t + 1, a.first_ms, a.prompt_ms,
                    static_cast<long long>(a.prompt_n), static_cast<long long>(a.cached), b.first_ms, b.prompt_ms,
                    static_cast<long long>(b.prompt_n), static_cast<long long>(b.cached), ratios[static_cast<size_t>(t)].back());
      }
      std::fflush(stdout);
    }
    if (o.whole > 0) {
      double a = 0, b = 0;
      in_turn(0, [&] { a = whole_prompt_ms(reclaim.port, o, users, o.whole); },
              [&] { b = whole_prompt_ms(llama.port, o, users, o.whole); });
      std::printf("whole conversation, nothing cached, median of %d: reclaim %.0f ms, llama-server %.0f ms, %.2fx\n",
                  o.whole, a, b, a / b);
    }
    double worst = 0;
    for (int t = 1; t < o.turns; ++t) worst = std::max(worst, median(ratios[static_cast<size_t>(t)]));
    std::printf("median ratio per turn:");
    for (const auto& r : ratios) std::printf(" %.2fx", median(r));
    // How far a turn moves between rounds: on a busy or small machine a
    // median within that spread of 1.0 is level.
    std::printf("\nlowest-highest per turn:");
    for (const auto& r : ratios) {
      std::printf(" %.2f-%.2f", *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()));
    }
    std::printf("\nworst turn after the first: %.2fx of llama-server's time to first token (target <= 1.0x)\n", worst);
    for (ServerProcess* s : sides) s->stop();
    std::filesystem::remove_all(dir);
    return 0;
  } catch (const std::exception& e) {
    for (ServerProcess* s : sides) s->stop();
    std::fprintf(stderr, "bench-chat: %s\n", e.what());
    if (!dir.empty()) std::fprintf(stderr, "bench-chat: logs kept in %s\n", dir.c_str());
    return 1;
  }
}
