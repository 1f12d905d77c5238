// Process-wide start-up of llama.cpp and ggml, done once and measured.
//
// The audit's baseline is taken after this, so the one-time state it warms is
// named and sized here rather than showing up as a leak of the first load.
#pragma once

#include <memory>
#include <string>

#include "core/scope.h"
#include "core/usage.h"

namespace reclaim {

struct RuntimeOptions {
  bool verbose = false;  // pass llama.cpp's info/warning log through to stderr
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Usage just before and just after start-up.
  const Usage& before() const { return before_; }
  const Usage& after() const { return after_; }
  // What start-up warmed, in words, for reports.
  std::string warmed() const;

 private:
  Usage before_, after_;
  // Where an accelerator is: its runtime state on the ledger (see
  // note_runtime_idle), owned by the process until exit.
  std::unique_ptr<Scope> scope_;
};

// Where an accelerator is, the ledger holds one entry "device_state" under
// "runtime": the driver's state and the shader pipelines a backend compiles
// the first time a graph needs them and keeps until the process exits
// (docs/devices.md). Nothing can give them back but the exit, so they are
// shown rather than counted as a leak. Its bytes are the heap that start-up
// took for the device, plus the most the heap has held, at a moment when no
// model was loaded, beyond what it held at the first call. The registry
// calls it once it is built and whenever its last loaded model is gone.
void note_runtime_idle();

// Fills glibc's cache of thread stacks (40 MiB, about 5 default stacks), so
// that worker threads started and joined later reuse cached stacks rather
// than map new ones that the cache then keeps. Runtime does it at start-up; a
// program that starts long-lived threads of its own (a server) does it again
// after them. Returns the threads it started and joined.
int warm_thread_stack_cache();

// Where ggml's backends are loaded from at start-up: the prebuilt libraries'
// folder (RECLAIM_GGML_BACKEND_DIR overrides it), or empty where the backends
// are linked into the program.
std::string backend_dir();

// llama.cpp's error lines logged on this thread since the last call, joined;
// load failures are reported with them, since llama returns only NULL.
std::string take_llama_errors();

}  // namespace reclaim
