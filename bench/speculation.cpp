// bench/speculation: what a draft model's guesses give, on reclaim serve and
// on llama.cpp's llama-server (built from the same pinned source), the same
// models, threads and context. Random weights can show it: the target's
// layers past --draft-layers add nothing (make-test-model
// --zero-layers-from), so a draft of those first layers and the same seed
// picks what the target picks (every guess kept); a draft of another seed
// picks something else (nearly none kept).
//
//   scripts/bench-speculation [--embd 768] [--layers 12] [--draft-layers 2] [-n 256] [-t 2]
//                             [--draft-max 8] [--rounds 3]
//
// For each case (no draft, the right draft, the wrong one) both servers are
// started with it and asked for the same greedy completion --rounds times,
// alternating which goes first; the figure is each server's own generation
// speed (timings.predicted_per_second: the tokens after the first over the
// time after the prompt), the median, and the guesses it kept. The ratios
// are against the same server without a draft: the speed-up where every
// guess is right (target: at least llama-server's) and the loss where none
// is (target: at most 3%).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/stats.h"
#include "engine/test_model.h"
#include "http_client.h"

using namespace reclaim;
using nlohmann::json;
using namespace reclaim::bench;

namespace {

struct Options {
  std::string reclaim = RECLAIM_BIN, llama_server = RECLAIM_LLAMA_SERVER;
  int embd = 768, layers = 12, draft_layers = 2, n = 256, threads = 2, ctx = 1024, draft_max = 8, rounds = 3;
};

struct Models {
  std::string target, right, wrong;
};

// Made once in the cache, named by their shape.
Models models(const Options& o) {
  const std::string dir = cache_dir() + "/models";
  std::filesystem::create_directories(dir);
  const std::string shape = "spm-e" + std::to_string(o.embd) + "-f16";
  const std::string target = dir + "/spec-target-" + shape + "-l" + std::to_string(o.layers) + "-z" +
                             std::to_string(o.draft_layers) + "-s1.gguf";
  const std::string right = dir + "/spec-draft-" + shape + "-l" + std::to_string(o.draft_layers) + "-s1.gguf";
  const std::string wrong = dir + "/spec-draft-" + shape + "-l" + std::to_string(o.draft_layers) + "-s2.gguf";
  TestModelSpec s;
  s.vocab = "spm";
  s.n_embd = o.embd;
  const auto make = [&](const std::string& path, int64_t layers, int64_t zero_from, uint64_t seed) {
    if (::access(path.c_str(), R_OK) == 0) return;
    s.n_layer = layers;
    s.zero_layers_from = zero_from;
    s.seed = seed;
    std::fprintf(stderr, "bench-speculation: making %s (once)\n", path.c_str());
    make_test_model(s, path);
  };
  make(target, o.layers, o.draft_layers, 1);
  make(right, o.draft_layers, -1, 1);
  make(wrong, o.draft_layers, -1, 2);
  return {target, right, wrong};
}

struct Run {
  double tps = 0;             // the median of the rounds' generation speeds
  int64_t drafted = 0, kept = 0;  // summed over the rounds
};

json completion(const std::string& prompt, int n) {
  return {{"prompt", prompt}, {"n_predict", n}, {"temperature", 0}, {"cache_prompt", false}, {"ignore_eos", true}};
}

// The prompt: the first of its variants whose reply llama-server answers.
// It fails a request whose reply is not valid UTF-8 (HTTP 500, llama.cpp
// issue #27543), which a random-weight model's bytes can be; its reply with
// a draft may part from its reply without at a near tie (a step of several
// rows takes other kernels), so each case chooses again. The variants
// differ in one digit: the same length and cost a token.
std::string choose_prompt(int llama_port, int n) {
  for (int v = 0; v < 64; ++v) {
    const std::string p = "The river runs north past the stone bridge (" + std::to_string(v) + "), and the lanterns";
    std::string body;
    if (http(llama_port, "POST", "/completion", completion(p, n).dump(), [&](const std::string& b) { body = b; }) == 200) {
      return p;
    }
  }
  throw Error("no variant of the prompt gives a reply llama-server answers");
}

// One greedy completion of --n tokens: its speed and its guesses.
void complete(int port, const Options& o, const std::string& prompt, std::vector<double>& tps, Run& run) {
  const json r = http_json(port, "POST", "/completion", completion(prompt, o.n));
  const json& t = r.at("timings");
  if (t.value("predicted_n", 0) != o.n) throw Error("a completion made " + t.dump() + " rather than " + std::to_string(o.n));
  tps.push_back(t.at("predicted_per_second").get<double>());
  run.drafted += t.value("draft_n", 0);
  run.kept += t.value("draft_n_accepted", 0);
}

std::pair<Run, Run> measure(const Options& o, const std::string& dir, const std::string& target, const std::string& draft) {
  const std::string threads = std::to_string(o.threads), ctx = std::to_string(o.ctx), dmax = std::to_string(o.draft_max);
  ServerProcess reclaim, llama;
  reclaim.name = "reclaim";
  reclaim.port = free_port();
  reclaim.log = dir + "/reclaim.log";
  reclaim.argv = {o.reclaim, "serve", "--port", std::to_string(reclaim.port), "-m", target + ":t", "--preload", "t",
                  "--parallel", "1", "--ctx", ctx, "--threads", threads, "--keep-alive", "-1", "--draft-max", dmax};
  llama.name = "llama-server";
  llama.port = free_port();
  llama.log = dir + "/llama-server.log";
  llama.argv = {o.llama_server, "--port", std::to_string(llama.port), "-m", target, "-np", "1", "-c", ctx, "-t", threads,
                "--no-webui", "--spec-draft-n-max", dmax};
  if (!draft.empty()) {
    reclaim.argv.insert(reclaim.argv.end(), {"--draft", draft});
    // Without --spec-type, the pinned llama-server loads the draft and
    // guesses nothing.
    llama.argv.insert(llama.argv.end(), {"--model-draft", draft, "--spec-type", "draft-simple"});
  }
  std::vector<ServerProcess*> up;
  try {
    reclaim.start();
    up.push_back(&reclaim);
    llama.start();
    up.push_back(&llama);
    Run a, b;
    std::vector<double> ta, tb;
    // A first completion each, untimed: the first decode's buffers.
    const std::string prompt = choose_prompt(llama.port, o.n);
    Run unused;
    std::vector<double> warm;
    complete(reclaim.port, o, prompt, warm, unused);
    complete(llama.port, o, prompt, warm, unused);
    for (int r = 0; r < o.rounds; ++r) {
      in_turn(r, [&] { complete(reclaim.port, o, prompt, ta, a); }, [&] { complete(llama.port, o, prompt, tb, b); });
    }
    a.tps = median(ta);
    b.tps = median(tb);
    for (ServerProcess* s : up) s->stop();
    return {a, b};
  } catch (...) {
    for (ServerProcess* s : up) s->stop();
    throw;
  }
}

std::string kept(const Run& r) {
  return r.drafted > 0 ? std::to_string(r.kept) + "/" + std::to_string(r.drafted) : "-";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"speculative decoding with a draft model on reclaim serve and llama-server: tokens/s with and without"};
  app.add_option("--embd", o.embd, "the models' width")->capture_default_str();
  app.add_option("--layers", o.layers, "the target's layers")->capture_default_str();
  app.add_option("--draft-layers", o.draft_layers, "the drafts' layers (the target's first ones)")->capture_default_str();
  app.add_option("-n", o.n, "tokens each completion generates")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads on both sides")->capture_default_str();
  app.add_option("--ctx", o.ctx, "context on both sides")->capture_default_str();
  app.add_option("--draft-max", o.draft_max, "the most tokens a step guesses, on both sides")->capture_default_str();
  app.add_option("--rounds", o.rounds, "completions timed on each side for each case")->capture_default_str();
  app.add_option("--reclaim", o.reclaim, "the reclaim binary")->capture_default_str();
  app.add_option("--llama-server", o.llama_server, "the llama-server binary (scripts/bench-speculation builds it)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.draft_layers < 1 || o.draft_layers >= o.layers) {
    std::fprintf(stderr, "bench-speculation: --draft-layers must be 1..%d\n", o.layers - 1);
    return 2;
  }

  std::string dir;
  try {
    require_llama_server(o.llama_server, "scripts/bench-speculation");
    const Models m = models(o);
    char tmpl[] = "/tmp/bench-speculation.XXXXXX";
    if (!::mkdtemp(tmpl)) throw Error("mkdtemp failed");
    dir = tmpl;
    std::printf("target %s\n%d tokens a completion, %d threads, draft_max %d, median of %d\n", m.target.c_str(), o.n,
                o.threads, o.draft_max, o.rounds);
    const auto [plain_r, plain_l] = measure(o, dir, m.target, "");
    const auto [right_r, right_l] = measure(o, dir, m.target, m.right);
    const auto [wrong_r, wrong_l] = measure(o, dir, m.target, m.wrong);
    std::printf("%-22s %14s %10s %14s %10s\n", "case", "reclaim tok/s", "kept", "llama tok/s", "kept");
    const auto row = [](const char* name, const Run& a, const Run& b) {
      std::printf("%-22s %14.1f %10s %14.1f %10s\n", name, a.tps, kept(a).c_str(), b.tps, kept(b).c_str());
    };
    row("no draft", plain_r, plain_l);
    row("draft always right", right_r, right_l);
    row("draft never right", wrong_r, wrong_l);
    const double up_r = right_r.tps / plain_r.tps, up_l = right_l.tps / plain_l.tps;
    const double loss_r = 1 - wrong_r.tps / plain_r.tps, loss_l = 1 - wrong_l.tps / plain_l.tps;
    std::printf("speed-up at full acceptance: reclaim %.2fx, llama-server %.2fx (target: reclaim >= llama-server)\n", up_r,
                up_l);
    std::printf("loss at none: reclaim %.1f%%, llama-server %.1f%% (target: reclaim <= 3%%)\n", loss_r * 100,
                loss_l * 100);
    std::filesystem::remove_all(dir);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-speculation: %s\n", e.what());
    if (!dir.empty()) std::fprintf(stderr, "bench-speculation: logs kept in %s\n", dir.c_str());
    return 1;
  }
}
