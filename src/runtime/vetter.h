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
// One file is vetted at a time, on the vetter's own thread, by two children
// at once (engine/vet.h's parts); a file a caller waits for goes before the
// background queue.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/scope.h"
#include "core/scoped_thread.h"
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
  uint64_t children = 0;  // vettings run (each is two processes)
  uint64_t cached = 0;    // verdicts given from the cache
  uint64_t refused = 0;   // files found unfit (each once)
  double last_ms = 0;     // the last vetting's time, start to verdict
  uint64_t queued = 0;    // files waiting to be vetted
  bool running = false;   // a file is being vetted now
  uint64_t kept = 0;      // verdicts held (one a file and request: a file's latest version)
};

class Vetter {
 public:
  explicit Vetter(VetterOptions options);
  ~Vetter();  // stops the background queue and kills a child that runs
  Vetter(const Vetter&) = delete;
  Vetter& operator=(const Vetter&) = delete;

  // The verdict for `request`'s file as it is now. Throws InvalidModelFile
  // when the file is unfit (also from the cache, at no cost), Error when the
  // children cannot be run or did not finish (not cached: it may succeed
  // later).
  VetReport vet(const VetRequest& request);
  // As vet(), but returns as soon as the file is known to load: the estimate
  // is made and a child has loaded it for real, while that child goes on to
  // make a context and decode. The caller may load the file then, and calls
  // vet() before it makes a context of it (Registry does).
  VetReport vet_to_load(const VetRequest& request);
  // This program as its own vetting child, for a main() that hands kVetArg
  // to vet_child_main (reclaim's, bench-vet's, the engine tests').
  static std::vector<std::string> this_program();
  // The verdict if it is known now, without running anything.
  std::optional<VetReport> known(const VetRequest& request) const;
  // Vets these, one after another, after any a caller waits for.
  void vet_in_background(std::vector<VetRequest> requests);
  // Until the background queue is empty and its children have finished.
  bool wait_idle(std::chrono::milliseconds timeout) const;
  VetterCounts counts() const;

 private:
  enum class Phase { queued, running, loadable, done, failed };
  struct Verdict {
    Phase phase = Phase::queued;
    int attempt = 0;           // which run of the children this is
    VetRequest request;        // what the worker runs
    VetReport report;          // loadable: the estimate; done: the verdict
    std::exception_ptr error;  // failed: why no verdict came
  };
  static std::string key(const VetRequest& request, const std::string& identity);
  VetReport wait_for(const VetRequest& request, bool to_load);
  // Puts `k` in a queue unless it is there, running or known.
  void enqueue_locked(const std::string& k, const VetRequest& request, bool urgent);
  // Drops the ended verdicts of the same request for other versions of its file.
  void forget_other_versions_locked(const std::string& k);
  VetReport run_children(const std::string& k, const VetRequest& request);
  void publish_loadable(const std::string& k, const VetReport& estimate);
  // One child, for one part; `on_line` sees its stdout as it comes.
  VetReport run_part(const VetRequest& request, std::function<void(const std::string&)> on_line);
  void work();
  void wake_to_stop() noexcept;  // the thread returns, its children are killed

  VetterOptions options_;
  Scope scope_;  // the thread, its stop pipe and the children while they run
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Verdict> verdicts_;
  std::deque<std::string> urgent_;      // keys a caller waits for: first
  std::deque<std::string> background_;  // keys vet_in_background gave
  bool busy_ = false;                   // the worker runs children
  bool stopping_ = false;
  VetterCounts counts_;
  int stop_pipe_[2] = {-1, -1};  // written on stop: kills running children
  ScopedThread thread_;
};

}  // namespace reclaim
