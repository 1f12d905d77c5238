// fault-trials: runs one operation again and again in this process with the
// Nth call of a kind failing (libreclaim-faults.so, preloaded), for N from
// --from up, and after each says on one JSON line what happened and what was
// left: the outcome (done, or the error), the ledger, and the process
// figures against the baseline. It stops once an operation completes
// without reaching its Nth call ({"done": true}). An abort ends it: its
// driver (tests/fault_injection_test.cpp) notes where and starts it again
// past that N.
//
//   LD_PRELOAD=libreclaim-faults.so fault-trials MODEL load|request|restore malloc|mmap|open|read once|persistent FROM [TO]
//
// "restore": two conversations on one sequence, so that the second's arrival
// saves the first's cells to the prompt store and the first's return puts
// them back. A failed save or restore may cost the reuse but never the
// tokens: the returning conversation must generate what it did with nothing
// cached, else the trial's outcome starts with "wrong tokens".
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/defer.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "core/usage.h"
#include "engine/batcher.h"
#include "engine/model.h"
#include "engine/llama_runtime.h"

using namespace reclaim;

namespace {

using ArmFn = void (*)(int, long, int);
using DisarmFn = long (*)(long*);

int kind_mask(const std::string& k) {
  if (k == "malloc") return 1;
  if (k == "mmap") return 2;
  if (k == "open") return 4;
  if (k == "read") return 8;
  return 0;
}

BatcherOptions batching() {
  BatcherOptions b;
  b.n_seq = 1;
  b.session.n_ctx = 64;
  b.session.n_batch = 16;
  b.cache_ram = 16 << 20;  // room for the restore op's saves
  return b;
}

// A model's load, its batch and one short request, as the server does them.
void load_op(const std::string& path) {
  ModelLoad load;
  load.path = path;
  load.n_threads = 1;
  Model m(load);
  m.start_batcher(batching());
}

std::vector<llama_token> generate(Model& m, std::vector<llama_token> prompt) {
  GenerateRequest g;
  g.prompt_tokens = std::move(prompt);
  g.max_tokens = 3;
  g.sampling.temperature = 0;
  return m.batcher()->generate(g).tokens;
}

void request_op(Model& m) { (void)generate(m, {1, 2, 3, 4}); }

// Returns what the returning conversation generated. Ends as it began, with
// the sequence holding the first conversation and the store empty, so that
// every trial starts alike and leaves no save on the ledger.
std::vector<llama_token> restore_op(Model& m) {
  const std::vector<llama_token> first = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  // Whichever way it ends: a request that failed leaves its save on the
  // ledger, accounted, until dropped.
  Defer drop([&] { m.batcher()->drop_saved(); });
  (void)generate(m, {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31});  // saves the first
  return generate(m, first);                                               // restores it
}

// A segfault (ggml uses some allocations without checking them) names the
// function it happened in, for the driver's list of sites: "SIGSEGV at"
// and then the frames, the handler's own first.
void on_segv(int sig) {
  static const char head[] = "fault-trials: SIGSEGV at\n";
  (void)!::write(STDERR_FILENO, head, sizeof head - 1);
  void* frames[8];
  const int n = ::backtrace(frames, 8);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6 || argc > 7) {
    std::fprintf(stderr, "usage: %s MODEL load|request|restore malloc|mmap|open|read once|persistent FROM [TO]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1], op = argv[2];
  const int kinds = kind_mask(argv[3]);
  const bool persistent = std::strcmp(argv[4], "persistent") == 0;
  const long from = std::atol(argv[5]), to = argc == 7 ? std::atol(argv[6]) : 1L << 40;
  auto arm = reinterpret_cast<ArmFn>(dlsym(RTLD_DEFAULT, "reclaim_fault_arm"));
  auto disarm = reinterpret_cast<DisarmFn>(dlsym(RTLD_DEFAULT, "reclaim_fault_disarm"));
  if (!arm || !disarm || kinds == 0 || (op != "load" && op != "request" && op != "restore")) {
    std::fprintf(stderr, "fault-trials: bad arguments, or libreclaim-faults.so is not preloaded\n");
    return 2;
  }
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads libgcc now, not in the handler
  ::signal(SIGSEGV, on_segv);
  Runtime runtime;
  std::unique_ptr<Model> loaded;
  // The returning conversation's tokens with nothing cached: the first,
  // unarmed run's (the sequence and the store are empty then).
  std::vector<llama_token> expected;
  auto run = [&] {
    if (op == "load") {
      load_op(path);
    } else if (op == "request") {
      request_op(*loaded);
    } else {
      const std::vector<llama_token> got = restore_op(*loaded);
      if (expected.empty()) expected = got;
      if (got != expected) throw std::runtime_error("wrong tokens: the returning conversation generated others");
    }
  };
  if (op != "load") {
    ModelLoad load;
    load.path = path;
    load.n_threads = 1;
    loaded = std::make_unique<Model>(load);
    loaded->start_batcher(batching());
  }
  // One whole run first, unarmed: what it makes once for the process (the
  // CPU buffer types, a thread's stack) is in the baseline, not a residue.
  run();
  release_free_heap();
  const Usage base = Usage::capture();
  Usage prev = base;
  const uint64_t ledger_base = Ledger::process().totals().count;
  for (long n = from; n <= to; ++n) {
    std::string outcome = "done";
    arm(kinds, n, persistent ? 1 : 0);
    try {
      run();
    } catch (const std::exception& e) {
      outcome = e.what();
    }
    long failed = 0;
    const long calls = disarm(&failed);
    release_free_heap();
    const Usage now = Usage::capture();
    const Usage d = now - base, grew = now - prev;
    prev = now;
    nlohmann::json line = {{"n", n},
                           {"calls", calls},
                           {"failed", failed},
                           {"outcome", outcome},
                           {"ledger", static_cast<int64_t>(Ledger::process().totals().count - ledger_base)},
                           {"anon", d.anon},
                           {"fds", d.fds},
                           {"threads", d.threads},
                           {"maps", d.maps},
                           // this trial's own: the figures above add up the earlier ones'
                           {"grew",
                            {{"anon", grew.anon},
                             {"fds", grew.fds},
                             {"threads", grew.threads},
                             {"maps", grew.maps},
                             {"model_maps", grew.model_maps}}}};
    if (failed == 0) line["done"] = true;
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    if (failed == 0) break;
  }
  return 0;
}
