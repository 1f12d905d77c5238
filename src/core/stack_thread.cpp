#include "core/stack_thread.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "core/error.h"

namespace reclaim {

namespace {
#if defined(__SANITIZE_THREAD__)
constexpr bool kOwnStacks = false;
#else
constexpr bool kOwnStacks = true;
#endif

thread_local char* t_stack_low = nullptr;  // this thread's, when it is a StackThread
}  // namespace

StackThread::~StackThread() { join(); }

StackThread::StackThread(StackThread&& other) noexcept
    : thread_(other.thread_), stack_(std::exchange(other.stack_, nullptr)),
      stack_size_(std::exchange(other.stack_size_, 0)), running_(std::exchange(other.running_, false)),
      start_(std::move(other.start_)) {}

StackThread& StackThread::operator=(StackThread&& other) noexcept {
  if (this != &other) {
    join();
    thread_ = other.thread_;
    stack_ = std::exchange(other.stack_, nullptr);
    stack_size_ = std::exchange(other.stack_size_, 0);
    running_ = std::exchange(other.running_, false);
    start_ = std::move(other.start_);
  }
  return *this;
}

void StackThread::start(std::function<void()> body, size_t stack_bytes) {
  if (running_) throw Error("a StackThread is started once");
  auto owned = std::make_unique<Start>();
  owned->body = std::move(body);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t size = stack_bytes + page;
  void* stack = nullptr;
  if (kOwnStacks) {
    stack = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) throw Error("cannot map a thread's stack");
    // The lowest page faults instead of letting an overflow write below.
    ::mprotect(stack, page, PROT_NONE);
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack) {
    owned->low = static_cast<char*>(stack) + page;
    pthread_attr_setstack(&attr, owned->low, stack_bytes);
  }
  const int rc = pthread_create(&thread_, &attr, &StackThread::main, owned.get());
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    if (stack) ::munmap(stack, size);
    throw Error("cannot start a thread");
  }
  stack_ = stack;
  stack_size_ = size;
  start_ = std::move(owned);
  running_ = true;
}

void* StackThread::main(void* start) {
  auto* s = static_cast<Start*>(start);
  t_stack_low = s->low;
  s->body();
  return nullptr;
}

void StackThread::trim_own_stack() noexcept {
  if (!t_stack_low) return;
  char here;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // A page of room below this frame for the madvise call itself.
  const uintptr_t top = (reinterpret_cast<uintptr_t>(&here) & ~(page - 1)) - page;
  const auto low = reinterpret_cast<uintptr_t>(t_stack_low);
  if (top > low) ::madvise(t_stack_low, top - low, MADV_DONTNEED);
}

void StackThread::join() noexcept {
  if (!running_) return;
  pthread_join(thread_, nullptr);
  running_ = false;
  if (stack_) ::munmap(stack_, stack_size_);
  stack_ = nullptr;
  start_.reset();
}

bool StackThread::is_current() const { return running_ && pthread_equal(thread_, pthread_self()) != 0; }

}  // namespace reclaim
