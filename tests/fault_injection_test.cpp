// Faults injected, SQLite-style: the Nth malloc, mmap, open or read during a
// model's load, a request, or a conversation's save to the prompt store and
// its return from there fails, once or from then on, for N = 1, 2, ...
// until the operation completes without reaching its Nth call. After each
// failure: a clear error or success, nothing on the ledger, and the process
// figures back at their baseline (tests/faults/trials.cpp checks each in
// process). Where llama.cpp ends the process instead (ggml aborts, or uses
// a null pointer, on a failed allocation in about twenty places), the site
// is counted and listed, and the sweep goes on past it. reclaim cannot
// contain those in the server's own process; in the vetting child they end
// only the child, and the vetter keeps no verdict for a child out of memory.
// A failed save or restore must cost only the reuse: the returning
// conversation's tokens are the ones it gets with nothing cached.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_support.h"
#include "core/child.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

const std::string& tiny_model() {
  // No tokenizer (128 tokens), one layer: a load of about 170 allocations.
  static const std::string path = [] {
    const std::string p = temp_path("fault-model.gguf");
    const Result r = run("make-test-model --out " + p + " --vocab none --embd 64 --layers 1 --type f32 --seed 7");
    EXPECT_EQ(r.status, 0) << r.out;
    return p;
  }();
  return path;
}

struct Sweep {
  long trials = 0, errors = 0, tolerated = 0, calls = 0;
  bool done = false;
  std::map<std::string, int> aborts;  // site -> times
  std::vector<std::string> leaks;     // trials that left something of reclaim's
  std::vector<std::string> wrong;     // trials whose reply differed from the uncached one
  long llama_loader_leaks = 0;        // trials in which llama.cpp's loader lost a handle
};

// llama.cpp's loader loses what it opened when an allocation fails inside
// a constructor that already holds it, one handle a time:
//  - its file: files.emplace_back(new llama_file(...)) in src/llama-model-
//    loader.cpp, and gguf_init_from_file's FILE when its own error path
//    throws again (memory still exhausted);
//  - its mapping: llama_mmap's constructor maps the file, then grows a vector.
// Such a trial leaves exactly one more fd, or one more mapping of the model
// file, and nothing else; reclaim opens nothing during a load but through
// RAII (check_model_file, the /proc probes).
bool llama_loader_leak(const json& j) {
  const json& g = j["grew"];
  const bool one_file = g["fds"] == 1 && g["maps"] == 0;
  const bool one_mapping = g["fds"] == 0 && g["maps"] == 1 && g["model_maps"] == 1;
  return (one_file || one_mapping) && g["threads"] == 0 && g["anon"].get<int64_t>() <= (64 << 10) && j["ledger"] == 0;
}

// The line of an abort's stderr that names its site; for a segfault, the
// first named function of the backtrace after the handler and the signal
// trampoline (libc's and static functions have no name there).
std::string abort_site(const std::string& err) {
  std::istringstream in(err);
  std::string site;
  int segv_frame = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.find("GGML_ASSERT") != std::string::npos || line.find("fatal error") != std::string::npos ||
        line.find("terminate called") != std::string::npos) {
      site = line;
    }
    if (line == "fault-trials: SIGSEGV at") {
      segv_frame = 0;
      continue;
    }
    if (segv_frame < 0 || ++segv_frame < 3 || line.find("libc.so") != std::string::npos) continue;
    const size_t open = line.find('('), plus = line.find('+', open);
    if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
      site = "SIGSEGV in " + line.substr(open + 1, plus - open - 1);
      segv_frame = -1;
    }
  }
  if (site.empty()) return "(no message) " + err.substr(err.size() > 300 ? err.size() - 300 : 0);
  // The source tree's path prefix says nothing.
  const size_t at = site.find("/src/llama.cpp-");
  if (at != std::string::npos) site = site.substr(site.find('/', at + 15) + 1);
  return site;
}

// "load-no-arena": the load with reclaim's arenas off, so that C++ `new`
// inside the load is malloc too (in an arena it cannot fail but by mmap).
Sweep sweep(const std::string& op, const std::string& kind, const std::string& mode) {
  Sweep s;
  long n = 1;
  for (int starts = 0; !s.done && starts < 2000; ++starts) {
    reclaim::ChildOptions co;
    co.argv = {FAULT_TRIALS, tiny_model(), op == "load-no-arena" ? "load" : op, kind, mode, std::to_string(n)};
    if (op == "load-no-arena") co.env_add.push_back("RECLAIM_LOAD_ARENA=0");
    co.env_add.push_back(std::string("LD_PRELOAD=") + FAULT_LIB);
    co.env_add.push_back("GGML_NO_BACKTRACE=1");  // ggml would attach gdb to print one
    co.timeout = std::chrono::seconds(120);
    const reclaim::ChildResult r = reclaim::run_child(co);
    long last = n - 1;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      const json j = json::parse(line);
      last = j["n"].get<long>();
      ++s.trials;
      s.calls = std::max(s.calls, j["calls"].get<long>());
      if (j["outcome"].get<std::string>().rfind("wrong tokens", 0) == 0) s.wrong.push_back(line);
      if (j.contains("done")) {
        s.done = true;
      } else if (j["outcome"] == "done") {
        ++s.tolerated;
      } else {
        ++s.errors;
      }
      const json& g = j["grew"];
      if (llama_loader_leak(j)) {
        ++s.llama_loader_leaks;
      } else if (j["ledger"] != 0 || g["fds"] != 0 || g["threads"] != 0 || g["maps"] != 0 || g["anon"].get<int64_t>() > (1 << 20)) {
        s.leaks.push_back(line);
      }
    }
    if (s.done) break;
    if (r.signal == 0) {
      ADD_FAILURE() << op << " " << kind << " " << mode << ": fault-trials " << r.how_it_ended() << "\n" << r.err;
      break;
    }
    // Trial last + 1 ended the process; the next start goes on past it.
    s.aborts[abort_site(r.err)]++;
    n = last + 2;
  }
  return s;
}

class FaultInjection : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(FaultInjection, EachFailureIsAnErrorOrSuccessAndLeavesNothing) {
  const auto& [op, kind, mode] = GetParam();
  const Sweep s = sweep(op, kind, mode);
  EXPECT_TRUE(s.done) << "the sweep did not reach a run that completes";
  EXPECT_TRUE(s.leaks.empty()) << s.leaks.size() << " trials left something, the first:\n" << s.leaks.front();
  EXPECT_TRUE(s.wrong.empty()) << s.wrong.size() << " trials generated other tokens, the first:\n" << s.wrong.front();
  // Every abort is llama.cpp's or ggml's own: a GGML_ASSERT or GGML_ABORT in
  // their sources, or a segfault in a ggml or llama function. An exception
  // escaping reclaim would say "terminate".
  for (const auto& [site, times] : s.aborts) {
    EXPECT_EQ(site.find("terminate called"), std::string::npos) << site;
    const bool theirs = site.rfind("ggml/", 0) == 0 || site.rfind("src/", 0) == 0 || site.rfind("SIGSEGV in ggml", 0) == 0 ||
                        site.rfind("SIGSEGV in _ZN11llama", 0) == 0 || site.rfind("SIGSEGV in llama", 0) == 0;
    EXPECT_TRUE(theirs) << site;
  }
  std::printf("%s %s %s: %ld trials (up to %ld calls), %ld errors, %ld completed despite the fault, "
              "%ld in which llama.cpp's loader lost a handle, %zu abort sites:\n",
              op.c_str(), kind.c_str(), mode.c_str(), s.trials, s.calls, s.errors, s.tolerated, s.llama_loader_leaks,
              s.aborts.size());
  for (const auto& [site, times] : s.aborts) std::printf("  %3d x %s\n", times, site.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    LoadAndRequest, FaultInjection,
    ::testing::Combine(::testing::Values("load", "load-no-arena", "request", "restore"), ::testing::Values("malloc", "mmap", "open", "read"),
                       ::testing::Values("once", "persistent")),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" + std::get<2>(info.param);
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

}  // namespace
