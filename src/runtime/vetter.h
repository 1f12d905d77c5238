// The parent's side of vetting (engine/vet.h): runs the vetting child for a
// file the first time it is asked for, keeps the verdict for as long as the
// file stays the same (core/file_identity.h), and vets files in the
// background so that a model's first request finds its verdict ready.
//
// Why a child process and not only checks: llama.cpp ends the process on a
// GGML_ASSERT, and the asserts a damaged file can reach are spread over the
// loader, the graph and the CPU kernels. reclaim's metadata checks name the
// ones known; the child contains the rest, whatever they are. Its cost is
// paid once per file, not per load: bench/vet measures both.
//
// One child runs at a time; a request waiting for a verdict goes before the
// background queue.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/scope.h"
#include "engine/gguf_check.h"
#include "engine/vet.h"

namespace reclaim {

struct VetterOptions {
  // The vetting program and its arguments before the request:
  // Vetter::this_program() in a program that calls vet_child_main.
  std::vector<std::string> program;
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  bool log = false;  // a line on stderr for each verdict (also RECLAIM_LOG=models)
};

struct VetterCounts {
  uint64_t children = 0;  // vetting processes run
  uint64_t cached = 0;    // verdicts given from the cache
  uint64_t refused = 0;   // files found unfit (each once)
  double last_ms = 0;     // the last child's time, start to verdict
};

class Vetter {
 public:
  explicit Vetter(VetterOptions options);
  ~Vetter();  // stops the background queue and kills a child that runs
  Vetter(const Vetter&) = delete;
  Vetter& operator=(const Vetter&) = delete;

  // The verdict for `request`'s file as it is now. Throws InvalidModelFile
  // when the file is unfit (also from the cache, at no cost), Error when the
  // child cannot be run or did not finish (not cached: it may succeed later).
  VetReport vet(const VetRequest& request);
  // This program as its own vetting child, for a main() that hands kVetArg
  // to vet_child_main (reclaim's, bench-vet's, the engine tests').
  static std::vector<std::string> this_program();
  // The verdict if it is known now, without running anything.
  std::optional<VetReport> known(const VetRequest& request) const;
  // Vets these, one after another, on the vetter's thread (started with it,
  // and idle until then).
  void vet_in_background(std::vector<VetRequest> requests);
  // Until the background queue is empty and its child has finished.
  bool wait_idle(std::chrono::milliseconds timeout) const;
  VetterCounts counts() const;

 private:
  struct Verdict {
    bool running = false;
    bool done = false;
    VetReport report;
  };
  static std::string key(const VetRequest& request, const std::string& identity);
  VetReport vet_impl(const VetRequest& request, bool background);
  VetReport run_child_for(const VetRequest& request);
  void background();
  void stop_thread() noexcept;

  VetterOptions options_;
  Scope scope_;  // the thread, its stop pipe and the child while it runs
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Verdict> verdicts_;
  bool child_running_ = false;  // the one child at a time
  int waiting_requests_ = 0;    // callers of vet() waiting for the child slot
  std::deque<VetRequest> queue_;
  bool background_busy_ = false;
  bool stopping_ = false;
  VetterCounts counts_;
  int stop_pipe_[2] = {-1, -1};  // written on stop: kills a running child
  std::thread thread_;
};

}  // namespace reclaim
