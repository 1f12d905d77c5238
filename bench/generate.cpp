// bench/generate: prompt processing and generation speed of reclaim's
// generate() against llama.cpp's own llama-bench, built from the same pinned
// source, on the same model, threads and sizes. Rounds alternate the two so
// that a slow spell of the machine falls on both; each round prints its
// ratios and the last line their medians.
//
//   scripts/bench-generate [-m MODEL] [-p 512] [-n 128] [-t THREADS] [-r 2] [--rounds 6]
//
// What is timed, on each side:
//   pp: decoding a prompt of p random tokens in batches of 512 (llama-bench:
//       its pp test; reclaim: generate()'s prompt phase, tokens given).
//   tg: n decode steps of one token from an empty context (llama-bench: its tg
//       test, which does not sample; reclaim: generate() with greedy sampling
//       over the whole vocabulary, so reclaim's figure includes sampling).

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/child.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/stats.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/llama_runtime.h"
#include "engine/test_model.h"

extern char** environ;

using namespace reclaim;

namespace {

struct Options {
  std::string model, llama_bench = RECLAIM_LLAMA_BENCH;
  int n_prompt = 512, n_gen = 128, threads = 0, reps = 2, rounds = 6, batch = 512;
};

struct Rates {
  double pp = 0, tg = 0;  // tokens per second, mean over the repetitions
};

std::string run_capture(const std::vector<std::string>& args) {
  ChildOptions co;
  co.argv = args;
  co.pass_stderr = true;
  const ChildResult r = run_child(co);
  if (!r.ok()) throw Error(args[0] + " failed (" + r.how_it_ended() + ")");
  return r.out;
}

Rates llama_bench(const Options& o) {
  const std::string out = run_capture({o.llama_bench, "-m", o.model, "-p", std::to_string(o.n_prompt), "-n",
                                       std::to_string(o.n_gen), "-t", std::to_string(o.threads), "-b",
                                       std::to_string(o.batch), "-ub", std::to_string(o.batch), "-r",
                                       std::to_string(o.reps), "-o", "json"});
  Rates r;
  for (const auto& t : nlohmann::json::parse(out)) {
    if (t.value("n_prompt", 0) > 0) r.pp = t.at("avg_ts").get<double>();
    if (t.value("n_gen", 0) > 0) r.tg = t.at("avg_ts").get<double>();
  }
  if (r.pp <= 0 || r.tg <= 0) throw Error("llama-bench printed no pp or tg result: " + out.substr(0, 400));
  return r;
}

std::vector<llama_token> random_tokens(const llama_vocab* vocab, int n, std::mt19937& rng) {
  std::uniform_int_distribution<llama_token> pick(0, llama_vocab_n_tokens(vocab) - 1);
  std::vector<llama_token> t(static_cast<size_t>(n));
  for (llama_token& x : t) x = pick(rng);
  if (llama_vocab_get_add_bos(vocab)) t[0] = llama_vocab_bos(vocab);
  return t;
}

Rates reclaim_bench(Model& model, const Options& o) {
  std::mt19937 rng(42);
  // The contexts llama-bench makes: n_ctx = n_prompt for pp, n_gen for tg.
  SessionOptions so;
  so.n_batch = o.batch;
  so.n_threads = o.threads;
  so.n_ctx = o.n_prompt;
  Session pp_session(model, so);
  so.n_ctx = o.n_gen + 1;
  Session tg_session(model, so);
  GenerateRequest pp;
  pp.max_tokens = 1;
  pp.sampling.temperature = 0;
  GenerateRequest tg = pp;
  tg.max_tokens = o.n_gen + 1;  // n_gen decodes after the first token
  Rates r;
  for (int i = -1; i < o.reps; ++i) {  // -1: warm-up, as llama-bench does
    pp.prompt_tokens = random_tokens(model.vocab(), o.n_prompt, rng);
    GenerateResult a = generate(pp_session, pp);
    tg.prompt_tokens = random_tokens(model.vocab(), 1, rng);
    GenerateResult b = generate(tg_session, tg);
    if (b.timings.generated_tokens != o.n_gen + 1) throw Error("generation stopped early (" + std::string(finish_reason_name(b.finish)) + ")");
    if (i < 0) continue;
    r.pp += o.n_prompt * 1000.0 / a.timings.prompt_ms / o.reps;
    r.tg += o.n_gen * 1000.0 / b.timings.generate_ms / o.reps;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_heap_tunables(argv);
  CLI::App app{"reclaim generate() vs llama-bench: prompt and generation tokens/s"};
  Options o;
  app.add_option("-m,--model", o.model, "GGUF model (default: the cached ~300 MiB bpe test model)");
  app.add_option("-p,--prompt", o.n_prompt, "prompt tokens")->capture_default_str();
  app.add_option("-n,--gen", o.n_gen, "generated tokens")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads (0: all cores)")->capture_default_str();
  app.add_option("-r,--reps", o.reps, "repetitions per round and side")->capture_default_str();
  app.add_option("--rounds", o.rounds, "alternating rounds")->capture_default_str();
  app.add_option("--batch", o.batch, "batch and micro-batch size")->capture_default_str();
  app.add_option("--llama-bench", o.llama_bench, "llama-bench binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (::access(o.llama_bench.c_str(), X_OK) != 0) {
      throw Error("llama-bench not found at '" + o.llama_bench + "': build it with scripts/bench-generate (or RECLAIM_LLAMA_BENCH=1 scripts/setup)");
    }
    Runtime runtime;
    if (o.model.empty()) o.model = default_test_model();
    if (o.threads <= 0) o.threads = default_threads();
    ModelLoad load;
    load.path = o.model;
    load.n_threads = o.threads;
    Model model(load);
    std::printf("model %s, pp%d, tg%d, %d threads, batch %d, %d reps x %d rounds\n", o.model.c_str(), o.n_prompt,
                o.n_gen, o.threads, o.batch, o.reps, o.rounds);
    std::printf("%-6s %14s %14s %8s %14s %14s %8s\n", "round", "llama pp t/s", "reclaim pp t/s", "pp ratio",
                "llama tg t/s", "reclaim tg t/s", "tg ratio");
    std::vector<double> pp_ratios, tg_ratios;
    for (int round = 0; round < o.rounds; ++round) {
      Rates l, r;
      if (round % 2 == 0) {
        l = llama_bench(o);
        r = reclaim_bench(model, o);
      } else {
        r = reclaim_bench(model, o);
        l = llama_bench(o);
      }
      pp_ratios.push_back(r.pp / l.pp);
      tg_ratios.push_back(r.tg / l.tg);
      std::printf("%-6d %14.2f %14.2f %8.3f %14.2f %14.2f %8.3f\n", round, l.pp, r.pp, r.pp / l.pp, l.tg, r.tg,
                  r.tg / l.tg);
      std::fflush(stdout);
    }
    std::printf("median ratio reclaim / llama-bench: pp %.3f, tg %.3f (target >= 0.98 on both)\n", median(pp_ratios),
                median(tg_ratios));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-generate: %s\n", e.what());
    return 2;
  }
  return 0;
}
