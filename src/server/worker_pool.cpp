#include "server/worker_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace reclaim::server {

WorkerPool::WorkerPool(Scope& parent, size_t base, size_t max, size_t stack_bytes)
    : base_(std::max<size_t>(1, base)), max_(std::max(max, std::max<size_t>(1, base))), stack_bytes_(stack_bytes),
      scope_(parent, "workers") {
  std::unique_lock lock(mu_);
  for (size_t i = 0; i < base_; ++i) start_locked(true);
}

WorkerPool::~WorkerPool() {
  shutdown();
  scope_.close();
}

void WorkerPool::start_locked(bool stays) {
  Scope::Slot slot = scope_.reserve(Kind::thread, stays ? "http thread" : "http thread for a burst");
  Worker& w = workers_.emplace_back();
  w.stays = stays;
  try {
    // Armed before the thread starts, so that an arm that fails (and runs
    // the release at once) has no thread to wait for.
    w.cleanup = slot.arm(0, [t = &w.thread] { t->join(); });
  } catch (...) {
    workers_.pop_back();
    throw Error("cannot start an HTTP thread: out of memory for its ledger entry");
  }
  try {
    w.thread.start([this, &w] { loop(w); }, stack_bytes_);
  } catch (const Error&) {
    scope_.release(w.cleanup);
    workers_.pop_back();
    throw Error("cannot start an HTTP thread");
  }
  peak_ = std::max(peak_, workers_.size());
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
      // A thread that stays keeps no more stack than it uses between jobs (a
      // job that loaded a model left about 80 KiB on it). Before busy_ goes
      // down, so that a pool found settled has given them back.
      if (w.stays) StackThread::trim_own_stack();
      lock.lock();
      if (--busy_ == 0) settled_cv_.notify_all();
      continue;
    }
    if (shutdown_ || !w.stays) break;
    cv_.wait(lock, [&] { return shutdown_ || !jobs_.empty() || !finished_.empty(); });
  }
  // Handed over to be joined: `w` is an element of workers_, spliced out here.
  for (auto it = workers_.begin(); it != workers_.end(); ++it) {
    if (&*it == &w) {
      finished_.splice(finished_.end(), workers_, it);
      break;
    }
  }
  cv_.notify_all();
}

void WorkerPool::join_locked(std::unique_lock<std::mutex>& lock) {
  while (!finished_.empty()) {
    std::list<Worker> one;
    one.splice(one.end(), finished_, finished_.begin());
    ++joining_;
    lock.unlock();
    scope_.release(one.front().cleanup);  // joins it and unmaps its stack
    lock.lock();
    --joining_;
    settled_cv_.notify_all();
  }
}

bool WorkerPool::wait_settled(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return settled_cv_.wait_for(lock, timeout, [&] {
    return busy_ == 0 && jobs_.empty() && workers_.size() <= base_ && finished_.empty() && joining_ == 0;
  });
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
