// A local defer in the shape of absl::Cleanup: for releases that belong to one
// block and need no ledger entry (a temporary buffer, a FILE* while writing).
// Resources that outlive a block belong in a Scope instead.
#pragma once

#include <utility>

namespace reclaim {

template <class F>
class [[nodiscard]] Defer {
 public:
  explicit Defer(F fn) : fn_(std::move(fn)) {}
  Defer(Defer&& other) noexcept : fn_(std::move(other.fn_)), armed_(std::exchange(other.armed_, false)) {}
  Defer(const Defer&) = delete;
  Defer& operator=(const Defer&) = delete;
  Defer& operator=(Defer&&) = delete;
  ~Defer() {
    if (armed_) fn_();
  }

  // Ownership moved elsewhere: do not run.
  void cancel() && { armed_ = false; }
  // Run now, once.
  void invoke() && {
    if (std::exchange(armed_, false)) fn_();
  }

 private:
  F fn_;
  bool armed_ = true;
};

}  // namespace reclaim
