// fault-trials: runs one operation again and again in this process with the
// Nth call of a kind failing (libreclaim-faults.so, preloaded), for N from
// --from up, and after each says on one JSON line what happened and what was
// left: the outcome (done, or the error), the ledger, and the process
// figures against the baseline. It stops once an operation completes
// without reaching its Nth call ({"done": true}). An abort ends it: its
// driver (tests/fault_injection_test.cpp) notes where and starts it again
// past that N.
//
//   LD_PRELOAD=libreclaim-faults.so fault-trials MODEL load|request malloc|mmap|open|read once|persistent FROM [TO]
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/heap.h"
#include "core/ledger.h"
#include "core/usage.h"
#include "engine/batcher.h"
#include "engine/model.h"
#include "engine/runtime.h"

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

void request_op(Model& m) {
  GenerateRequest g;
  g.prompt_tokens = {1, 2, 3, 4};
  g.max_tokens = 3;
  g.sampling.temperature = 0;
  (void)m.batcher()->generate(g);
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
    std::fprintf(stderr, "usage: %s MODEL load|request malloc|mmap|open|read once|persistent FROM [TO]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1], op = argv[2];
  const int kinds = kind_mask(argv[3]);
  const bool persistent = std::strcmp(argv[4], "persistent") == 0;
  const long from = std::atol(argv[5]), to = argc == 7 ? std::atol(argv[6]) : 1L << 40;
  auto arm = reinterpret_cast<ArmFn>(dlsym(RTLD_DEFAULT, "reclaim_fault_arm"));
  auto disarm = reinterpret_cast<DisarmFn>(dlsym(RTLD_DEFAULT, "reclaim_fault_disarm"));
  if (!arm || !disarm || kinds == 0 || (op != "load" && op != "request")) {
    std::fprintf(stderr, "fault-trials: bad arguments, or libreclaim-faults.so is not preloaded\n");
    return 2;
  }
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads libgcc now, not in the handler
  ::signal(SIGSEGV, on_segv);
  Runtime runtime;
  std::unique_ptr<Model> loaded;
  auto run = [&] {
    if (op == "load") {
      load_op(path);
    } else {
      request_op(*loaded);
    }
  };
  if (op == "request") {
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
