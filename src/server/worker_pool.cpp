#include "server/worker_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace reclaim::server {

WorkerPool::WorkerPool(size_t base, size_t max, size_t stack_bytes)
    : base_(std::max<size_t>(1, base)), max_(std::max(max, std::max<size_t>(1, base))), stack_bytes_(stack_bytes) {
  std::unique_lock lock(mu_);
  for (size_t i = 0; i < base_; ++i) start_locked(true);
}

WorkerPool::~WorkerPool() { shutdown(); }

namespace {
#if defined(__SANITIZE_THREAD__)
// TSan keeps what it knew of a stack given with pthread_attr_setstack after
// the thread ends, and takes the next thread's use of the same addresses for
// a race with the last one's; its threads get glibc's stacks.
constexpr bool kOwnStacks = false;
#else
constexpr bool kOwnStacks = true;
#endif
}  // namespace

void WorkerPool::start_locked(bool stays) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t size = stack_bytes_ + page;
  void* stack = nullptr;
  if (kOwnStacks) {
    stack = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) throw Error("cannot map a stack for an HTTP thread");
    // The lowest page faults instead of letting an overflow write below.
    ::mprotect(stack, page, PROT_NONE);
  }
  Worker& w = workers_.emplace_back();
  w.pool = this;
  w.stack = stack;
  w.stack_size = size;
  w.stays = stays;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack) pthread_attr_setstack(&attr, static_cast<char*>(stack) + page, stack_bytes_);
  const int rc = pthread_create(&w.thread, &attr, &WorkerPool::main, &w);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    if (stack) ::munmap(stack, size);
    workers_.pop_back();
    throw Error("cannot start an HTTP thread");
  }
  peak_ = std::max(peak_, workers_.size());
}

void* WorkerPool::main(void* worker) {
  auto* w = static_cast<Worker*>(worker);
  w->pool->loop(*w);
  return nullptr;
}

void WorkerPool::loop(Worker& w) {
  std::unique_lock lock(mu_);
  for (;;) {
    // The threads that stay join the ones that ended, so that their stacks
    // go back while the pool is idle.
    if (w.stays) join_locked(lock);
    if (!jobs_.empty()) {
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      ++busy_;
      lock.unlock();
      job();
      job = nullptr;  // its captures go here, not under the lock
      lock.lock();
      --busy_;
      continue;
    }
    if (shutdown_ || !w.stays) break;
    cv_.wait(lock, [&] { return shutdown_ || !jobs_.empty() || !finished_.empty(); });
  }
  // Handed over to be joined: `w` is an element of workers_, moved out here.
  for (auto it = workers_.begin(); it != workers_.end(); ++it) {
    if (&*it == &w) {
      finished_.push_back(*it);
      workers_.erase(it);
      break;
    }
  }
  cv_.notify_all();
}

void WorkerPool::join_locked(std::unique_lock<std::mutex>& lock) {
  while (!finished_.empty()) {
    Worker w = finished_.back();
    finished_.pop_back();
    lock.unlock();
    pthread_join(w.thread, nullptr);
    if (w.stack) ::munmap(w.stack, w.stack_size);
    lock.lock();
  }
}

void WorkerPool::enqueue(std::function<void()> job) {
  std::unique_lock lock(mu_);
  if (shutdown_) return;
  jobs_.push_back(std::move(job));
  const size_t idle = workers_.size() - busy_;
  if (idle < jobs_.size() && workers_.size() < max_) {
    try {
      start_locked(false);
    } catch (const Error& e) {
      // The job waits for a thread that is running.
      std::fprintf(stderr, "reclaim: %s\n", e.what());
    }
  }
  cv_.notify_one();
}

void WorkerPool::shutdown() {
  std::unique_lock lock(mu_);
  if (shutdown_ && workers_.empty() && finished_.empty()) return;
  shutdown_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return workers_.empty(); });
  join_locked(lock);
}

size_t WorkerPool::threads() const {
  std::lock_guard lock(mu_);
  return workers_.size();
}
size_t WorkerPool::busy() const {
  std::lock_guard lock(mu_);
  return busy_;
}
size_t WorkerPool::queued() const {
  std::lock_guard lock(mu_);
  return jobs_.size();
}
size_t WorkerPool::peak() const {
  std::lock_guard lock(mu_);
  return peak_;
}

}  // namespace reclaim::server
