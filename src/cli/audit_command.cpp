#include <cstdio>
#include <fstream>

#include "audit/audit.h"
#include "audit/report.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/size.h"
#include "engine/owners.h"
#include "engine/test_model.h"

namespace reclaim::cli {

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot write '" + path + "'");
  f << text;
  if (!f.flush()) throw Error("cannot write '" + path + "'");
}

}  // namespace

Command add_audit(CLI::App& app) {
  auto* sub = app.add_subcommand("audit", "load/use/free cycles that measure what was not given back");
  struct Args {
    std::string model, scenario = "all", load_mode = "mmap", json, plot, test_leak;
    int cycles = 3, n_ctx = 256, n_generate = 16, threads = 0;
    bool compare_raw = false;
    std::string max_anon = "1MiB", max_growth = "64KiB", max_locked = "0", max_device = "0";
    int64_t max_fds = 0, max_threads = 0, max_maps = 0;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("-m,--model", a->model, "GGUF model (default: the cached ~300 MiB bpe test model)");
  sub->add_option("--cycles", a->cycles, "cycles per scenario")->capture_default_str()->check(CLI::Range(1, 100000));
  sub->add_option("--scenario", a->scenario, "load-free, load-prompt-free, load-abort or all")->capture_default_str();
  sub->add_option("--load-mode", a->load_mode, "mmap, none, mlock or mmap-mlock")->capture_default_str();
  sub->add_flag("--compare-raw", a->compare_raw, "also run the cycles as plain llama.cpp calls, side by side");
  sub->add_option("--json", a->json, "write the full report as JSON");
  sub->add_option("--plot", a->plot, "write RSS/anon over time as SVG");
  sub->add_option("--ctx", a->n_ctx, "context size for load-prompt-free")->capture_default_str();
  sub->add_option("--generate", a->n_generate, "tokens generated in load-prompt-free")->capture_default_str();
  sub->add_option("--threads", a->threads, "decode threads (0: all cores)")->capture_default_str();
  sub->add_option("--max-anon-residue", a->max_anon, "threshold")->capture_default_str();
  sub->add_option("--max-anon-growth", a->max_growth, "threshold over all cycles")->capture_default_str();
  sub->add_option("--max-locked", a->max_locked, "threshold")->capture_default_str();
  sub->add_option("--max-device", a->max_device, "threshold")->capture_default_str();
  sub->add_option("--max-fds", a->max_fds, "threshold")->capture_default_str();
  sub->add_option("--max-threads", a->max_threads, "threshold")->capture_default_str();
  sub->add_option("--max-maps", a->max_maps, "threshold")->capture_default_str();
  // Test-only: proves that the audit can fail. Not in --help.
  sub->add_option("--test-leak", a->test_leak)->group("");
  return [a] {
    audit::AuditOptions o;
    o.cycle.model = a->model.empty() ? default_test_model() : a->model;
    check_model_file(o.cycle.model);
    load_mode_from_name(a->load_mode);
    o.cycle.load_mode = a->load_mode;
    o.cycle.cycles = a->cycles;
    o.cycle.n_ctx = a->n_ctx;
    o.cycle.n_generate = a->n_generate;
    o.cycle.n_threads = a->threads;
    o.cycle.test_leak = a->test_leak;
    if (a->scenario == "all") {
      o.scenarios.assign(std::begin(audit::kAllScenarios), std::end(audit::kAllScenarios));
    } else {
      o.scenarios.push_back(audit::scenario_from_name(a->scenario));
    }
    o.compare_raw = a->compare_raw;
    o.limits.anon_residue = parse_size(a->max_anon);
    o.limits.anon_growth = parse_size(a->max_growth);
    o.limits.locked = parse_size(a->max_locked);
    o.limits.device = parse_size(a->max_device);
    o.limits.fds = a->max_fds;
    o.limits.threads = a->max_threads;
    o.limits.maps = a->max_maps;

    audit::AuditReport report = audit::run_audit(o);
    std::fputs(audit::render_table(report).c_str(), stdout);
    if (!a->json.empty()) write_file(a->json, audit::report_json(report).dump(2) + "\n");
    if (!a->plot.empty()) write_file(a->plot, audit::render_svg(report));
    return report.ok ? 0 : 1;
  };
}

}  // namespace reclaim::cli
