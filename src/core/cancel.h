// A cancellation token: set by whoever wants a piece of work stopped (a
// Ctrl-C handler, a deadline, a server whose client went away) and polled by
// the work at points where stopping is cheap (llama.cpp's abort callback,
// between decode steps, the load's progress callback).
//
// cancel() is one lock-free atomic store, so a signal handler may call it.
#pragma once

#include <atomic>
#include <chrono>
#include <limits>

namespace reclaim {

enum class CancelReason : int { none = 0, interrupted, deadline, caller, client_gone };
const char* cancel_reason_name(CancelReason r);

class CancelToken {
 public:
  using Clock = std::chrono::steady_clock;

  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // The first reason wins; later calls do not overwrite it.
  void cancel(CancelReason why = CancelReason::caller) noexcept {
    int expected = 0;
    reason_.compare_exchange_strong(expected, static_cast<int>(why), std::memory_order_acq_rel);
  }
  // After `deadline`, the token reads as cancelled with reason deadline.
  void set_deadline(Clock::time_point deadline) noexcept {
    deadline_ns_.store(deadline.time_since_epoch().count(), std::memory_order_release);
  }
  // Another token whose cancellation cancels this one too (a process-wide
  // Ctrl-C token above a request's own). It must outlive this token.
  void link(const CancelToken* parent) noexcept { parent_.store(parent, std::memory_order_release); }

  bool cancelled() const noexcept { return reason() != CancelReason::none; }
  CancelReason reason() const noexcept {
    int r = reason_.load(std::memory_order_acquire);
    if (r != 0) return static_cast<CancelReason>(r);
    const CancelToken* p = parent_.load(std::memory_order_acquire);
    if (p && p->cancelled()) return p->reason();
    const auto d = deadline_ns_.load(std::memory_order_acquire);
    if (d != kNoDeadline && Clock::now().time_since_epoch().count() >= d) return CancelReason::deadline;
    return CancelReason::none;
  }

  static_assert(std::atomic<int>::is_always_lock_free, "cancel() must be async-signal-safe");

 private:
  static constexpr Clock::rep kNoDeadline = std::numeric_limits<Clock::rep>::max();
  std::atomic<int> reason_{0};
  std::atomic<Clock::rep> deadline_ns_{kNoDeadline};
  std::atomic<const CancelToken*> parent_{nullptr};
};

}  // namespace reclaim
