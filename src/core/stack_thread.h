// A thread on a stack it maps itself and unmaps once joined.
//
// glibc keeps the stacks of threads that ended in a cache (up to 40 MiB) and
// gives them to the next threads, with whatever pages the last one touched
// still resident. Threads that come and go in different roles (a model's
// decode thread, ggml's workers, HTTP threads for a burst) then trade stacks,
// and each stack grows to the deepest page any role touched: the serve-path
// audit saw its residue rise by about 80 KiB a cycle for four cycles before
// it stayed (`reclaim audit --scenario serve --cycles 6 --json F`, with the
// decode thread on a std::thread). A stack given with pthread_attr_setstack
// is never cached: here it is born in start() and released in join().
//
// Under ThreadSanitizer the thread gets glibc's stack: TSan keeps what it
// knew of a stack given with pthread_attr_setstack after the thread ends,
// and takes the next thread's use of the same addresses for a race.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <functional>
#include <memory>

namespace reclaim {

class StackThread {
 public:
  static constexpr size_t kDefaultStack = size_t{8} << 20;  // glibc's default

  StackThread() = default;
  ~StackThread();  // joins
  StackThread(StackThread&& other) noexcept;
  StackThread& operator=(StackThread&& other) noexcept;
  StackThread(const StackThread&) = delete;
  StackThread& operator=(const StackThread&) = delete;

  // Maps a stack of `stack_bytes` (and a guard page below it) and runs
  // `body` on it. Throws Error if either cannot be had; nothing is left then.
  void start(std::function<void()> body, size_t stack_bytes = kDefaultStack);
  // Waits for the body to return and unmaps the stack. Idempotent.
  void join() noexcept;
  bool joinable() const { return running_; }
  // Whether the calling thread is this one (it cannot join itself).
  bool is_current() const;

  // Called on a StackThread, gives back the pages of its stack below the
  // caller's frame: a thread that stays (an HTTP worker between jobs) keeps
  // only what it uses now, not the deepest its jobs ever went. Elsewhere, or
  // under TSan, does nothing.
  static void trim_own_stack() noexcept;

 private:
  struct Start {
    std::function<void()> body;
    char* low = nullptr;  // the usable stack's lowest byte; null: glibc's
  };
  static void* main(void* start);

  pthread_t thread_{};
  void* stack_ = nullptr;  // the mapping, guard page included
  size_t stack_size_ = 0;
  bool running_ = false;
  std::unique_ptr<Start> start_;  // where the thread reads its body
};

}  // namespace reclaim
