#include "core/scoped_thread.h"

#include <utility>

namespace reclaim {

ScopedThread::~ScopedThread() { stop(); }

void ScopedThread::start(Scope& scope, std::string label, std::function<void()> body, std::function<void()> wake,
                         size_t stack_bytes) {
  Scope::Slot slot = scope.reserve(Kind::thread, std::move(label));
  wake_ = std::move(wake);
  thread_.start(std::move(body), stack_bytes);
  scope_ = &scope;
  // The thread's one release site; if the arm fails, it runs at once.
  cleanup_ = slot.arm(0, [this] { wake_and_join(); });
}

void ScopedThread::wake_and_join() noexcept {
  scope_ = nullptr;  // released: stop() has nothing left to do
  if (wake_) wake_();
  // Stopped from its own thread (a model's decode thread that ends its
  // model's last request, and with it the model): the body returns after
  // the wake, and the join is left to the destructor, on its owner's thread.
  if (!thread_.is_current()) thread_.join();
}

void ScopedThread::stop() noexcept {
  if (scope_ == nullptr) return;
  // Runs wake_and_join through the scope, so that the entry goes with it.
  std::exchange(scope_, nullptr)->release(cleanup_);
}

}  // namespace reclaim
