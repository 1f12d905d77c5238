// bench/vet: what vetting a model file (runtime/vetter.h) adds to its load,
// as ratios against the same load without it, side by side in one run.
//
// Each round makes a fresh Registry for each side, in alternating order, and
// times two loads of one model through it, each followed by an unload:
//  - the first load: with vetting, a child process reads, plans, loads and
//    decodes the file before this process loads it; without, this process
//    makes its memory estimate in place (as a trusting server does);
//  - later loads of the same file (--later of them, their median): both
//    sides reuse what they learned, so vetting should cost nothing here
//    (target: <= 1.02x).
// The ratio printed is the median of the rounds' own ratios.
//
//   build/bin/bench-vet [-m MODEL] [--rounds 8] [--later 5] [--ctx 1024]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/heap.h"
#include "core/stats.h"
#include "engine/llama_runtime.h"
#include "engine/test_model.h"
#include "engine/vet.h"
#include "runtime/registry.h"

using namespace reclaim;

namespace {

struct Loads {
  double first_ms = 0, later_ms = 0;
};

double load_ms(Registry& reg) {
  const auto t0 = std::chrono::steady_clock::now();
  reg.load("m");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  reg.unload("m", UnloadMode::cancel, std::chrono::milliseconds(0));
  return ms;
}

Loads measure(const std::string& path, int ctx, int later, bool vetted) {
  RegistryOptions o;
  o.session.n_ctx = ctx;
  o.parallel = 1;
  if (vetted) o.vetter = std::make_shared<Vetter>(VetterOptions{.program = Vetter::this_program()});
  Registry reg(o, {{"m", path, false}});
  Loads l;
  l.first_ms = load_ms(reg);
  std::vector<double> ms;
  for (int i = 0; i < later; ++i) ms.push_back(load_ms(reg));
  l.later_ms = median(ms);
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_heap_tunables(argv);
  // This program is its own vetting child.
  if (argc >= 2 && std::strcmp(argv[1], kVetArg) == 0) return vet_child_main(argc, argv);
  CLI::App app{"what vetting a model file adds to its first and later loads"};
  std::string model;
  int rounds = 8, ctx = 1024, later = 5;
  app.add_option("-m,--model", model, "GGUF file (default: the cached 300 MiB bpe test model)");
  app.add_option("--rounds", rounds, "rounds, each side once a round")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--later", later, "later loads a side makes each round")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--ctx", ctx, "context of the model's batch")->capture_default_str()->check(CLI::Range(16, 1 << 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (model.empty()) model = default_test_model();
    Runtime runtime;
    std::printf("bench-vet: %s, ctx %d, %d rounds (ms: first load, median of %d later loads)\n", model.c_str(), ctx, rounds,
                later);
    std::printf("%-6s %12s %12s %12s %12s %8s %8s\n", "round", "trust first", "vet first", "trust later", "vet later",
                "first x", "later x");
    std::vector<double> first_ratio, later_ratio;
    for (int r = 0; r < rounds; ++r) {
      Loads trust, vet;
      in_turn(r, [&] { trust = measure(model, ctx, later, false); }, [&] { vet = measure(model, ctx, later, true); });
      first_ratio.push_back(vet.first_ms / trust.first_ms);
      later_ratio.push_back(vet.later_ms / trust.later_ms);
      std::printf("%-6d %12.1f %12.1f %12.1f %12.1f %8.3f %8.3f\n", r + 1, trust.first_ms, vet.first_ms, trust.later_ms,
                  vet.later_ms, first_ratio.back(), later_ratio.back());
      std::fflush(stdout);
    }
    auto range = [](const std::vector<double>& v) {
      return std::make_pair(*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
    };
    const auto [f_lo, f_hi] = range(first_ratio);
    const auto [l_lo, l_hi] = range(later_ratio);
    std::printf("first load with vetting: %.3fx (rounds %.3f-%.3f)\n", median(first_ratio), f_lo, f_hi);
    std::printf("later load with vetting: %.3fx (rounds %.3f-%.3f; target <= 1.02)\n", median(later_ratio), l_lo, l_hi);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-vet: error: %s\n", e.what());
    return 2;
  }
}
