// The HTTP server's threads: a few that stay, and more, up to a cap, that
// start when every thread is busy and end as soon as they find no work.
//
// httplib gives each connection one thread for its whole life, and a
// completion holds its thread while it waits for a model and while it
// streams. A fixed pool full of completions left /health waiting behind them
// (26.8 s behind 40 streams on 9 threads; ServeScheduling.ControlAnswersAt-
// OnceAndCompletionsPastTheQueueAre429AtOnce checks it). Here a connection finds a
// thread at once while fewer than `max` are open; the registry bounds how
// many completions may wait (429 past --parallel + --max-queue), so the cap
// is only reached by a flood of connections.
//
// Each thread runs on a stack of its own (core/stack_thread.h), which glibc
// does not keep after a burst. A thread is born in start_locked() and
// released (joined, its stack unmapped) by its cleanup in the pool's scope,
// which join_locked() runs: every thread is on the ledger while it lives.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <vector>

#include "core/scope.h"
#include "core/stack_thread.h"

namespace reclaim::server {

class WorkerPool {
 public:
  // The threads are on the ledger in a scope "workers" under `parent`.
  WorkerPool(Scope& parent, size_t base, size_t max, size_t stack_bytes = size_t{8} << 20);
  ~WorkerPool();  // shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Never blocks: the job runs on an idle thread, a new one, or (at the cap)
  // the first thread that is done. Jobs after shutdown() are dropped.
  void enqueue(std::function<void()> job);
  // Runs the jobs queued, then joins every thread. Idempotent.
  void shutdown();
  // Until no job runs or waits and the threads that started for a burst are
  // joined and their stacks unmapped: the pool as it was before the burst
  // (the audit measures the process there). False past `timeout`.
  bool wait_settled(std::chrono::milliseconds timeout);

  size_t threads() const;  // running now
  size_t busy() const;     // running a job now
  size_t queued() const;   // waiting for a thread (at the cap)
  size_t peak() const;     // most threads at once since the start

 private:
  struct Worker {
    StackThread thread;
    bool stays = false;  // one of the `base` threads
    CleanupId cleanup = 0;
  };
  void loop(Worker& w);
  void start_locked(bool stays);
  void join_locked(std::unique_lock<std::mutex>& lock);

  const size_t base_, max_, stack_bytes_;
  Scope scope_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable settled_cv_;  // busy_ or joining_ went down
  std::deque<std::function<void()>> jobs_;
  // Lists, so that a worker keeps its address (its cleanup and its thread's
  // body point to it) when it is spliced from one to the other.
  std::list<Worker> workers_;      // running
  std::list<Worker> finished_;     // returned from loop(), to be joined
  size_t busy_ = 0, peak_ = 0;
  size_t joining_ = 0;             // taken from finished_, not yet joined and unmapped
  bool shutdown_ = false;
};

}  // namespace reclaim::server
