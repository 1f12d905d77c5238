// `reclaim audit`: runs each scenario's cycles in a child process per side
// (so that one side's heap cannot hide the other's), checks the reclaim
// side's residues against thresholds, and reports both.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "audit/cycles.h"
#include "core/thresholds.h"

namespace reclaim::audit {

using reclaim::Thresholds;

struct AuditOptions {
  CycleOptions cycle;  // scenario is set per run
  std::vector<Scenario> scenarios;
  bool compare_raw = false;
  Thresholds limits;
};

struct Check {
  std::string name;  // "anon residue", "ledger", ...
  int64_t value = 0;
  int64_t limit = 0;
  bool bytes = true;
  bool ok = true;
};

struct ScenarioReport {
  Scenario scenario = Scenario::load_free;
  SideResult reclaim;
  std::optional<SideResult> raw;
  std::vector<Check> checks;
  bool ok = true;
};

struct AuditReport {
  AuditOptions options;
  std::vector<ScenarioReport> scenarios;
  bool ok = true;
};

// residue of cycle i = after_i - baseline
Usage residue(const SideResult& r, size_t cycle);

// One figure between requests, worst over the cycles: residue = after a
// request minus just after the load (minus after the first request, with
// the batch's context of the serve path); growth = after the last request
// minus after the first.
struct RequestFigures {
  bool present = false;  // the scenario has requests
  int64_t residue = 0, growth = 0;
};
RequestFigures request_figures(const SideResult& r, int64_t Usage::*field);
std::vector<Check> evaluate(const SideResult& r, const Thresholds& limits);

SideResult run_side_in_child(const std::string& side, const CycleOptions& o);
AuditReport run_audit(const AuditOptions& options);

// Entry of the child process: runs one side and prints its JSON on stdout.
int audit_side_main(const std::string& side, const std::string& options_json);

}  // namespace reclaim::audit
