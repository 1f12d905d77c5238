// Two models generating at once on the same cores, against one alone: the
// aggregate tokens/s of both with the cores taken in turns
// (engine/core_turns.h) and without (each model's pool on every core at
// once), as ratios to one model alone, in alternating rounds of one run.
//
//   build/bin/bench-two-models [--tokens 128] [--rounds 3] [-a A.gguf -b B.gguf]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "bench_models.h"
#include "core/heap.h"
#include "engine/core_turns.h"
#include "engine/generate.h"
#include "engine/llama_runtime.h"
#include "engine/session.h"

using namespace reclaim;
using Clock = std::chrono::steady_clock;

namespace {

int generated(Model& m, int n) {
  SessionOptions o;
  o.n_ctx = 512;
  o.n_batch = 128;
  Session s(m, o);
  GenerateRequest r;
  r.prompt = "Once upon a time, in a land far away, there lived";
  r.max_tokens = n;
  r.sampling.temperature = 0;
  return static_cast<int>(generate(s, r).tokens.size());
}

// Tokens a second of one model alone, or of both at once (their sum over
// the wall time of both).
double rate(Model& a, Model* b, int n) {
  const auto t0 = Clock::now();
  int tokens = 0, tokens_b = 0;
  std::thread other;
  if (b) other = std::thread([&] { tokens_b = generated(*b, n); });
  tokens = generated(a, n);
  if (other.joinable()) other.join();
  return (tokens + tokens_b) / std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_heap_tunables(argv);
  CLI::App app{"two models generating at once against one alone, with and without the cores in turns"};
  std::string pa, pb;
  int tokens = 128, rounds = 3;
  app.add_option("-a", pa, "first model (default: the cached ~300 MiB bpe test model)");
  app.add_option("-b", pb, "second model (default: a ~300 MiB spm test model, made once)");
  app.add_option("--tokens", tokens, "tokens each model generates")->capture_default_str();
  app.add_option("--rounds", rounds, "alternating rounds")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    Runtime runtime;
    ModelLoad la, lb;
    la.path = bench::model_or_made(pa, "bpe", "bench-two-models");
    lb.path = bench::model_or_made(pb, "spm", "bench-two-models");
    Model a(la), b(lb);
    std::printf("models %s and %s, %d threads each, %d tokens, %d rounds\n", la.path.c_str(), lb.path.c_str(), a.n_threads(),
                tokens, rounds);
    std::printf("%-6s %12s %16s %16s %10s %10s\n", "round", "alone t/s", "both turns t/s", "both free t/s", "turns", "free");
    std::vector<double> with, without;
    (void)generated(a, 8);  // warm: the first graph's allocations
    (void)generated(b, 8);
    for (int round = 0; round < rounds; ++round) {
      set_core_turns(true);
      const double one = (rate(a, nullptr, tokens) + rate(b, nullptr, tokens)) / 2;
      double turns = 0, free = 0;
      for (int side = 0; side < 2; ++side) {
        const bool on = (round + side) % 2 == 0;
        set_core_turns(on);
        (on ? turns : free) = rate(a, &b, tokens);
      }
      set_core_turns(true);
      with.push_back(turns / one);
      without.push_back(free / one);
      std::printf("%-6d %12.2f %16.2f %16.2f %10.3f %10.3f\n", round, one, turns, free, turns / one, free / one);
      std::fflush(stdout);
    }
    const CoreTurnStats s = core_turn_stats();
    std::printf("median ratio both at once / one alone: with turns %.3f, without %.3f (target >= 0.95 with turns); "
                "%llu turns, %llu waited, %llu pauses\n",
                median(with), median(without), static_cast<unsigned long long>(s.turns),
                static_cast<unsigned long long>(s.waited), static_cast<unsigned long long>(s.pauses));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-two-models: %s\n", e.what());
    return 2;
  }
  return 0;
}
