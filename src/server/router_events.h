// The events of llama-server's router's GET /models/sse that are not a
// model's state (each listener reads those off the registry as they
// change): a download's progress and its end, `{"model", "event", "data"}`.
//
// Kept in a ring of the last kKept, each with a number: a listener reads the
// events after the last it read, and one that falls more than kKept behind
// misses the oldest. A listener costs no memory here, and a slow one
// cannot make the ring grow.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

namespace reclaim::server {

class EventRing {
 public:
  static constexpr size_t kKept = 256;

  void publish(nlohmann::json event);
  // The events numbered `next` and on that the ring still holds, waiting up
  // to `wait` for one; `next` is moved past them.
  std::vector<nlohmann::json> read(uint64_t& next, std::chrono::milliseconds wait);
  // The number the next event will have: where a new listener starts.
  uint64_t end() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> events_;
  uint64_t first_ = 0;  // the number of events_.front()
};

}  // namespace reclaim::server
