// The registry's lock given up for a block (a load, an estimate, a poll of
// a client) and taken again however the block ends, an exception included:
// whoever called with the lock held goes on with it held.
#pragma once

#include <mutex>

namespace reclaim {

class Unlocked {
 public:
  explicit Unlocked(std::unique_lock<std::mutex>& lock) : lock_(lock) { lock_.unlock(); }
  ~Unlocked() { lock_.lock(); }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  std::unique_lock<std::mutex>& lock_;
};

}  // namespace reclaim
