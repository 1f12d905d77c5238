#include "audit/audit.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "core/child.h"
#include "core/defer.h"
#include "core/error.h"
#include "core/heap.h"

namespace reclaim::audit {

Usage residue(const SideResult& r, size_t cycle) { return r.cycles.at(cycle).after - r.baseline; }

RequestFigures request_figures(const SideResult& r, int64_t Usage::*field) {
  RequestFigures f;
  for (const CycleRecord& c : r.cycles) {
    if (c.requests.empty()) continue;
    f.present = true;
    const Usage& base = r.requests_from_first ? c.requests.front() : c.loaded;
    for (const Usage& u : c.requests) f.residue = std::max(f.residue, u.*field - base.*field);
    f.growth = std::max(f.growth, c.requests.back().*field - c.requests.front().*field);
  }
  return f;
}

namespace {

// Between requests, with the model still loaded: what a request leaves
// behind (against the model just loaded) and whether it accumulates.
template <class Add>
void add_request_checks(const SideResult& r, const Thresholds& limits, Add& add) {
  if (!request_figures(r, &Usage::anon).present) return;
  add("request anon residue", request_figures(r, &Usage::anon).residue, limits.anon_residue, true);
  add("request anon growth", request_figures(r, &Usage::anon).growth, limits.anon_growth, true);
  add("request fds residue", request_figures(r, &Usage::fds).residue, limits.fds, false);
  add("request threads residue", request_figures(r, &Usage::threads).residue, limits.threads, false);
  add("request maps residue", request_figures(r, &Usage::maps).residue, limits.maps, false);
  add("request device residue", request_figures(r, &Usage::device_used).residue, limits.device, true);
}

}  // namespace

std::vector<Check> evaluate(const SideResult& r, const Thresholds& limits) {
  std::vector<Check> checks;
  if (r.cycles.empty()) return checks;
  auto worst = [&](int64_t Usage::*field) {
    int64_t m = LLONG_MIN;
    for (size_t i = 0; i < r.cycles.size(); ++i) m = std::max(m, residue(r, i).*field);
    return m;
  };
  auto add = [&](std::string name, int64_t value, int64_t limit, bool bytes) {
    checks.push_back({std::move(name), value, limit, bytes, value <= limit});
  };
  add("anon residue", worst(&Usage::anon), limits.anon_residue, true);
  add("anon growth", residue(r, r.cycles.size() - 1).anon - residue(r, 0).anon, limits.anon_growth, true);
  // What was anon and was pushed out to swap is still held: judged together,
  // a leak under memory pressure still shows.
  int64_t private_worst = LLONG_MIN;
  for (size_t i = 0; i < r.cycles.size(); ++i) private_worst = std::max(private_worst, residue(r, i).anon + residue(r, i).swap);
  const Usage first = residue(r, 0), last = residue(r, r.cycles.size() - 1);
  add("anon+swap residue", private_worst, limits.anon_residue, true);
  add("anon+swap growth", (last.anon + last.swap) - (first.anon + first.swap), limits.anon_growth, true);
  add("locked residue", worst(&Usage::locked), limits.locked, true);
  add("fds residue", worst(&Usage::fds), limits.fds, false);
  add("threads residue", worst(&Usage::threads), limits.threads, false);
  add("maps residue", worst(&Usage::maps), limits.maps, false);
  add("device residue", worst(&Usage::device_used), limits.device, true);
  add_request_checks(r, limits, add);
  uint64_t live = 0;
  for (const CycleRecord& c : r.cycles) live = std::max(live, c.ledger_live);
  add("ledger entries", static_cast<int64_t>(live), 0, false);
  add("failed releases", static_cast<int64_t>(r.failed_releases), 0, false);
  return checks;
}

SideResult run_side_in_child(const std::string& side, const CycleOptions& o) {
  ChildOptions co;
  co.argv = {self_exe(), "__audit-side", side, to_json(o).dump()};
  // The raw side runs in the environment this program was started with,
  // without the allocator tunables that reclaim sets for itself, and with
  // ggml's own buffers (engine/ggml_buffers.cpp is linked into this binary).
  if (side == "raw") {
    co.env = original_environment();
    std::erase_if(co.env, [](const std::string& e) { return e.rfind("RECLAIM_HUGE_BUFFERS=", 0) == 0; });
    co.env.push_back("RECLAIM_HUGE_BUFFERS=0");
  }
  co.pass_stderr = true;  // the side's own notes and errors are the user's
  const ChildResult c = run_child(co);
  if (c.signal != 0) {
    throw Error("the " + side + " side of " + scenario_name(o.scenario) + " died of signal " + std::to_string(c.signal));
  }
  if (c.exit_code != 0) {
    throw Error("the " + side + " side of " + scenario_name(o.scenario) + " failed (exit " + std::to_string(c.exit_code) + ")");
  }
  try {
    return side_result_from_json(nlohmann::json::parse(c.out));
  } catch (const nlohmann::json::exception& e) {
    throw Error("the " + side + " side sent a result that is not valid JSON: " + e.what());
  }
}

AuditReport run_audit(const AuditOptions& options) {
  AuditReport report;
  report.options = options;
  for (Scenario s : options.scenarios) {
    CycleOptions o = options.cycle;
    o.scenario = s;
    ScenarioReport sr;
    sr.scenario = s;
    if (options.compare_raw) {
      CycleOptions raw = o;
      raw.test_leak.clear();
      sr.raw = run_side_in_child("raw", raw);
    }
    sr.reclaim = run_side_in_child("reclaim", o);
    sr.checks = evaluate(sr.reclaim, options.limits);
    sr.ok = std::all_of(sr.checks.begin(), sr.checks.end(), [](const Check& c) { return c.ok; });
    report.ok = report.ok && sr.ok;
    report.scenarios.push_back(std::move(sr));
  }
  return report;
}

int audit_side_main(const std::string& side, const std::string& options_json) {
  try {
    CycleOptions o = cycle_options_from_json(nlohmann::json::parse(options_json));
    SideResult r = side == "raw" ? (is_serve(o.scenario) ? run_raw_serve_cycles(o) : run_raw_cycles(o))
                                 : (is_serve(o.scenario) ? run_reclaim_serve_cycles(o) : run_reclaim_cycles(o));
    std::cout << to_json(r).dump() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reclaim: %s side: %s\n", side.c_str(), e.what());
    return 2;
  }
}

}  // namespace reclaim::audit
