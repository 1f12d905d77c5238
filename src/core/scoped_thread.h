// A long-lived thread owned by a scope: on the ledger from before it starts
// until it is joined, with the wake that makes its body return. The one way
// reclaim starts a thread that lives as long as its owner (the registry's
// keep-alive reaper, the vetter's thread, a model's decode thread, the HTTP
// side's read-timeout watchdog and history sampler, serve's accept loop).
//
//   reaper_.start(scope_, "keep-alive reaper", [this] { reaper(); },
//                 [this] { set stopping_ under the lock; notify; });
//
// stop(), the scope's close and the destructor, whichever comes first, run
// the wake and join; the others then do nothing. Stopped from its own
// thread, it is woken, and joined when it is destroyed. The thread runs on a
// stack of its own (core/stack_thread.h). Not here: the HTTP workers, which
// come and go with bursts and are joined by the workers that stay
// (server/worker_pool.h).
#pragma once

#include <functional>
#include <string>

#include "core/scope.h"
#include "core/stack_thread.h"

namespace reclaim {

class ScopedThread {
 public:
  ScopedThread() = default;
  ~ScopedThread();  // stop()
  ScopedThread(const ScopedThread&) = delete;
  ScopedThread& operator=(const ScopedThread&) = delete;

  // Reserves the ledger entry `label` in `scope`, starts `body`, and arms
  // the release: `wake` (which must make `body` return), then the join.
  // Throws Error if the entry or the thread cannot be had; nothing is left
  // then. The scope must outlive the thread, or close first.
  void start(Scope& scope, std::string label, std::function<void()> body, std::function<void()> wake,
             size_t stack_bytes = StackThread::kDefaultStack);
  // Wakes and joins the thread, and takes it off the ledger. Idempotent.
  void stop() noexcept;

 private:
  void wake_and_join() noexcept;

  Scope* scope_ = nullptr;  // null once stopped
  CleanupId cleanup_ = 0;
  std::function<void()> wake_;
  StackThread thread_;
};

}  // namespace reclaim
