#include "audit/audit.h"

#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "core/defer.h"
#include "core/error.h"
#include "core/heap.h"

extern char** environ;

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

namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error(std::string("cannot find this program's path: ") + std::strerror(errno));
  buf[n] = '\0';
  return buf;
}

}  // namespace

SideResult run_side_in_child(const std::string& side, const CycleOptions& o) {
  std::string exe = self_exe();
  std::string args = to_json(o).dump();
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  Defer close_read([&] { ::close(pipefd[0]); });
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  Defer destroy_actions([&] { posix_spawn_file_actions_destroy(&actions); });
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  std::string arg0 = "reclaim", arg1 = "__audit-side";
  std::string side_arg = side;
  char* argv[] = {arg0.data(), arg1.data(), side_arg.data(), args.data(), nullptr};
  // The raw side runs in the environment this program was started with,
  // without the allocator tunables that reclaim sets for itself, and with
  // ggml's own buffers (engine/ggml_buffers.cpp is linked into this binary).
  std::vector<std::string> env_store;
  std::vector<char*> env;
  if (side == "raw") {
    env_store = original_environment();
    std::erase_if(env_store, [](const std::string& e) { return e.rfind("RECLAIM_HUGE_BUFFERS=", 0) == 0; });
    env_store.push_back("RECLAIM_HUGE_BUFFERS=0");
    for (std::string& e : env_store) env.push_back(e.data());
    env.push_back(nullptr);
  }
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, side == "raw" ? env.data() : environ);
  ::close(pipefd[1]);
  if (rc != 0) throw Error("cannot start the " + side + " side: " + std::strerror(rc));
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    throw Error("the " + side + " side of " + scenario_name(o.scenario) + " died of signal " +
                std::to_string(WTERMSIG(status)));
  }
  if (WEXITSTATUS(status) != 0) {
    throw Error("the " + side + " side of " + scenario_name(o.scenario) + " failed (exit " +
                std::to_string(WEXITSTATUS(status)) + ")");
  }
  try {
    return side_result_from_json(nlohmann::json::parse(out));
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
    SideResult r = side == "raw" ? run_raw_cycles(o) : run_reclaim_cycles(o);
    std::cout << to_json(r).dump() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reclaim: %s side: %s\n", side.c_str(), e.what());
    return 2;
  }
}

}  // namespace reclaim::audit
