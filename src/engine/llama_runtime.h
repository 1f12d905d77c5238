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
  // Where an accelerator is: its runtime state on the ledger, an entry that
  // comes and goes with the state (engine/device_life.h).
  std::unique_ptr<Scope> scope_;
};

// Fills glibc's cache of thread stacks (40 MiB, about 5 default stacks), so
// that worker threads started and joined later reuse cached stacks rather
// than map new ones that the cache then keeps. Runtime does it at start-up; a
// program that starts long-lived threads of its own (a server) does it again
// after them. Returns the threads it started and joined.
int warm_thread_stack_cache();

// llama.cpp's error lines logged on this thread since the last call, joined;
// load failures are reported with them, since llama returns only NULL.
std::string take_llama_errors();

}  // namespace reclaim
