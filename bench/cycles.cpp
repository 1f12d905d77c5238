// bench/cycles: per-cycle wall time and residue of reclaim vs raw llama.cpp,
// each side in its own child process, measured side by side in one run and
// printed as ratios. Rounds alternate the sides so that a slow spell of the
// machine falls on both, and the ratio is the median of the rounds' own
// ratios: on this VM the machine's speed swings by a third within minutes,
// and a spell that covers one side's child but not the other's moves only
// its round, not the median.
//
//   build/bin/bench-cycles [-m MODEL] [--cycles 10] [--rounds 8] [--load-mode mmap]
//                          [--scenario all|load-free|...]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "audit/audit.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/size.h"
#include "core/stats.h"
#include "engine/test_model.h"
#include "engine/vet.h"

using namespace reclaim;
using namespace reclaim::audit;

namespace {

struct SideStats {
  std::vector<double> seconds;  // every cycle but each child's first (cold caches)
  std::vector<double> faults;
  int64_t worst_anon_residue = INT64_MIN;
  int64_t anon_growth = 0;
};

// The median cycle of one child, for the round's own ratio.
double add(SideStats& s, const SideResult& r) {
  std::vector<double> round;
  for (size_t i = 1; i < r.cycles.size(); ++i) {
    round.push_back(r.cycles[i].seconds);
    s.seconds.push_back(r.cycles[i].seconds);
    s.faults.push_back(static_cast<double>(r.cycles[i].minor_faults));
  }
  for (size_t i = 0; i < r.cycles.size(); ++i) s.worst_anon_residue = std::max(s.worst_anon_residue, residue(r, i).anon);
  s.anon_growth = std::max(s.anon_growth, residue(r, r.cycles.size() - 1).anon - residue(r, 0).anon);
  return median(round);
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_heap_tunables(argv);
  if (argc == 4 && std::string(argv[1]) == "__audit-side") return audit_side_main(argv[2], argv[3]);
  // The serve-* scenarios' vetter runs this program as its child, as serve runs reclaim.
  if (argc >= 2 && std::string(argv[1]) == kVetArg) return vet_child_main(argc, argv);
  CLI::App app{"reclaim vs raw llama.cpp: load/use/free cycle time and residue"};
  std::string model, load_mode = "mmap", scenario = "all";
  int cycles = 10, rounds = 8;
  app.add_option("-m,--model", model, "GGUF model (default: the cached ~300 MiB bpe test model)");
  // Each child's first cycle is not timed, and a round's ratio needs a timed one.
  app.add_option("--cycles", cycles, "cycles per child process")->capture_default_str()->check(CLI::Range(2, 100000));
  app.add_option("--rounds", rounds, "alternating rounds of both sides")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--load-mode", load_mode)->capture_default_str();
  app.add_option("--scenario", scenario, "one scenario, or all")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    CycleOptions o;
    o.model = model.empty() ? default_test_model() : model;
    o.cycles = cycles;
    o.load_mode = load_mode;
    std::printf("model %s, load mode %s, %d cycles x %d rounds per side and scenario\n", o.model.c_str(),
                load_mode.c_str(), cycles, rounds);
    std::printf("%-18s %10s %11s %7s %7s %13s %11s %14s %13s %16s %11s %14s\n", "scenario", "raw ms", "reclaim ms",
                "ratio", "pooled", "round ratios", "raw faults", "reclaim faults", "raw residue", "reclaim residue", "raw growth", "reclaim growth");
    std::fflush(stdout);
    for (Scenario sc : kAllScenarios) {
      if (scenario != "all" && scenario_from_name(scenario) != sc) continue;
      o.scenario = sc;
      SideStats raw, rec;
      // Each round's own ratio, of two children run back to back.
      std::vector<double> ratios;
      for (int r = 0; r < rounds; ++r) {
        double mr, mc;
        // Alternate which side goes first.
        if (r % 2 == 0) {
          mr = add(raw, run_side_in_child("raw", o));
          mc = add(rec, run_side_in_child("reclaim", o));
        } else {
          mc = add(rec, run_side_in_child("reclaim", o));
          mr = add(raw, run_side_in_child("raw", o));
        }
        ratios.push_back(mr > 0 ? mc / mr : 0.0);
      }
      const double mr = median(raw.seconds) * 1e3, mc = median(rec.seconds) * 1e3;
      char spread[32];
      std::snprintf(spread, sizeof spread, "%.3f-%.3f", *std::min_element(ratios.begin(), ratios.end()),
                    *std::max_element(ratios.begin(), ratios.end()));
      std::printf("%-18s %10.1f %11.1f %7.3f %7.3f %13s %11.0f %14.0f %13s %16s %11s %14s\n", scenario_name(sc), mr,
                  mc, median(ratios), mr > 0 ? mc / mr : 0.0, spread, median(raw.faults), median(rec.faults),
                  format_bytes(raw.worst_anon_residue).c_str(), format_bytes(rec.worst_anon_residue).c_str(),
                  format_bytes(raw.anon_growth).c_str(), format_bytes(rec.anon_growth).c_str());
      std::fflush(stdout);  // a full run takes a quarter of an hour: each row as it is measured
    }
    std::printf("ratio = median over the rounds of reclaim / raw median cycle time (target <= 1.05); pooled = "
                "the median of all reclaim cycles / that of all raw ones; round ratios = the lowest and highest of "
                "one round; ms = median cycle time; faults = median minor page faults a cycle; "
                "residue = worst anon RSS residue of a cycle (target <= 1 MiB for reclaim)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-cycles: %s\n", e.what());
    return 2;
  }
  return 0;
}
